"""The capacity search: its bisection against a fake probe (doubling, halving, each reason to stop), a
probe's verdict read off its run, the options refused before any folder exists, and a search against the
ground-truth server that finds where its slots run out."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from analysis.plan import search_capacity
from analysis.report import write_report
from core.errors import UsageError
from core.rundir import LoadSettings, RunDir
from core.rundir.capacity_search import CapacitySearch, SearchProbe, SearchResult, read_search, search_of_run
from core.rundir.models import RequestOrigins
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from rigbench.capacity_search import Bisection, judge_probe
from rigbench.cli import app
from rigbench.load_options import LoadFlags, LoadRequest
from rigbench.search_plan import SearchPlan, parse_resolution, search_plan

TARGETS = {"ttft_p90": 0.5}


def find(plan: SearchPlan, capacity: float, failing: float | None = None) -> tuple[Bisection, list[float]]:
    """Search against a server that meets the targets up to ``capacity`` (a probe at ``failing`` fails)."""
    probed: list[float] = []

    def probe(load: float):
        probed.append(load)
        if failing is not None and load == failing:
            return "failed", "locust exited with code 1"
        return ("meets", "") if load <= capacity else ("misses", "ttft_p90 misses")

    return Bisection(plan).run(probe), probed


def users(resolution: float = 1, relative: bool = False, max_load: float | None = None, first: float = 1):
    return SearchPlan("users", first, TARGETS, resolution, relative, max_load)


def test_users_double_until_a_miss_then_halve_the_bracket_to_one_user() -> None:
    search, probed = find(users(), capacity=6)
    assert probed == [1, 2, 4, 8, 6, 7]
    assert (search.largest_meeting, search.smallest_missing, search.reason) == (6, 7, "resolution")
    assert search.detail == "7 - 6 = 1 user, within the resolution 1 user"
    search, probed = find(users(), capacity=13)
    assert probed == [1, 2, 4, 8, 16, 12, 14, 13] and search.result().largest_meeting == 13


def test_a_coarser_or_relative_resolution_stops_sooner() -> None:
    search, probed = find(users(resolution=4), capacity=13)
    assert probed == [1, 2, 4, 8, 16, 12] and (search.largest_meeting, search.smallest_missing) == (12, 16)
    search, probed = find(users(resolution=0.25, relative=True), capacity=50)
    assert probed == [1, 2, 4, 8, 16, 32, 64, 48, 56] and (search.largest_meeting, search.smallest_missing) == (48, 56)


def test_rates_bisect_to_a_share_of_the_brackets_low_end() -> None:
    plan = SearchPlan("rate", 1.0, TARGETS, 0.10, True)
    search, probed = find(plan, capacity=3.3)
    assert probed == [1, 2, 4, 3, 3.5, 3.25]
    assert (search.largest_meeting, search.smallest_missing, search.reason) == (3.25, 3.5, "resolution")


def test_the_largest_load_allowed_caps_the_doubling() -> None:
    search, probed = find(users(max_load=10), capacity=100)
    assert probed == [1, 2, 4, 8, 10]
    assert (search.largest_meeting, search.smallest_missing, search.reason) == (10, None, "max_load_met")
    assert "raise --max-load" in search.detail
    search, probed = find(users(max_load=10), capacity=9)  # the cap itself misses: the bracket closes below it
    assert probed == [1, 2, 4, 8, 10, 9] and (search.largest_meeting, search.reason) == (9, "resolution")


def test_a_first_probe_that_misses_stops_the_search() -> None:
    search, probed = find(users(), capacity=0)
    assert probed == [1] and (search.largest_meeting, search.smallest_missing, search.reason) == (
        None, 1, "first_missed")
    assert search.detail == "1 user did not meet every target (ttft_p90 misses); relax the targets"
    search, _ = find(users(first=4), capacity=2)
    assert search.detail.endswith("relax the targets, or start lower (--find-max users:N or rate:R)")


def test_a_failed_probe_stops_the_search_with_what_it_had() -> None:
    search, probed = find(users(), capacity=20, failing=8)
    assert probed == [1, 2, 4, 8]
    assert (search.largest_meeting, search.smallest_missing, search.reason) == (4, 8, "probe_failed")
    assert search.detail == "the probe at 8 users: locust exited with code 1"


def test_resolution_defaults_and_spellings() -> None:
    assert parse_resolution(None, "users") == (1.0, False)
    assert parse_resolution(None, "rate") == (0.10, True)
    assert parse_resolution("2", "users") == (2.0, False)
    assert parse_resolution("0.25", "rate") == (0.25, False)
    assert parse_resolution("5%", "users") == (0.05, True)
    with pytest.raises(UsageError, match="users are whole"):
        parse_resolution("1.5", "users")


def plan_of(*options: str, **given) -> SearchPlan | None:
    settings = LoadSettings(user_steps=[1], warmup_seconds=1, measure_seconds=3, max_tokens=8, slo=TARGETS)
    request = LoadRequest(settings, [0], False, RequestOrigins(model_name="rigbench", max_tokens="rigbench",
                                                               temperature="rigbench", ignore_eos="rigbench",
                                                               cache_prompt="rigbench"))
    values = {"resolution": None, "max_load": None, "urls": ["http://127.0.0.1:9"]} | given
    return search_plan(options[0] if options else None, request, LoadFlags({}), **values)


def test_the_plan_read_from_the_options() -> None:
    assert plan_of() is None
    assert plan_of("users") == SearchPlan("users", 1.0, TARGETS, 1.0, False, None)
    plan = plan_of("rate:0.2", max_load=8.0)
    assert plan == SearchPlan("rate", 0.2, TARGETS, 0.10, True, 8.0)
    assert plan.probe_settings(LoadSettings(user_steps=[1, 2], warmup_seconds=1, measure_seconds=[3, 4],
                                            max_tokens=8), 0.2).rate_steps == [0.2]


def test_a_rate_bisection_that_rounds_onto_an_end_stops_instead_of_probing_it_again() -> None:
    plan = SearchPlan("rate", 100.0, TARGETS, 0.01, False)
    search, probed = find(plan, capacity=123.27)
    assert len(probed) == len(set(probed)) and len(probed) < 20, probed
    assert search.reason == "resolution" and "four significant figures" in search.detail
    assert search.largest_meeting <= 123.27 < search.smallest_missing


def test_a_probe_meets_only_when_every_interval_is_within_the_target(kit) -> None:
    """Unclear (the point within, the interval reaching over) is not meeting; nor is a failed request."""
    start = kit.T0 + 100
    ttfts = [0.30, 0.32, 0.34, 0.36, 0.38, 0.40, 0.42, 0.44, 0.46, 0.60]
    records = [kit.record(f"r{i}", users=2, t_start=start + i * 0.5, ttft=ttft) for i, ttft in enumerate(ttfts)]

    def probe_run(run_id: str, slo: dict[str, float], extra: list | None = None) -> tuple:
        load = LoadSettings(user_steps=[2], warmup_seconds=1, measure_seconds=10, max_tokens=21, slo=slo)
        path = kit.make_run(run_id, [kit.window(users=2)], {"p0": records + (extra or [])}, load=load)
        return judge_probe(RunDir(path), RunDir(path).read_manifest(), 2)

    record, outcome = probe_run("unclear", {"ttft_p50": 0.41})
    assert outcome == "misses" and not record.meets and record.targets["ttft_p50"].verdict == "unclear"
    assert "ttft_p50 unclear" in record.detail and "its interval reaches" in record.detail
    record, outcome = probe_run("meets", {"ttft_p50": 0.8})
    assert outcome == "meets" and record.meets and record.detail is None and record.goodput_req_s == 1.0
    record, outcome = probe_run("errors", {"ttft_p50": 0.8}, [kit.record("e", users=2, t_start=start + 6,
                                                                        error_kind="http_500")])
    assert outcome == "misses" and record.detail == "1 of 11 measured requests failed"
    # a run the sweep failed for its error rate still measured its window: a miss the search narrows below
    load = LoadSettings(user_steps=[2], warmup_seconds=1, measure_seconds=10, max_tokens=21, slo={"ttft_p50": 0.8})
    path = kit.make_run("overloaded", [kit.window(users=2)], {"p0": records}, load=load, status="failed",
                        status_detail="error rate 60% above 50%: most are http_503")
    record, outcome = judge_probe(RunDir(path), RunDir(path).read_manifest(), 2)
    assert outcome == "misses" and "run failed: error rate 60%" in record.detail
    # a step whose load did not run (under 95% of it) is no evidence the named load meets
    thin = [kit.record(f"t{i}", users=2, t_start=start + i, ttft=0.3) for i in range(6)]
    path = kit.make_run("thin", [kit.window(users=2)], {"p0": thin}, load=load)
    record, outcome = judge_probe(RunDir(path), RunDir(path).read_manifest(), 2)
    assert outcome == "misses" and "of the 2 users named" in record.detail


def a_search(result: SearchResult | None, **changes) -> CapacitySearch:
    probes = [SearchProbe(load=load, run_id=f"p{load:g}", status="complete", meets=load <= 6,
                          aggregate_tok_s=50.0 * load, aggregate_tok_s_low=48.0 * load) for load in (1, 2, 4, 8, 6, 7)]
    return CapacitySearch(search_id="s", created_at="2027-01-15T08:00:00+00:00", mode="users",
                          targets={"ttft_p90": 0.5, "tpot_p90": 0.05}, first_load=1, resolution=1, probes=probes,
                          result=result, **changes)


def test_the_plan_takes_a_searchs_largest_meeting_load_and_that_probes_throughput() -> None:
    found = search_capacity(a_search(SearchResult(largest_meeting=6, smallest_missing=7, reason="resolution",
                                                  detail="7 - 6 = 1 user")))
    assert (found.per_instance, found.aggregate_tok_s, found.unit) == (6, 288.0, "users")
    assert found.basis == ("capacity search s: 6 users met TTFT p90 ≤ 0.5 s, TPOT p90 ≤ 50 ms, 7 users did not "
                           "(measured to its resolution)")
    none = search_capacity(a_search(SearchResult(largest_meeting=None, smallest_missing=1, reason="first_missed",
                                                 detail="")))
    assert none.per_instance == 0 and "no probed load met" in none.basis
    assert search_capacity(a_search(None)).per_instance == 0


@pytest.mark.parametrize(
    "options, message",
    [
        (["--find-max", "users"], "--find-max needs --slo"),
        (["--find-max", "users", "--slo", "ttft_p85=1"], "--slo: unknown figure 'ttft_p85'"),
        (["--find-max", "users", "--slo", "ttft_p90=1", "--max-load", "4", "--resolution", "3"],
         "--resolution 3 is as coarse as the whole range 1..4 (3 users)"),
        (["--find-max", "rate", "--slo", "ttft_p90=1", "--max-load", "2", "--resolution", "100%"],
         "--resolution: '100%': a share of the bracket's low end is below 100%"),
        (["--find-max", "users", "--slo", "ttft_p90=1", "--max-load", "1"], "--max-load 1 is not above the first"),
        (["--find-max", "users", "--slo", "ttft_p90=1", "--steps", "1,2"], "--find-max with --steps"),
        (["--find-max", "rate", "--slo", "ttft_p90=1", "--rates", "1"], "--find-max with --rates"),
        (["--find-max", "rate", "--slo", "ttft_p90=1", "--trace", "tests/loadtest/data/short_trace.jsonl"],
         "--find-max with --trace"),
        (["--find-max", "users", "--slo", "ttft_p90=1", "--url", "b=http://127.0.0.1:10"], "give one --url"),
        (["--find-max", "users", "--slo", "ttft_p90=1", "--measure", "2,3"], "give one window"),
        (["--find-max", "load", "--slo", "ttft_p90=1"], "--find-max: cannot read 'load'"),
        (["--find-max", "users:2.5", "--slo", "ttft_p90=1"], "a first load of users is whole users"),
        (["--resolution", "2"], "--resolution and --max-load belong to --find-max"),
    ],
)
def test_a_bad_search_is_refused_in_one_line_before_any_run_folder(tmp_path, options: list[str],
                                                                   message: str) -> None:
    runs = tmp_path / "runs"
    url = "a=http://127.0.0.1:9" if "--url" in options else "http://127.0.0.1:9"
    result = CliRunner().invoke(app, ["sweep", "--url", url, "--runs-dir", str(runs), *options])
    assert isinstance(result.exception, UsageError) and message in str(result.exception), result.output
    assert "\n" not in str(result.exception)
    assert not runs.exists()


@pytest.mark.integration
def test_the_search_finds_where_the_servers_slots_run_out(tmp_path: Path) -> None:
    """Six slots, the rest queued: TTFT is the server's 20 ms up to 6 users, and a queued request waits for a
    reply (~0.1 s) to end, so 7 users miss a 60 ms TTFT p90 target. The search must say 6. The windows hold
    over 36 requests a probe, the fewest a p90 is judged from."""
    config = GroundTruthConfig(ttft_ms=20, itl_ms=20, model="default", slots=6, queue=True)
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        result = CliRunner().invoke(app, [
            "sweep", "--url", server.base_url, "--find-max", "users:4", "--slo", "ttft_p90=60ms",
            "--warmup", "1", "--measure", "2.5", "--max-tokens", "4", "--runs-dir", str(runs), "--no-progress",
            "--drain", "1"])
    assert result.exit_code == 0, result.output
    (folder,) = runs.iterdir()
    search = read_search(folder)
    assert search.result is not None and search.result.reason == "resolution", result.output
    largest = search.result.largest_meeting
    assert largest in (5, 6) and search.result.smallest_missing == largest + 1  # 6, or 5 on a loaded machine
    assert [probe.load for probe in search.probes][:3] == [4, 8, 6]
    assert all(probe.targets["ttft_p90"].n >= 36 for probe in search.probes)
    # every probe is a whole run directory that the other tools read, and knows its search
    for probe in search.probes:
        manifest = RunDir(folder / probe.run_id).read_manifest()
        assert manifest.status == "complete" and manifest.load.user_steps == [int(probe.load)]
        assert manifest.load.slo == {"ttft_p90": 0.06}
        assert search_of_run(folder / probe.run_id)[0] == folder
    assert f"largest load meeting every target: {largest:g} users" in result.output
    assert f"rigbench report {folder}" in result.output and f"rigbench plan {folder} --users N" in result.output
    report = write_report([folder]).read_text()
    assert report.count("## Capacity search: ") == 1 and f"**{largest:g} users**" in report
    assert report.count("### Goodput against the service-level targets") == len(search.probes)
    one = write_report([folder / search.probes[0].run_id], tmp_path / "one").read_text()  # a probe knows its search
    assert f"## Capacity search: {folder.name}" in one
    # the plan reads the search's answer: 20 users at 5 or 6 a machine is 4 machines
    plan = CliRunner().invoke(app, ["plan", str(folder), "--users", "20", "--price-as", "g6.xlarge"])
    assert plan.exit_code == 0, plan.output
    assert f": 4 instances of {largest:g} users" in plan.output
