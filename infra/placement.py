"""Where the rig goes: which availability zone, which default-VPC subnet, at what spot price.

Spot prices differ per AZ and move, and not every AZ offers every GPU type, so ``az: cheapest``
asks EC2 which AZs offer the type and picks the one with the lowest current spot price. The
look-ups are synchronous invokes made while the program starts, so a type the region or the
chosen AZ does not offer stops the preview before any resource is declared.

The cheapest AZ is often the one without spare capacity, so ``az: best`` picks the AZ with the
highest spot placement score instead (``infra/spot_placement.py``, through boto3: the AWS
provider has no invoke for GetSpotPlacementScores).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pulumi_aws as aws

from core.errors import InfraError
from infra.spot_placement import ZoneOption, rank_zones
from infra.stack_config import AZ_CHOICES, PROJECT, RigConfig

SPOT_PRODUCT = "Linux/UNIX"


@dataclass(frozen=True)
class Placement:
    """The AZ and subnet chosen for the rig, and the spot price seen there (None for on-demand)."""

    availability_zone: str
    vpc_id: str
    subnet_id: str
    spot_price_usd_per_hour: float | None
    spot_prices_seen: dict[str, float]
    spot_placement_scores: dict[str, int] = field(default_factory=dict)

    @property
    def spot_placement_score(self) -> int | None:
        """The chosen AZ's placement score (None unless ``az: best`` ranked the AZs for spot)."""
        return self.spot_placement_scores.get(self.availability_zone)


def make_ec2_client(region: str | None, profile: str | None) -> Any:
    """A boto3 EC2 client with the program's region and profile (tests replace this function)."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        return boto3.Session(profile_name=profile, region_name=region).client("ec2")
    except BotoCoreError as error:
        raise InfraError(
            f"config key aws:region (or aws:profile): cannot make an EC2 client for az: best ({error}); "
            "expected `pulumi config set aws:region us-east-1` and a working AWS profile"
        ) from None


def stack_ec2_client() -> Any:
    """An EC2 client for the stack's region (aws:region, else AWS_REGION) and profile (aws:profile)."""
    return make_ec2_client(aws.config.region, aws.config.profile)


def offered_azs(instance_type: str) -> list[str]:
    """The AZs of the stack's region that offer ``instance_type``, sorted."""
    result = aws.ec2.get_instance_type_offerings(
        location_type="availability-zone",
        filters=[{"name": "instance-type", "values": [instance_type]}],
    )
    return sorted(set(result.locations or []))


def spot_prices(instance_type: str, azs: list[str]) -> dict[str, float]:
    """The current Linux spot price of ``instance_type`` in each AZ that reports one."""
    prices: dict[str, float] = {}
    for az in azs:
        result = aws.ec2.get_spot_price(
            instance_type=instance_type,
            availability_zone=az,
            filters=[{"name": "product-description", "values": [SPOT_PRODUCT]}],
        )
        if result.spot_price:
            prices[az] = float(result.spot_price)
    return prices


def cheapest_az(prices: dict[str, float]) -> str:
    """The AZ with the lowest price; ties go to the AZ name that sorts first, so the choice is stable."""
    return min(sorted(prices), key=lambda az: prices[az])


def default_vpc_subnet(az: str) -> tuple[str, str]:
    """(vpc id, subnet id) of the default VPC's default subnet in ``az``."""
    vpc = aws.ec2.get_vpc(default=True)
    subnets = aws.ec2.get_subnets(
        filters=[
            {"name": "vpc-id", "values": [vpc.id]},
            {"name": "availability-zone", "values": [az]},
            {"name": "default-for-az", "values": ["true"]},
        ]
    )
    if not subnets.ids:
        raise InfraError(
            f"config key {PROJECT}:az: the default VPC {vpc.id} has no default subnet in {az}; "
            "expected one per AZ. Create it with `aws ec2 create-default-subnet --availability-zone "
            f"{az}` or choose another AZ."
        )
    return vpc.id, sorted(subnets.ids)[0]


def choose_placement(config: RigConfig) -> Placement:
    """Check that the region (and AZ) offers the type, pick the AZ, and find its subnet."""
    offered = offered_azs(config.instance_type)
    if not offered:
        raise InfraError(
            f"config key {PROJECT}:instanceType: {config.instance_type} is not offered in this region "
            "(aws:region); expected a region that offers it, e.g. us-east-1 or us-west-2. "
            "Change aws:region or instanceType."
        )
    if config.az not in AZ_CHOICES and config.az not in offered:
        raise InfraError(
            f"config key {PROJECT}:az: {config.az} does not offer {config.instance_type}; "
            f"accepted values: best, cheapest, {', '.join(offered)}"
        )
    if config.az == "best" and config.market == "spot":
        return best_placement(config, offered)
    candidates = offered if config.az in AZ_CHOICES else [config.az]
    prices = spot_prices(config.instance_type, candidates) if config.market == "spot" else {}
    if config.az not in AZ_CHOICES:
        az = config.az
    elif prices:
        az = cheapest_az(prices)
    elif config.market == "spot":
        raise InfraError(
            f"config key {PROJECT}:az: no spot price is published for {config.instance_type} in "
            f"{', '.join(offered)}; expected at least one. Set az to one of them, or market to on-demand."
        )
    else:
        # On-demand costs the same in every AZ of a region: take the first that offers the type.
        az = offered[0]
    spot_price = prices.get(az)
    check_spot_max_price(config, az, spot_price)
    vpc_id, subnet_id = default_vpc_subnet(az)
    return Placement(
        availability_zone=az,
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        spot_price_usd_per_hour=spot_price,
        spot_prices_seen=prices,
    )


def best_placement(config: RigConfig, offered: list[str]) -> Placement:
    """The offering AZ with the highest spot placement score (under spotMaxPrice, when one is set)."""
    ranked = [o for o in rank_zones(stack_ec2_client(), config.instance_type, 1, "best") if o.zone in offered]
    if not ranked:
        raise InfraError(
            f"config key {PROJECT}:az: best found no zone offering {config.instance_type} in "
            f"{', '.join(offered)}; set az to one of them"
        )
    # Above the cap in every AZ: the cheapest AZ makes the refusal say which cap would do.
    cheapest = min(ranked, key=lambda o: o.spot_usd_per_hour if o.spot_usd_per_hour is not None else float("inf"))
    chosen = next((o for o in ranked if _under_cap(config, o)), cheapest)
    check_spot_max_price(config, chosen.zone, chosen.spot_usd_per_hour)
    vpc_id, subnet_id = default_vpc_subnet(chosen.zone)
    return Placement(
        availability_zone=chosen.zone,
        vpc_id=vpc_id,
        subnet_id=subnet_id,
        spot_price_usd_per_hour=chosen.spot_usd_per_hour,
        spot_prices_seen={o.zone: o.spot_usd_per_hour for o in ranked if o.spot_usd_per_hour is not None},
        spot_placement_scores={o.zone: o.score for o in ranked if o.score is not None},
    )


def check_spot_max_price(config: RigConfig, az: str, spot_price: float | None) -> None:
    """Refuse a spotMaxPrice below the AZ's current price: EC2 would refuse the launch (SpotMaxPriceTooLow)."""
    if config.spot_max_price is not None and spot_price is not None and spot_price > config.spot_max_price:
        raise InfraError(
            f"config key {PROJECT}:spotMaxPrice: {config.spot_max_price} USD/h is below the current spot price "
            f"{spot_price} USD/h in {az}; expected a higher cap, or unset spotMaxPrice (cap = on-demand price)"
        )


def _under_cap(config: RigConfig, option: ZoneOption) -> bool:
    price = option.spot_usd_per_hour
    return config.spot_max_price is None or price is None or price <= config.spot_max_price
