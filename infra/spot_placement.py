"""Which zone a spot rig is most likely to start in, from EC2's spot placement scores.

The cheapest zone is often the one without spare capacity, so a spot launch there fails.
GetSpotPlacementScores rates each availability zone 1-10 for how likely a spot request of a
type and count is to be fulfilled now; ``rank_zones`` joins those scores with the current spot
prices of the zones that offer the type. It takes a plain boto3 EC2 client and imports no
Pulumi, so the app can rank zones (or pick the next one after a failed launch) outside a
Pulumi program.

A failed ``pulumi up`` prints the EC2 error code; ``retryable_failure`` finds the codes worth
another attempt, and ``failure_scope`` says whether another zone can help or only another
type or market (an account quota is the same in every zone).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from core.errors import InfraError
from infra.ec2_calls import ec2_call

SPOT_PRODUCT = "Linux/UNIX"
PLACEMENT_SCORES_PERMISSION = "ec2:GetSpotPlacementScores"
# The error codes EC2 answers when it refuses a request for want of permission.

# EC2 API error codes (errors-overview of the EC2 API reference) after which a launch may succeed
# elsewhere. Spot request status codes such as capacity-not-available are not among them: a
# one-time spot instance launched by RunInstances fails with the API code instead.
ZONE_CODES = ("InsufficientInstanceCapacity", "UnfulfillableCapacity", "SpotMaxPriceTooLow")
TYPE_CODES = ("MaxSpotInstanceCountExceeded", "VcpuLimitExceeded", "InstanceLimitExceeded")
SPOT_RETRY_CODES = ZONE_CODES + TYPE_CODES
_RETRY_CODE_PATTERN = re.compile(r"\b(" + "|".join(SPOT_RETRY_CODES) + r")\b")


@dataclass(frozen=True)
class ZoneOption:
    """One zone that offers the type: its placement score (None when EC2 gave none) and spot price."""

    zone: str
    zone_id: str
    score: int | None
    spot_usd_per_hour: float | None


def rank_zones(
    ec2: Any, instance_type: str, count: int = 1, by: Literal["best", "cheapest"] = "best"
) -> list[ZoneOption]:
    """The zones of the client's region that offer ``instance_type``, best first.

    ``best``: placement score high to low, then price low to high; ``cheapest``: price low to
    high, then score. Zones without a score (or price) come after those with one.
    """
    region = ec2.meta.region_name
    offered = offered_zones(ec2, instance_type)
    if not offered:
        raise InfraError(
            f"DescribeInstanceTypeOfferings in {region}: no availability zone offers {instance_type}; "
            "expected at least one. Choose another region or instance type."
        )
    zone_ids = zone_ids_by_name(ec2)
    scores_by_id = placement_scores(ec2, instance_type, count)
    prices = current_spot_prices(ec2, instance_type)
    options = [
        ZoneOption(
            zone=zone,
            zone_id=zone_ids.get(zone, ""),
            score=scores_by_id.get(zone_ids.get(zone, "")),
            spot_usd_per_hour=prices.get(zone),
        )
        for zone in offered
    ]
    return sorted(options, key=_best_key if by == "best" else _cheapest_key)


def offered_zones(ec2: Any, instance_type: str) -> list[str]:
    """The availability zones of the region that offer ``instance_type``, sorted."""
    pages = _pages(
        ec2,
        "DescribeInstanceTypeOfferings",
        "ec2:DescribeInstanceTypeOfferings",
        ec2.describe_instance_type_offerings,
        LocationType="availability-zone",
        Filters=[{"Name": "instance-type", "Values": [instance_type]}],
    )
    return sorted({offer["Location"] for page in pages for offer in page.get("InstanceTypeOfferings", [])})


def zone_ids_by_name(ec2: Any) -> dict[str, str]:
    """Zone name -> zone id: placement scores name zones by id, and the mapping differs per account."""
    answer = _call(ec2, "DescribeAvailabilityZones", "ec2:DescribeAvailabilityZones", ec2.describe_availability_zones)
    return {zone["ZoneName"]: zone["ZoneId"] for zone in answer.get("AvailabilityZones", [])}


def placement_scores(ec2: Any, instance_type: str, count: int) -> dict[str, int]:
    """Zone id -> spot placement score (1-10) for ``count`` instances of ``instance_type``."""
    region = ec2.meta.region_name
    pages = _pages(
        ec2,
        "GetSpotPlacementScores",
        PLACEMENT_SCORES_PERMISSION,
        ec2.get_spot_placement_scores,
        InstanceTypes=[instance_type],
        TargetCapacity=count,
        TargetCapacityUnitType="units",
        SingleAvailabilityZone=True,
        RegionNames=[region],
    )
    scores: dict[str, int] = {}
    for page in pages:
        for entry in page.get("SpotPlacementScores", []):
            if entry.get("AvailabilityZoneId") and entry.get("Score") is not None:
                scores[entry["AvailabilityZoneId"]] = int(entry["Score"])
    return scores


def current_spot_prices(ec2: Any, instance_type: str) -> dict[str, float]:
    """Zone name -> the newest Linux spot price of ``instance_type`` (a history from now holds the current one)."""
    pages = _pages(
        ec2,
        "DescribeSpotPriceHistory",
        "ec2:DescribeSpotPriceHistory",
        ec2.describe_spot_price_history,
        InstanceTypes=[instance_type],
        ProductDescriptions=[SPOT_PRODUCT],
        StartTime=datetime.now(UTC),
    )
    newest: dict[str, tuple[datetime, float]] = {}
    for page in pages:
        for entry in page.get("SpotPriceHistory", []):
            zone, stamp = entry["AvailabilityZone"], entry["Timestamp"]
            if zone not in newest or stamp > newest[zone][0]:
                newest[zone] = (stamp, float(entry["SpotPrice"]))
    return {zone: price for zone, (_, price) in newest.items()}


def retryable_failure(text: str) -> str | None:
    """The first spot retry code in a failed ``pulumi up``'s output, or None if the failure is another one."""
    match = _RETRY_CODE_PATTERN.search(text)
    return match.group(1) if match else None


def failure_scope(code: str) -> Literal["zone", "type"]:
    """Whether another zone can help (capacity, price) or only another type or market (an account quota)."""
    if code in ZONE_CODES:
        return "zone"
    if code in TYPE_CODES:
        return "type"
    raise ValueError(f"{code!r} is not one of the spot retry codes {', '.join(SPOT_RETRY_CODES)}")


def _best_key(option: ZoneOption) -> tuple:
    return (option.score is None, -(option.score or 0), *_price_key(option), option.zone)


def _cheapest_key(option: ZoneOption) -> tuple:
    return (*_price_key(option), option.score is None, -(option.score or 0), option.zone)


def _price_key(option: ZoneOption) -> tuple[bool, float]:
    price = option.spot_usd_per_hour
    return (price is None, price if price is not None else 0.0)


def _pages(ec2: Any, action: str, permission: str, method: Callable[..., dict], **params: Any) -> Iterator[dict]:
    """Every page of a paginated EC2 call, following NextToken."""
    token: str | None = None
    while True:
        page = _call(ec2, action, permission, method, **params, **({"NextToken": token} if token else {}))
        yield page
        token = page.get("NextToken")
        if not token:
            return


def _call(ec2: Any, action: str, permission: str, method: Callable[..., dict], **params: Any) -> dict:
    advice = ", or rank zones by price only (az: cheapest)" if permission == PLACEMENT_SCORES_PERMISSION else ""
    return ec2_call(ec2.meta.region_name, action, lambda: method(**params), permission, advice)
