"""Where a rig may start, in the order the loop tries: zones by score, then other types, then on-demand.

Spot capacity is per zone and per type, and the cheapest zone is often the one that has none.
For a stack whose ``az`` is ``best`` (or ``cheapest``) every zone that offers the type is an
attempt, in EC2's spot placement-score order (or price order); a fixed zone is one attempt.
``--fallback-type`` adds the same for each further type, and ``--fallback-market on-demand``
ends the list with each type on-demand. A failure that a zone cannot fix (an account quota)
skips the remaining zones of that type and market.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from infra.spot_placement import ZoneOption

Ranking = Callable[[str, str], list[ZoneOption]]  # (instance type, "best" | "cheapest") -> zones
RANKED_AZ = ("best", "cheapest")


@dataclass(frozen=True)
class PlannedAttempt:
    instance_type: str
    market: str
    zone: str | None  # None: leave the stack's own az (on-demand costs the same in every zone)
    placement_score: int | None = None
    spot_usd_per_hour: float | None = None

    @property
    def scope(self) -> tuple[str, str]:
        return self.instance_type, self.market


def spot_attempts(instance_type: str, az: str, ranking: Ranking) -> list[PlannedAttempt]:
    if az not in RANKED_AZ:
        zones = [option for option in ranking(instance_type, "best") if option.zone == az]
        found = zones[0] if zones else None
        return [PlannedAttempt(instance_type, "spot", az, found.score if found else None,
                               found.spot_usd_per_hour if found else None)]
    return [PlannedAttempt(instance_type, "spot", option.zone, option.score, option.spot_usd_per_hour)
            for option in ranking(instance_type, az)]


def plan_attempts(instance_type: str, market: str, az: str, fallback_types: list[str], fallback_market: str | None,
                  ranking: Ranking) -> list[PlannedAttempt]:
    """Every (type, market, zone) to try, in order; no pair twice."""
    types = list(dict.fromkeys([instance_type, *fallback_types]))
    fixed_zone = None if az in RANKED_AZ else az
    attempts: list[PlannedAttempt] = []
    if market == "spot":
        for name in types:
            attempts += spot_attempts(name, az, ranking)
    if market == "on-demand" or fallback_market == "on-demand":
        attempts += [PlannedAttempt(name, "on-demand", fixed_zone) for name in types]
    return attempts


def config_changes(stack_type: str, stack_market: str, attempt: PlannedAttempt) -> dict[str, str | None]:
    """The stack config keys an attempt changes (None removes a key)."""
    changes: dict[str, str | None] = {}
    if attempt.zone is not None:
        changes["az"] = attempt.zone
    if attempt.instance_type != stack_type:
        changes["instanceType"] = attempt.instance_type
    if attempt.market != stack_market:
        changes["market"] = attempt.market
    if attempt.market == "on-demand":
        changes["spotMaxPrice"] = None  # refused with on-demand
    return changes
