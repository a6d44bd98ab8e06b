"""The Pulumi program under Pulumi's mocks: resources, both markets, AZ choice, tags and outputs."""

from __future__ import annotations

import importlib.machinery
import runpy
import sys
from pathlib import Path

import pulumi
import pytest

from infra.stack_config import DLAMI_SSM_PARAMETER

INSTANCE = "aws:ec2/instance:Instance"
SECURITY_GROUP = "aws:ec2/securityGroup:SecurityGroup"
KEY_PAIR = "aws:ec2/keyPair:KeyPair"
SPOT_PRICE = "aws:ec2/getSpotPrice:getSpotPrice"
SSM_PARAMETER = "aws:ssm/getParameter:getParameter"


def test_every_aws_resource_is_a_child_of_the_gpu_rig(run_program, base_config):
    mocks, _ = run_program(base_config)
    aws_urns = [urn for urn in mocks.urns() if "aws:ec2/" in urn]
    assert len(aws_urns) == 3, aws_urns
    for urn in aws_urns:
        assert "rigbench:infra:GpuRig$aws:ec2/" in urn, f"{urn} is not parented by the GpuRig component"
    assert {r.typ for r in mocks.resources} == {"rigbench:infra:GpuRig", INSTANCE, SECURITY_GROUP, KEY_PAIR}


def test_spot_instance_defaults(fake, run_program, base_config):
    mocks, _ = run_program(base_config)
    inputs = mocks.one(INSTANCE).inputs
    assert inputs["instanceType"] == "g6.xlarge"
    assert inputs["instanceMarketOptions"] == {
        "marketType": "spot",
        "spotOptions": {"spotInstanceType": "one-time", "instanceInterruptionBehavior": "terminate"},
    }
    assert inputs["instanceInitiatedShutdownBehavior"] == "terminate"
    assert inputs["metadataOptions"]["httpTokens"] == "required"
    root = inputs["rootBlockDevice"]
    assert (root["volumeType"], root["volumeSize"], root["encrypted"]) == ("gp3", 200, True)
    assert root["deleteOnTermination"] is True
    assert inputs["ami"] == fake.AMI_FROM_SSM
    assert inputs["associatePublicIpAddress"] is True
    assert inputs["keyName"] == "rig-key-8f2a"  # the key pair's name, as the mock engine gave it
    assert inputs["vpcSecurityGroupIds"] == ["rig-ssh-id"]
    assert inputs["userData"].startswith("#!/bin/bash")
    assert inputs["userDataReplaceOnChange"] is True
    ssm_calls = [args for token, args in mocks.calls if token == SSM_PARAMETER]
    assert [c["name"] for c in ssm_calls] == [DLAMI_SSM_PARAMETER]


def test_spot_max_price_is_passed_on(run_program, base_config):
    mocks, _ = run_program({**base_config, "spotMaxPrice": "0.6"})
    spot = mocks.one(INSTANCE).inputs["instanceMarketOptions"]["spotOptions"]
    assert spot["maxPrice"] == "0.6"


def test_on_demand_has_no_market_options_and_no_spot_lookups(run_program, base_config):
    mocks, outputs = run_program({**base_config, "market": "on-demand", "instanceType": "g6.2xlarge"})
    inputs = mocks.one(INSTANCE).inputs
    assert "instanceMarketOptions" not in inputs
    assert SPOT_PRICE not in mocks.tokens()
    assert outputs["market"] == "on-demand"
    assert "spotPriceAtLaunch" not in outputs
    # On-demand costs the same in every AZ: the first AZ that offers the type.
    assert outputs["availabilityZone"] == "us-east-1a"
    assert inputs["subnetId"] == "subnet-1a"
    assert "RIGBENCH_MARKET:=on-demand" in inputs["userData"]


def test_cheapest_az_is_the_lowest_spot_price_among_offering_azs(fake, run_program, base_config):
    mocks = fake.RigMocks(
        offered=["us-east-1a", "us-east-1c", "us-east-1f"],
        spot_prices={"us-east-1a": 0.51, "us-east-1b": 0.10, "us-east-1c": 0.37, "us-east-1f": 0.44},
    )
    mocks, outputs = run_program({**base_config, "instanceType": "g6.2xlarge"}, mocks)
    # us-east-1b is cheaper but does not offer the type, so it is never asked about.
    asked = [args["availabilityZone"] for token, args in mocks.calls if token == SPOT_PRICE]
    assert sorted(asked) == ["us-east-1a", "us-east-1c", "us-east-1f"]
    assert all(args["instanceType"] == "g6.2xlarge" for token, args in mocks.calls if token == SPOT_PRICE)
    assert outputs["availabilityZone"] == "us-east-1c"
    assert outputs["spotPriceAtLaunch"] == 0.37
    assert mocks.one(INSTANCE).inputs["subnetId"] == "subnet-1c"
    assert mocks.one(INSTANCE).inputs["availabilityZone"] == "us-east-1c"


def test_cheapest_az_skips_azs_without_a_published_price(fake, run_program, base_config):
    mocks = fake.RigMocks(spot_prices={"us-east-1d": 0.61})
    _, outputs = run_program(base_config, mocks)
    assert outputs["availabilityZone"] == "us-east-1d"


def test_explicit_az_is_used_and_only_its_price_is_asked(run_program, base_config):
    mocks, outputs = run_program({**base_config, "az": "us-east-1d"})
    asked = [args["availabilityZone"] for token, args in mocks.calls if token == SPOT_PRICE]
    assert asked == ["us-east-1d"]
    assert outputs["availabilityZone"] == "us-east-1d"
    assert outputs["spotPriceAtLaunch"] == 0.8393


def test_security_group_allows_ssh_from_the_allowed_cidrs_only(run_program, base_config):
    config = {**base_config, "allowedCidrs": '["203.0.113.7/32", "198.51.100.0/24", "2001:db8::/64"]'}
    mocks, _ = run_program(config)
    group = mocks.one(SECURITY_GROUP).inputs
    assert group["vpcId"] == "vpc-0default"
    [rule] = group["ingress"]
    assert (rule["protocol"], rule["fromPort"], rule["toPort"]) == ("tcp", 22, 22)
    assert rule["cidrBlocks"] == ["203.0.113.7/32", "198.51.100.0/24"]
    assert rule["ipv6CidrBlocks"] == ["2001:db8::/64"]


def test_open_ssh_is_accepted_with_the_opt_in(run_program, base_config):
    mocks, _ = run_program({**base_config, "allowedCidrs": "0.0.0.0/0", "allowOpenSsh": "true"})
    [rule] = mocks.one(SECURITY_GROUP).inputs["ingress"]
    assert rule["cidrBlocks"] == ["0.0.0.0/0"]


def test_tags_on_every_resource_and_the_root_volume(fake, run_program, base_config):
    mocks, _ = run_program({**base_config, "ttlHours": "12", "owner": "ada"})
    expected = {
        "project": "rigbench",
        "stack": fake.STACK,
        "owner": "ada",
        "rigbench:ttl-hours": "12",
        "rigbench:expires-at": "2026-11-30T16:00:00Z",
    }
    tagged = [r.inputs["tags"] for r in mocks.resources if r.typ.startswith("aws:")]
    tagged.append(mocks.one(INSTANCE).inputs["rootBlockDevice"]["tags"])
    assert len(tagged) == 4
    for tags in tagged:
        assert expected.items() <= tags.items(), tags


def test_outputs(fake, run_program, base_config, public_key_file):
    _, outputs = run_program({**base_config, "instanceType": "g6.2xlarge"})
    private_key = str(public_key_file)[: -len(".pub")]
    assert outputs == {
        "instanceId": "rig-instance-id",
        "publicIp": fake.PUBLIC_IP,
        "publicDns": "ec2-198-51-100-23.compute-1.amazonaws.com",
        "sshUser": "ubuntu",
        "sshCommand": f"ssh -i {private_key} -o StrictHostKeyChecking=accept-new ubuntu@{fake.PUBLIC_IP}",
        "availabilityZone": "us-east-1b",
        "instanceType": "g6.2xlarge",
        "market": "spot",
        "gpuName": "NVIDIA L4",
        "gpuMemoryGib": 24,
        "computeCapability": "8.9",
        "nvmePath": "/opt/dlami/nvme",
        "amiId": fake.AMI_FROM_SSM,
        "launchTime": fake.LAUNCH_TIME,
        "ttlHours": 8,
        "onDemandUsdPerHour": 0.9776,
        "setupMarker": "/var/lib/rigbench/setup-complete.json",
        "spotPriceAtLaunch": 0.3921,
    }


def test_ssh_command_without_a_key_file_names_no_key(fake, run_program, base_config, public_key_file):
    config = {**base_config, "publicKey": public_key_file.read_text().strip(), "sshUser": "ec2-user"}
    del config["publicKeyPath"]
    mocks, outputs = run_program(config)
    assert outputs["sshCommand"] == f"ssh -o StrictHostKeyChecking=accept-new ec2-user@{fake.PUBLIC_IP}"
    assert mocks.one(KEY_PAIR).inputs["publicKey"] == public_key_file.read_text().strip()


def test_explicit_ami_skips_the_ssm_lookup_and_the_dlami_wait(run_program, base_config):
    mocks, outputs = run_program({**base_config, "amiId": "ami-0123456789abcdef0"})
    assert SSM_PARAMETER not in mocks.tokens()
    assert outputs["amiId"] == "ami-0123456789abcdef0"
    user_data = mocks.one(INSTANCE).inputs["userData"]
    assert "RIGBENCH_EXPECT_DLAMI_NVME:=0" in user_data


@pytest.mark.parametrize("parameter", [DLAMI_SSM_PARAMETER.replace("base-oss-nvidia-driver", "pytorch-2.7-oss-nvidia")])
def test_ssm_parameter_path_is_configurable(run_program, base_config, parameter):
    mocks, _ = run_program({**base_config, "amiSsmParameter": parameter})
    assert [args["name"] for token, args in mocks.calls if token == SSM_PARAMETER] == [parameter]
    assert "RIGBENCH_EXPECT_DLAMI_NVME:=1" in mocks.one(INSTANCE).inputs["userData"]


@pytest.mark.parametrize("instance_type", ["g4dn.xlarge", "g5.2xlarge", "g6e.2xlarge", "g6.12xlarge"])
def test_other_gpu_types(run_program, base_config, instance_type):
    mocks, outputs = run_program({**base_config, "instanceType": instance_type})
    assert mocks.one(INSTANCE).inputs["instanceType"] == instance_type
    assert outputs["instanceType"] == instance_type


def test_the_entry_point_pulumi_runs_declares_the_rig(use_stack, base_config, monkeypatch):
    """infra/__main__.py, run the way Pulumi runs a program folder (its folder first on sys.path)."""
    infra_dir = Path(__file__).resolve().parents[2] / "infra"
    monkeypatch.setattr(sys, "path", [str(infra_dir), *sys.path])
    mocks = use_stack(base_config)

    @pulumi.runtime.test
    def program():
        runpy.run_path(str(infra_dir), run_name="__main__")

    program()
    assert mocks.one(INSTANCE).inputs["instanceType"] == "g6.xlarge"


def test_no_program_module_shadows_a_top_level_module():
    """Pulumi puts infra/ first on sys.path: a module there named like one of the virtualenv's
    top-level modules (``config``, say) would be imported in its place."""
    infra_dir = Path(__file__).resolve().parents[2] / "infra"
    names = sorted(path.stem for path in infra_dir.glob("*.py") if path.stem != "__init__")
    elsewhere = [entry for entry in sys.path if Path(entry or ".").resolve() != infra_dir]
    shadowed = [name for name in names if importlib.machinery.PathFinder.find_spec(name, elsewhere) is not None]
    shadowed += [name for name in names if name in sys.builtin_module_names or name in sys.stdlib_module_names]
    assert not shadowed, f"infra/ modules named like top-level modules: {shadowed}; rename them"


def test_preview_declares_the_same_rig(run_program, base_config):
    mocks, outputs = run_program(base_config, preview=True)
    assert mocks.one(INSTANCE).inputs["instanceType"] == "g6.xlarge"
    assert outputs["availabilityZone"] == "us-east-1b"
