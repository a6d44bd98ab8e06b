"""What the loop decides before money is spent: attempts in order, each attempt's config, the estimate."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from core.errors import CloudError
from infra.spot_placement import ZoneOption
from rigbench.cloud.attempts import PlannedAttempt, config_changes, plan_attempts
from rigbench.cloud.estimate import EXTRAS_USD_PER_HOUR, PHASE_SECONDS, estimate_rig, sweep_seconds
from rigbench.cloud.loop import LoopPlan, check_budget
from rigbench.cloud.stacks import StackSettings, write_attempt_config

ZONES = {
    # the cheapest zone has the lowest score: "best" must not start there
    "g6.xlarge": [ZoneOption("us-east-1b", "use1-az2", 9, 0.41), ZoneOption("us-east-1c", "use1-az3", 6, 0.38),
                  ZoneOption("us-east-1a", "use1-az1", 2, 0.30)],
    "g6.2xlarge": [ZoneOption("us-east-1d", "use1-az4", 8, 0.49)],
}


def ranking(instance_type: str, by: str) -> list[ZoneOption]:
    zones = ZONES[instance_type]
    return sorted(zones, key=lambda z: z.spot_usd_per_hour) if by == "cheapest" else zones


def described(attempts: list[PlannedAttempt]) -> list[tuple]:
    return [(a.instance_type, a.market, a.zone) for a in attempts]


def test_best_tries_every_zone_by_score_then_other_types_then_on_demand() -> None:
    attempts = plan_attempts("g6.xlarge", "spot", "best", ["g6.2xlarge"], "on-demand", ranking)
    assert described(attempts) == [
        ("g6.xlarge", "spot", "us-east-1b"), ("g6.xlarge", "spot", "us-east-1c"), ("g6.xlarge", "spot", "us-east-1a"),
        ("g6.2xlarge", "spot", "us-east-1d"),
        ("g6.xlarge", "on-demand", None), ("g6.2xlarge", "on-demand", None),
    ]
    assert (attempts[0].placement_score, attempts[0].spot_usd_per_hour) == (9, 0.41)


def test_cheapest_orders_by_price_and_a_fixed_zone_is_one_attempt() -> None:
    assert [a.zone for a in plan_attempts("g6.xlarge", "spot", "cheapest", [], None, ranking)] == [
        "us-east-1a", "us-east-1c", "us-east-1b"]
    fixed = plan_attempts("g6.xlarge", "spot", "us-east-1c", [], None, ranking)
    assert described(fixed) == [("g6.xlarge", "spot", "us-east-1c")]
    assert (fixed[0].placement_score, fixed[0].spot_usd_per_hour) == (6, 0.38)


def test_an_on_demand_stack_asks_no_zone_ranking() -> None:
    def no_ranking(*_: object) -> list:
        raise AssertionError("on-demand needs no spot ranking")

    attempts = plan_attempts("g6.xlarge", "on-demand", "us-east-1d", ["g5.xlarge", "g6.xlarge"], None, no_ranking)
    assert described(attempts) == [("g6.xlarge", "on-demand", "us-east-1d"), ("g5.xlarge", "on-demand", "us-east-1d")]


def test_config_changes_name_only_what_differs() -> None:
    assert config_changes("g6.xlarge", "spot", PlannedAttempt("g6.xlarge", "spot", "us-east-1b")) == {
        "az": "us-east-1b"}
    assert config_changes("g6.xlarge", "spot", PlannedAttempt("g6.2xlarge", "on-demand", None)) == {
        "instanceType": "g6.2xlarge", "market": "on-demand", "spotMaxPrice": None}


def stack_file(tmp_path: Path) -> StackSettings:
    original = tmp_path / "Pulumi.g6-xlarge.yaml"
    original.write_text(yaml.safe_dump({
        "encryptionsalt": "v1:abc:def",
        "config": {"aws:region": "us-east-1", "rigbench:instanceType": "g6.xlarge", "rigbench:spotMaxPrice": "0.6",
                   "rigbench:owner": "me", "rigbench:apiKey": {"secure": "v1:AAAA"},
                   "rigbench:allowedCidrs": ["203.0.113.7/32"]},
    }))
    return StackSettings(stack="g6-xlarge", config_file=original, instance_type="g6.xlarge", market="spot",
                         az="best", region="us-east-1", ttl_hours=8, spot_max_price=0.6, private_key=None,
                         build_cache_bucket=None)


def test_an_attempt_config_is_a_copy_with_the_changes_and_the_users_file_is_untouched(tmp_path: Path) -> None:
    settings = stack_file(tmp_path)
    before = settings.config_file.read_text()
    written = write_attempt_config(settings, tmp_path / "rig" / "attempt2.yaml",
                                   {"az": None, "market": "on-demand", "spotMaxPrice": None})
    document = yaml.safe_load(written.read_text())
    assert document["encryptionsalt"] == "v1:abc:def", "the secrets' salt must travel with them"
    config = document["config"]
    assert config["rigbench:market"] == "on-demand" and "rigbench:spotMaxPrice" not in config
    assert config["rigbench:apiKey"] == {"secure": "v1:AAAA"} and config["rigbench:allowedCidrs"] == [
        "203.0.113.7/32"]
    assert settings.config_file.read_text() == before


def test_the_estimate_adds_the_phases_and_prices_the_first_attempt() -> None:
    assert sweep_seconds([1, 2, 4], 10, "30") == 3 * (10 + 30 + 10)
    assert sweep_seconds([1, 2], 5, [8.0, 20.0]) == (5 + 8 + 10) + (5 + 20 + 10)
    spot = estimate_rig("a", PlannedAttempt("g6.xlarge", "spot", "us-east-1b", 9, 0.41), {"sweep": 360.0},
                        2_000_000_000, skip=set())
    expected_s = sum(PHASE_SECONDS.values()) + 20.0 + 360.0
    assert spot.hours == pytest.approx(expected_s / 3600, abs=1e-3)
    assert spot.usd_per_hour == pytest.approx(0.41 + EXTRAS_USD_PER_HOUR)
    assert spot.usd == pytest.approx(spot.hours * spot.usd_per_hour, abs=1e-3)
    on_demand = estimate_rig("b", PlannedAttempt("g6.xlarge", "on-demand", None), {}, None, skip={"project"})
    assert on_demand.usd_per_hour == pytest.approx(0.8048 + EXTRAS_USD_PER_HOUR)
    assert "project" not in on_demand.phases_s and on_demand.price_basis.startswith("on-demand")


def test_max_usd_below_the_estimate_is_refused_before_anything_is_created() -> None:
    estimate = [estimate_rig(name, PlannedAttempt("g6.xlarge", "on-demand", None), {}, None, set())
                for name in ("a", "b")]
    plan = LoopPlan({}, {}, estimate)
    check_budget(plan, plan.usd + 0.01)
    with pytest.raises(CloudError, match=r"--max-usd: the estimate is \$\d+\.\d\d \(2 rigs\), above the limit "
                                         r"\$0\.50; nothing was created"):
        check_budget(plan, 0.5)
    unknown = LoopPlan({}, {}, [estimate[0].model_copy(update={"usd": math.nan})])
    with pytest.raises(CloudError, match="no price is known for a"):
        check_budget(unknown, 100)
