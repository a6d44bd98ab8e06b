"""GpuRig: the one component that owns every resource of a rig.

Everything billable or reachable (key pair, security group, instance with its root volume) is a
child of the component, so ``pulumi destroy`` of the stack removes all of it; the instance-store
NVMe goes with the instance. Nothing is created inside ``apply``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_aws as aws

from core.instance_types import InstanceType

COMPONENT_TYPE = "rigbench:infra:GpuRig"
SSH_PORT = 22
# Tags whose value is fixed at creation: a later `pulumi up` must not move the stated expiry.
CREATION_ONLY_TAGS = ("rigbench:expires-at",)


@dataclass
class GpuRigArgs:
    """Everything the rig needs, already validated and looked up (see infra/program.py)."""

    instance_type: InstanceType
    market: str
    ami_id: str
    availability_zone: str
    vpc_id: str
    subnet_id: str
    public_key: str
    user_data: str
    tags: dict[str, str]
    ipv4_cidrs: list[str] = field(default_factory=list)
    ipv6_cidrs: list[str] = field(default_factory=list)
    root_volume_gb: int = 200
    spot_max_price: float | None = None


class GpuRig(pulumi.ComponentResource):
    """A GPU instance on spot or on-demand, reachable by SSH from the allowed networks only."""

    key_pair: aws.ec2.KeyPair
    security_group: aws.ec2.SecurityGroup
    instance: aws.ec2.Instance

    def __init__(self, name: str, args: GpuRigArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(COMPONENT_TYPE, name, None, opts)
        child = pulumi.ResourceOptions(parent=self, ignore_changes=_creation_only_tag_paths())

        self.key_pair = aws.ec2.KeyPair(
            f"{name}-key",
            public_key=args.public_key,
            tags={**args.tags, "Name": f"{name}-key"},
            opts=child,
        )
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-ssh",
            description="rigbench: SSH from the allowed networks only",
            vpc_id=args.vpc_id,
            ingress=[
                aws.ec2.SecurityGroupIngressArgs(
                    description="SSH",
                    protocol="tcp",
                    from_port=SSH_PORT,
                    to_port=SSH_PORT,
                    cidr_blocks=args.ipv4_cidrs,
                    ipv6_cidr_blocks=args.ipv6_cidrs,
                )
            ],
            # Outbound stays open: the rig downloads CUDA packages, llama.cpp and models.
            egress=[
                aws.ec2.SecurityGroupEgressArgs(
                    description="all outbound",
                    protocol="-1",
                    from_port=0,
                    to_port=0,
                    cidr_blocks=["0.0.0.0/0"],
                    ipv6_cidr_blocks=["::/0"],
                )
            ],
            tags={**args.tags, "Name": f"{name}-ssh"},
            opts=child,
        )
        self.instance = aws.ec2.Instance(
            f"{name}-instance",
            ami=args.ami_id,
            instance_type=args.instance_type.name,
            availability_zone=args.availability_zone,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[self.security_group.id],
            key_name=self.key_pair.key_name,
            associate_public_ip_address=True,
            instance_market_options=_market_options(args.market, args.spot_max_price),
            # A halt from inside (the TTL guard) ends the billing instead of leaving a stopped instance.
            instance_initiated_shutdown_behavior="terminate",
            metadata_options=aws.ec2.InstanceMetadataOptionsArgs(
                http_endpoint="enabled",
                http_tokens="required",
                http_put_response_hop_limit=1,
            ),
            root_block_device=aws.ec2.InstanceRootBlockDeviceArgs(
                volume_type="gp3",
                volume_size=args.root_volume_gb,
                encrypted=True,
                delete_on_termination=True,
                tags={**args.tags, "Name": f"{name}-root"},
            ),
            user_data=args.user_data,
            user_data_replace_on_change=True,
            tags={**args.tags, "Name": f"{name}-instance"},
            opts=pulumi.ResourceOptions(
                parent=self, ignore_changes=_creation_only_tag_paths() + _creation_only_tag_paths("rootBlockDevice.")
            ),
        )
        self.launch_time: pulumi.Output[str] = aws.ec2.get_instance_output(
            instance_id=self.instance.id, opts=pulumi.InvokeOutputOptions(parent=self)
        ).launch_time
        self.register_outputs(
            {
                "instanceId": self.instance.id,
                "publicIp": self.instance.public_ip,
                "securityGroupId": self.security_group.id,
                "keyName": self.key_pair.key_name,
            }
        )


def _market_options(market: str, spot_max_price: float | None) -> aws.ec2.InstanceInstanceMarketOptionsArgs | None:
    """One-time spot that terminates on interruption; None (on-demand) otherwise."""
    if market != "spot":
        return None
    return aws.ec2.InstanceInstanceMarketOptionsArgs(
        market_type="spot",
        spot_options=aws.ec2.InstanceInstanceMarketOptionsSpotOptionsArgs(
            spot_instance_type="one-time",
            instance_interruption_behavior="terminate",
            # Unset means "up to the on-demand price", which is AWS's default cap.
            max_price=None if spot_max_price is None else f"{spot_max_price:g}",
        ),
    )


def _creation_only_tag_paths(prefix: str = "") -> list[str]:
    """Property paths (engine syntax) of the tags that keep their creation-time value."""
    return [f'{prefix}tags["{tag}"]' for tag in CREATION_ONLY_TAGS]
