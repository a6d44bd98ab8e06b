"""The gate's rules on hand-made figures, then on committed runs whose arms really differ."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from analysis import intervals
from analysis.energy import StepEnergy
from analysis.gate import (
    AGGREGATE,
    ERROR_RATE,
    ONE_RUN_NOTE,
    PER_USER,
    TTFT_P90,
    GatedRun,
    Thresholds,
    gate,
    judge,
    workload_differences,
)
from analysis.gate_output import markdown_table, outcome_line, write_junit
from analysis.intervals import Estimate
from analysis.prices import PriceBook
from analysis.report_model import build_section
from core.errors import AnalysisError

RUNS = Path(__file__).resolve().parents[2] / "runs"
STUDY = RUNS / "gpu-h200-study-2026-11-30"
# the autotune arms: 1 and 64 users of the same model, prompts and reply length; "bs" samples on the GPU
SEED_MANY = STUDY / "autotune/20261130T061546Z-gemma4-e2b-seed-many-5a7e"
BACKEND_SAMPLING = STUDY / "autotune/20261130T061627Z-gemma4-e2b-bs-0ab8"
E2B = STUDY / "runs/20261130T062207Z-gemma4-e2b-e2b-best-0bae"  # 1..64 users
E4B = STUDY / "runs/20261130T063044Z-gemma4-e2b-e4b-best-cab0"
CONTEXT_0 = STUDY / "runs/20261130T063437Z-gemma4-e2b-e2b-ctx0-c584"
CONTEXT_32K = STUDY / "runs/20261130T063516Z-gemma4-e2b-e2b-ctx32768-4fae"
FIXED_LENGTH_E2B = RUNS / "gpu-h200-profiles-2026-11-30/runs/20261130T083256Z-gemma4-e2b-many-e2b-profile-d469"
# the runs were made on one H200 of a lent machine: priced as its share of a p5en.48xlarge (8x H200), which the
# bundled snapshot prices on demand only
PRICE_AS = ["p5en.48xlarge"]
ON_DEMAND = "$/Mtok per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured on NVIDIA H200"


def figure(value: float | None, low: float | None = None, high: float | None = None) -> Estimate:
    return Estimate(value, low, high, 20, "hand-made")


# ---- the rules ------------------------------------------------------------------------------


def test_worse_beyond_the_drop_with_intervals_apart_regresses() -> None:
    assert judge(AGGREGATE, figure(100, 95, 105), figure(80, 76, 84), 0.05) == (
        ("worse by 20.0%, 95% intervals apart",), "")


def test_a_drop_inside_the_noise_or_under_the_limit_passes() -> None:
    assert judge(AGGREGATE, figure(100, 90, 110), figure(80, 70, 91), 0.05) == (
        (), "worse by 20.0% but inside the noise (intervals overlap)")
    assert judge(AGGREGATE, figure(100, 99, 101), figure(97, 96, 98), 0.05) == ((), "")
    assert judge(AGGREGATE, figure(100, 99, 101), figure(80, 79, 81), 0.25) == ((), "")


def test_lower_is_better_for_latency_and_higher_figures_there_regress() -> None:
    assert judge(TTFT_P90, figure(0.20, 0.18, 0.22), figure(0.30, 0.27, 0.33), 0.05)[0] == (
        "worse by 50.0%, 95% intervals apart",)
    assert judge(TTFT_P90, figure(0.30, 0.27, 0.33), figure(0.20, 0.18, 0.22), 0.05) == ((), "")  # faster


def test_without_an_interval_the_change_alone_decides() -> None:
    assert judge(AGGREGATE, figure(100), figure(80, 79, 81), 0.05)[0] == (
        "worse by 20.0% (no interval: judged on the change alone)",)


def test_errors_where_the_baseline_had_none() -> None:
    none, some = intervals.proportion(0, 100), intervals.proportion(30, 100)
    assert judge(ERROR_RATE, none, some, 0.05)[0] == ("worse from 0, 95% intervals apart",)
    assert judge(ERROR_RATE, none, intervals.proportion(1, 100), 0.05) == (
        (), "worse from 0 but inside the noise (intervals overlap)")


def test_a_missing_figure_is_not_judged() -> None:
    assert judge(AGGREGATE, figure(100, 99, 101), figure(None), 0.05) == ((), "not judged: the run has no value")


def test_error_rate_interval_is_clopper_pearson() -> None:
    none = intervals.proportion(0, 10)
    assert (none.value, none.low) == (0.0, 0.0)
    assert none.high == pytest.approx(1 - 0.025 ** (1 / 10))  # the exact upper bound when nothing failed
    half = intervals.proportion(5, 10)
    assert (half.low, half.high) == (pytest.approx(0.187086, abs=1e-6), pytest.approx(0.812914, abs=1e-6))
    assert intervals.proportion(0, 0).value is None


# ---- committed runs --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Iterator[dict[Path, GatedRun]]:
    """Each committed run analysed once, at the bundled prices, priced as its share of a p5en.48xlarge."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path_factory.mktemp("prices") / "none.json"))
        book = PriceBook.default()
        paths = (SEED_MANY, BACKEND_SAMPLING, E2B, E4B, CONTEXT_0, CONTEXT_32K, FIXED_LENGTH_E2B)
        yield {path: GatedRun.from_section(build_section(path, book, PRICE_AS)) for path in paths}


def failed(result) -> list[tuple[str, str]]:
    return [(check.step, check.figure.name) for check in result.failures]


def test_a_run_against_itself_passes(runs) -> None:
    result = gate(runs[E2B], runs[E2B], Thresholds())
    assert result.passed and result.notes == [ONE_RUN_NOTE]  # one run a side: said
    assert len(result.checks) == 7 * 5  # 7 user steps x (4 figures + 1 price)
    assert {check.change for check in result.checks if check.judged} == {0.0}
    assert outcome_line(result) == "gate: pass (35 checks)"


def test_the_cpu_sampling_arm_fails_against_the_gpu_sampling_one(runs) -> None:
    result = gate(runs[SEED_MANY], runs[BACKEND_SAMPLING], Thresholds())
    assert failed(result) == [
        ("1 user", "per-user tok/s"),
        ("64 users", "aggregate tok/s"),
        ("64 users", ON_DEMAND),
    ]
    by_name = {(check.step, check.figure.name): check for check in result.checks}
    aggregate = by_name["64 users", "aggregate tok/s"]
    assert aggregate.change == pytest.approx(722.5 / 1589.8 - 1, abs=1e-3)
    assert aggregate.failures == ("worse by 54.6%, 95% intervals apart",)
    assert by_name["1 user", "aggregate tok/s"].failures == ()  # one user: the same within the noise
    assert math.isclose(by_name["64 users", ON_DEMAND].change, 1589.8 / 722.5 - 1, abs_tol=1e-3)  # price / tok/s
    table = markdown_table(result).splitlines()
    assert [cell.strip() for cell in table[0].split("|")[1:-1]] == [
        "step", "figure", "baseline", "run", "change", "95% intervals", "verdict"]
    assert "| 64 users | aggregate tok/s " in table[7] and "| 1,589.8 [1,581.8, 1,600.4] | 722.5 [719.1, 724.2] |" in (
        table[7])


def test_the_faster_arm_fails_only_where_it_is_worse(runs) -> None:
    """Sampling on the GPU is faster at 64 users, but its first token comes later for one user."""
    result = gate(runs[BACKEND_SAMPLING], runs[SEED_MANY], Thresholds())
    assert failed(result) == [("1 user", "TTFT p90")]


def test_a_larger_allowed_drop_and_the_absolute_limits(runs) -> None:
    result = gate(runs[SEED_MANY], runs[BACKEND_SAMPLING], Thresholds(max_drop=0.6, min_tok_s=290, max_ttft_p90_s=0.07))
    assert failed(result) == [
        ("1 user", "per-user tok/s"),  # 284.3 tok/s, below 290
        ("64 users", "per-user tok/s"),  # no request finished inside the 64-user window: no value to hold to it
        ("64 users", "TTFT p90"),
        ("64 users", ON_DEMAND),  # +120%, beyond 60%
    ]
    by_name = {(check.step, check.figure.name): check for check in result.checks}
    assert by_name["1 user", "per-user tok/s"].failures == ("below --min-tok-s 290",)
    assert by_name["1 user", "TTFT p90"].failures == ()  # 65 ms, under 70 ms
    assert by_name["64 users", "TTFT p90"].failures == ("no value to hold to --max-ttft-p90 0.07 s",)


def test_runs_of_different_models_are_refused_naming_what_differs(runs) -> None:
    with pytest.raises(AnalysisError) as refused:
        gate(runs[E4B], runs[E2B], Thresholds())
    assert str(refused.value) == (
        f"run {E4B.name} and baseline {E2B.name} measure different workloads: model e4b-q4_0.gguf (38223c336ee0) "
        "in the run, e2b-q4_0.gguf (ae61b2fd312a) in the baseline; gate against a baseline of the same workload, "
        "or pass --allow-different"
    )


def test_allow_different_compares_and_says_so(runs) -> None:
    with pytest.raises(AnalysisError, match="ignore_eos until the model stops in the run, fixed length in the"):
        gate(runs[E2B], runs[FIXED_LENGTH_E2B], Thresholds())
    result = gate(runs[E2B], runs[FIXED_LENGTH_E2B], Thresholds(), allow_different=True)
    assert result.notes == [
        "compared although they differ (--allow-different): ignore_eos until the model stops in the run, "
        "fixed length in the baseline", ONE_RUN_NOTE,
    ]
    assert len(result.checks) == 35


def test_runs_that_share_no_step_are_unusable(runs) -> None:
    with pytest.raises(AnalysisError) as refused:
        gate(runs[CONTEXT_32K], runs[CONTEXT_0], Thresholds())
    assert str(refused.value) == (
        f"run {CONTEXT_32K.name} and baseline {CONTEXT_0.name} share no step (run: 1 user, context 32768; "
        "baseline: 1 user); gate against a baseline swept over the same steps"
    )


def test_steps_only_one_run_has_are_named(runs) -> None:
    result = gate(runs[CONTEXT_0], runs[E2B], Thresholds(min_tok_s=1))
    assert result.notes == ["steps of the baseline the run lacks (not checked): 2 users, 4 users, 8 users, 16 users, "
                            "32 users, 64 users", ONE_RUN_NOTE]
    reverse = gate(runs[E2B], runs[CONTEXT_0], Thresholds(min_tok_s=1))
    assert reverse.notes[0].startswith("steps of the run the baseline lacks (absolute limits only): 2 users, 4 users")
    unmatched = [check for check in reverse.checks if check.baseline is None]
    assert [(c.step, c.figure.name) for c in unmatched][:2] == [("2 users", PER_USER.name), ("4 users", PER_USER.name)]
    assert [check.failures for check in unmatched] == [()] * 5 + [("no value to hold to --min-tok-s 1",)]
    assert unmatched[-1].step == "64 users"  # no request finished inside that window


def test_junit_has_a_testcase_per_check_and_a_failure_per_regression(runs, tmp_path: Path) -> None:
    result = gate(runs[SEED_MANY], runs[BACKEND_SAMPLING], Thresholds())
    path = write_junit(result, tmp_path / "reports" / "gate.xml")
    root = ET.parse(path).getroot()
    assert (root.tag, root.get("tests"), root.get("failures")) == ("testsuites", "10", "3")
    (suite,) = root
    cases = suite.findall("testcase")
    assert len(cases) == 10 and suite.get("skipped") == "3"  # 64 users: no request finished in the window
    failures = [(case.get("classname"), case.get("name")) for case in cases if case.find("failure") is not None]
    assert failures == [
        ("rigbench gate.1 user", "per-user tok/s"),
        ("rigbench gate.64 users", "aggregate tok/s"),
        ("rigbench gate.64 users", ON_DEMAND),
    ]
    failure = cases[5].find("failure")
    assert failure.get("message") == "worse by 54.6%, 95% intervals apart"
    assert failure.text == (
        "aggregate tok/s: baseline 1,589.8 [1,581.8, 1,600.4], run 722.5 [719.1, 724.2]; change -54.6%; "
        "95% intervals apart, worse"
    )


def test_what_the_gate_compares_of_two_workloads(runs) -> None:
    manifest = runs[E2B].manifest
    load = manifest.load.model_copy(update={"max_tokens": 128, "prompts": "code"})
    other = manifest.model_copy(update={"load": load})
    assert workload_differences(other, manifest) == [
        "prompts code in the run, mixed in the baseline",
        "max_tokens 128 in the run, 256 in the baseline",
    ]
    assert workload_differences(manifest.model_copy(update={"model": None}), manifest) == [
        "model not recorded in the run, e2b-q4_0.gguf (ae61b2fd312a) in the baseline"
    ]


def with_energy(run: GatedRun, joules_per_token: float) -> GatedRun:
    """The run as if it had sampled its GPU: every step at ``joules_per_token`` [±2%]."""
    estimate = Estimate(joules_per_token, joules_per_token * 0.98, joules_per_token * 1.02, 10, "hand-made")
    steps = [step.model_copy(update={"energy": StepEnergy(gpus=[], joules=None, mean_w=None,
                                                          j_per_token=estimate)}) for step in run.summary.steps]
    return replace(run, summary=run.summary.model_copy(update={"steps": steps}))


def test_joules_per_token_is_gated_when_both_sampled_and_noted_when_one_did(runs) -> None:
    baseline = with_energy(runs[E2B], 0.20)
    worse = gate(with_energy(runs[E2B], 0.30), baseline, Thresholds())
    assert {figure for _, figure in failed(worse)} == {"J per output token"}
    assert len(worse.checks) == 7 * 6
    same = gate(with_energy(runs[E2B], 0.20), baseline, Thresholds())
    assert same.passed
    one_sided = gate(runs[E2B], baseline, Thresholds())
    assert one_sided.passed and one_sided.notes == [
        "J per output token not checked: only the baseline sampled its GPUs' energy", ONE_RUN_NOTE]
