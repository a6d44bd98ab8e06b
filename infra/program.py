"""The Pulumi program: config -> checks and look-ups -> one GpuRig -> stack outputs.

``deploy()`` is what ``infra/__main__.py`` runs, and what the tests run under Pulumi's mocks.
All checks and look-ups (config, public key, offerings, spot prices, subnet, AMI) happen before
the first resource is declared, so bad input stops the preview and creates nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pulumi
import pulumi_aws as aws

from core.errors import InfraError
from core.rig_setup import SETUP_MARKER
from infra.gpu_rig import GpuRig, GpuRigArgs
from infra.placement import Placement, choose_placement
from infra.stack_config import PROJECT, RigConfig, load_rig_config, read_public_key
from infra.user_data import UserDataSettings, render_user_data

RIG_NAME = "rig"
BUILD_CACHE_NAME = "build-cache"


def resolve_ami(config: RigConfig) -> str:
    """The explicit ``amiId``, or the AMI id the SSM parameter (the DLAMI by default) points at."""
    if config.ami_id:
        return config.ami_id
    value = aws.ssm.get_parameter(name=config.ami_ssm_parameter).value
    if not value or not value.startswith("ami-"):
        raise InfraError(
            f"config key {PROJECT}:amiSsmParameter: {config.ami_ssm_parameter} holds {value!r}, not an AMI id; "
            "expected a parameter such as the DLAMI's .../latest/ami-id, or set amiId"
        )
    return value


def rig_tags(config: RigConfig, stack: str, now: datetime) -> dict[str, str]:
    """Tags on every resource: who owns it, which stack, and when its TTL ends."""
    expires = (now + timedelta(hours=config.ttl_hours)).astimezone(UTC)
    return {
        "project": PROJECT,
        "stack": stack,
        "owner": config.owner,
        "rigbench:ttl-hours": str(config.ttl_hours),
        "rigbench:expires-at": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def ssh_command(config: RigConfig, host: pulumi.Input[str]) -> pulumi.Output[str]:
    """A command the user can paste: the private key beside the public key file, if it is named so."""
    key = f"-i {config.private_key_hint} " if config.private_key_hint else ""
    return pulumi.Output.concat("ssh ", key, "-o StrictHostKeyChecking=accept-new ", config.ssh_user, "@", host)


def build_cache_bucket(config: RigConfig, stack: str) -> pulumi.Input[str] | None:
    """The shared llama.cpp build cache's bucket name, or None without one. With
    ``buildCacheBucketCreate`` this stack declares it, private and retained on delete: the cache
    outlives the rig (and this stack), which is what makes it worth having."""
    if not config.build_cache_bucket:
        return None
    if not config.build_cache_bucket_create:
        return config.build_cache_bucket
    tags = {"project": PROJECT, "stack": stack, "owner": config.owner}
    bucket = aws.s3.Bucket(BUILD_CACHE_NAME, bucket=config.build_cache_bucket, tags=tags,
                           opts=pulumi.ResourceOptions(retain_on_delete=True))
    aws.s3.BucketPublicAccessBlock(
        f"{BUILD_CACHE_NAME}-private",
        bucket=bucket.id,
        block_public_acls=True,
        block_public_policy=True,
        ignore_public_acls=True,
        restrict_public_buckets=True,
        opts=pulumi.ResourceOptions(retain_on_delete=True),
    )
    return bucket.bucket


def deploy(now: datetime | None = None) -> dict[str, pulumi.Input]:
    """Declare the rig of the current stack, export its outputs and return them (for tests)."""
    config = load_rig_config()
    public_key = read_public_key(config)
    placement: Placement = choose_placement(config)
    ami_id = resolve_ami(config)
    user_data = render_user_data(
        UserDataSettings(
            nvme_path=config.nvme_path,
            owner_user=config.ssh_user,
            ttl_hours=config.ttl_hours,
            market=config.market,
            expect_dlami_nvme=config.ami_id is None and "/deeplearning/" in config.ami_ssm_parameter,
        )
    )
    gpu = config.gpu
    rig = GpuRig(
        RIG_NAME,
        GpuRigArgs(
            instance_type=gpu,
            market=config.market,
            ami_id=ami_id,
            availability_zone=placement.availability_zone,
            vpc_id=placement.vpc_id,
            subnet_id=placement.subnet_id,
            public_key=public_key,
            user_data=user_data,
            tags=rig_tags(config, pulumi.get_stack(), now or datetime.now(UTC)),
            ipv4_cidrs=config.ipv4_cidrs,
            ipv6_cidrs=config.ipv6_cidrs,
            root_volume_gb=config.root_volume_gb,
            spot_max_price=config.spot_max_price,
        ),
    )
    outputs: dict[str, pulumi.Input] = {
        "instanceId": rig.instance.id,
        "publicIp": rig.instance.public_ip,
        "publicDns": rig.instance.public_dns,
        "sshUser": config.ssh_user,
        "sshCommand": ssh_command(config, rig.instance.public_ip),
        "availabilityZone": placement.availability_zone,
        "instanceType": gpu.name,
        "market": config.market,
        "gpuName": gpu.gpu_name,
        "gpuMemoryGib": gpu.gpu_memory_gib,
        "computeCapability": gpu.compute_capability,
        "nvmePath": config.nvme_path,
        "amiId": ami_id,
        "launchTime": rig.launch_time,
        "ttlHours": config.ttl_hours,
        "onDemandUsdPerHour": gpu.on_demand_usd_per_hour,
        "setupMarker": SETUP_MARKER,
    }
    if config.market == "spot":
        outputs["spotPriceAtLaunch"] = placement.spot_price_usd_per_hour
    bucket = build_cache_bucket(config, pulumi.get_stack())
    if bucket is not None:
        outputs["buildCacheBucket"] = bucket
    if config.market == "spot" and config.az == "best":
        outputs["spotPlacementScore"] = placement.spot_placement_score
    for key, value in outputs.items():
        pulumi.export(key, value)
    return outputs
