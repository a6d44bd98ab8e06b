"""Open-loop schedules: seeded arrival times, each process's share, rate stages, and the options that ask for them."""

from __future__ import annotations

import argparse

import numpy as np
import pyarrow as pa
import pytest
from typer.testing import CliRunner

from core.errors import LoadTestError, UsageError
from core.lists import parse_load_steps, parse_rates
from core.rundir import LoadSettings, StepWindow
from loadtest.arrivals import process_share, run_arrivals, step_arrivals, sweep_arrivals
from loadtest.late_starts import LateStarts
from loadtest.locust_options import THINK_DEFAULT, TURNS_DEFAULT, settings_from
from loadtest.schedule import locate, make_rate_stages, stages_for
from rigbench.cli import app


def test_poisson_arrivals_are_seeded_and_reproducible() -> None:
    first = step_arrivals(5.0, 60.0, "poisson", seed=0)
    assert np.array_equal(first, step_arrivals(5.0, 60.0, "poisson", seed=0))
    assert not np.array_equal(first[:10], step_arrivals(5.0, 60.0, "poisson", seed=1)[:10])
    assert np.all(np.diff(first) > 0) and first[0] > 0 and first[-1] < 60.0


def test_poisson_mean_rate_and_gaps_over_many_arrivals() -> None:
    rate, duration = 50.0, 2000.0  # 100,000 arrivals: the count's sd is 0.3 % of it
    times = step_arrivals(rate, duration, "poisson", seed=7)
    assert len(times) / duration == pytest.approx(rate, rel=0.02)
    gaps = np.diff(times)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    assert gaps.std() == pytest.approx(1 / rate, rel=0.03)  # exponential: sd equals mean


def test_constant_arrivals_are_evenly_spaced_from_the_step_start() -> None:
    times = step_arrivals(4.0, 3.0, "constant", seed=0)
    assert times.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75]
    assert np.allclose(np.diff(step_arrivals(3.0, 100.0, "constant", seed=5)), 1 / 3, rtol=0, atol=1e-12)


@pytest.mark.parametrize("processes", [1, 2, 3, 5])
def test_the_shares_of_every_process_merge_into_the_whole_schedule(processes: int) -> None:
    stages = make_rate_stages([2.0, 10.0], warmup=1.0, measure=5.0)
    whole = sweep_arrivals(stages, "poisson", seed=3)
    shares = [process_share(whole, index, processes) for index in range(processes)]
    numbers = np.concatenate([share[0] for share in shares])
    times = np.concatenate([share[1] for share in shares])
    assert sorted(numbers.tolist()) == list(range(len(whole)))
    assert np.array_equal(np.sort(times), whole)
    with pytest.raises(ValueError):
        process_share(whole, processes, processes)


def test_a_step_replays_its_arrivals_whatever_comes_before_it() -> None:
    """Seeded by the run's seed and the step's rate, not its index: a resumed sweep sends the same times."""
    whole = sweep_arrivals(make_rate_stages([2.0, 4.0], warmup=1.0, measure=3.0), "poisson", seed=0)
    resumed = sweep_arrivals(make_rate_stages([4.0], warmup=1.0, measure=3.0), "poisson", seed=0)
    assert np.allclose(whole[whole >= 4.0] - 4.0, resumed)


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_mean_one_over_rate_and_a_cv_of_one_over_root_k(shape: float) -> None:
    """100,000 arrivals: the mean gap within 2 %, the gaps' coefficient of variation within 4 % of 1/sqrt(k)
    (k = 0.25: a CV of 2, bursts and lulls at poisson's mean rate)."""
    rate, duration = 50.0, 2000.0
    times = step_arrivals(rate, duration, "gamma", seed=7, shape=shape)
    gaps = np.diff(times)
    assert len(times) / duration == pytest.approx(rate, rel=0.02)
    assert gaps.mean() == pytest.approx(1 / rate, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(shape), rel=0.04)
    assert np.all(gaps >= 0) and times[0] > 0 and times[-1] < duration


def test_gamma_arrivals_are_seeded_and_shared_by_processes_exactly() -> None:
    first = step_arrivals(5.0, 60.0, "gamma", seed=0, shape=0.25)
    assert np.array_equal(first, step_arrivals(5.0, 60.0, "gamma", seed=0, shape=0.25))
    assert not np.array_equal(first[:10], step_arrivals(5.0, 60.0, "gamma", seed=1, shape=0.25)[:10])
    assert not np.array_equal(first[:10], step_arrivals(5.0, 60.0, "gamma", seed=0, shape=0.5)[:10])
    # shape 1 is poisson: the same exponential gaps from the same seed
    assert np.allclose(step_arrivals(5.0, 60.0, "gamma", seed=3, shape=1.0), step_arrivals(5.0, 60.0, "poisson", 3))
    stages = make_rate_stages([2.0, 10.0], warmup=1.0, measure=5.0)
    whole = sweep_arrivals(stages, "gamma", seed=3, shape=0.25)
    for processes in (2, 3):
        shares = [process_share(whole, index, processes) for index in range(processes)]
        assert sorted(np.concatenate([share[0] for share in shares]).tolist()) == list(range(len(whole)))
        assert np.array_equal(np.sort(np.concatenate([share[1] for share in shares])), whole)
    with pytest.raises(ValueError, match="shape above 0"):
        step_arrivals(5.0, 60.0, "gamma", seed=0)


def test_a_run_s_arrivals_carry_its_gamma_shape() -> None:
    settings = settings_from(locust_options(rates="2,4", arrival="gamma:0.25"))
    assert (settings.arrival, settings.arrival_shape) == ("gamma", 0.25)
    assert np.array_equal(run_arrivals(stages_for(settings), settings),
                          sweep_arrivals(stages_for(settings), "gamma", 0, shape=0.25))


def test_rate_stages_place_times_with_their_rate_and_no_users() -> None:
    stages = make_rate_stages([2.5, 10.0], warmup=1.0, measure=[3.0, 4.0])
    assert [(s.users, s.rate, s.measure, s.open_loop) for s in stages] == [(0, 2.5, 3.0, True), (0, 10.0, 4.0, True)]
    position = locate(stages, 4.5)
    assert (position.index, position.users, position.rate, position.phase) == (1, 0, 10.0, "warmup")
    assert locate(stages, 5.0).phase == "measure" and locate(stages, 9.0) is None
    with pytest.raises(LoadTestError, match="above 0"):
        make_rate_stages([0.0], 1.0, 1.0)
    with pytest.raises(UsageError, match="2 measured windows for 3 rate steps"):
        make_rate_stages([1.0, 2.0, 3.0], 1.0, [1.0, 2.0])
    settings = LoadSettings(rate_steps=[1.0, 2.0], warmup_seconds=1, measure_seconds=2, max_tokens=8)
    assert [s.rate for s in stages_for(settings)] == [1.0, 2.0]
    assert settings.remaining(1).rate_steps == [2.0]


@pytest.mark.parametrize(
    "text, message",
    [
        ("1 2", "--rates: cannot read '1 2': '1 2' is not a number of requests per second"),
        ("1,,2", "--rates: cannot read '1,,2': expected values separated by commas"),
        ("0,1", "--rates: every rate must be above 0 requests per second, found '0,1'"),
        ("-1", "--rates: cannot read '-1': '-1' is not a number"),
        ("2,2.0", "--rates: 2 is given twice in '2,2.0'"),
        ("", "--rates: cannot read ''"),
    ],
)
def test_bad_rates_name_the_option(text: str, message: str) -> None:
    with pytest.raises(UsageError, match="^" + message.replace("(", r"\(")):
        parse_rates(text)


def test_steps_or_rates_but_not_both() -> None:
    assert parse_rates("0.5, 1,2.5") == [0.5, 1.0, 2.5]
    assert parse_load_steps(None, "1,2") == ([], [1.0, 2.0])
    assert parse_load_steps("1,4", None) == ([1, 4], [])
    assert parse_load_steps(None, None, "1,2") == ([1, 2], [])
    with pytest.raises(UsageError, match="^--steps and --rates cannot be given together"):
        parse_load_steps("1,2", "1,2")
    with pytest.raises(UsageError, match="^--rates: cannot read ''"):
        parse_load_steps(None, "")


def locust_options(**changes: object) -> argparse.Namespace:
    values = dict(steps="", rates="", arrival="poisson", arrival_seed=0, warmup=1.0, measure="2", max_tokens=8,
                  temperature=0.0, cache_prompt=False, ignore_eos=False, prompts="mixed", context_tokens=0,
                  processes=1, pin_slots=False, drain=0.0, sessions=False, turns=TURNS_DEFAULT, think=THINK_DEFAULT,
                  system_prompt_tokens=0, prompt_length="", output_length="", trace="", trace_speed=1.0,
                  workload_seed=0, slo="", max_error_rate=0.5, read_timeout=60.0, timeline=False, ride_out=10.0)
    return argparse.Namespace(**{**values, **changes})


def test_the_locustfile_options_make_open_loop_settings_or_refuse_naming_the_flag() -> None:
    settings = settings_from(locust_options(rates="1,4", arrival="constant", arrival_seed=9))
    assert (settings.rate_steps, settings.user_steps, settings.arrival, settings.arrival_seed) == (
        [1.0, 4.0], [], "constant", 9)
    assert [s.rate for s in stages_for(settings_from(locust_options(rates="3")))] == [3.0]
    assert settings_from(locust_options()).user_steps == [1, 2, 4, 8, 16, 32, 64]  # neither: the default steps
    with pytest.raises(UsageError, match="--steps and --rates"):
        settings_from(locust_options(steps="1", rates="2"))
    with pytest.raises(UsageError, match="--rates: cannot read 'fast'"):
        settings_from(locust_options(rates="fast"))
    with pytest.raises(UsageError, match="--arrival-seed"):
        settings_from(locust_options(rates="1", arrival_seed=-1))
    with pytest.raises(UsageError, match="--drain: expected seconds >= 0, found -1"):
        settings_from(locust_options(drain=-1.0))
    with pytest.raises(UsageError, match="--measure: 3 measured windows for 2 rate steps"):
        settings_from(locust_options(rates="1,2", measure="1,2,3"))
    assert settings_from(locust_options(steps="1,4", pin_slots=True)).pin_slots is True
    with pytest.raises(UsageError, match="^--arrival gamma:0.5 with --steps: gamma gaps space an open loop"):
        settings_from(locust_options(steps="1", arrival="gamma:0.5"))
    with pytest.raises(UsageError, match="^--trace-speed without --trace"):
        settings_from(locust_options(rates="1", trace_speed=2.0))
    for pinned_wrong in (dict(rates="1"), dict(steps="4", processes=2)):
        with pytest.raises(UsageError, match="--pin-slots: users are numbered within one load process"):
            settings_from(locust_options(pin_slots=True, **pinned_wrong))


def test_late_starts_are_counted_per_measured_step() -> None:
    rows = [(0, "measure", 100.0, 0.001), (0, "measure", 100.0, 0.05), (0, "warmup", 100.0, 0.5),
            (1, "measure", 100.0, 0.002), (1, "measure", None, 3.0)]  # the last: closed loop, no schedule to keep
    table = pa.table({
        "step": [float(row[0]) for row in rows],
        "phase": pa.array([row[1] for row in rows]).dictionary_encode(),
        "t_intended": pa.array([row[2] for row in rows], pa.float64()),
        "t_start": [(row[2] or 0.0) + row[3] for row in rows],
    })
    late = LateStarts.of_table(table)
    assert late.measured == {0: 2, 1: 1}
    steps = [StepWindow(index=0, users=0, rate=2.0, started_at=0, measure_start=1),
             StepWindow(index=1, users=0, rate=4.0, started_at=5, measure_start=6)]
    (warning,) = late.warnings(steps)
    assert warning.startswith("step 0 (2 req/s): 1 of 2 measured requests started more than 10 ms after their "
                              "scheduled time (worst 50 ms)")


@pytest.mark.parametrize(
    "options, message",
    [
        (["--steps", "1,2", "--rates", "1"], "--steps and --rates cannot be given together"),
        (["--rates", "1;2"], "--rates: cannot read '1;2'"),
        (["--rates", "1", "--arrival", "burst"], "--arrival: expected poisson, constant or gamma:SHAPE"),
        (["--rates", "1,2", "--measure", "1,2,3"], "--measure: 3 measured windows for 2 rate steps"),
    ],
)
def test_sweep_refuses_a_bad_open_loop_before_any_run_folder(tmp_path, options: list[str], message: str) -> None:
    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["sweep", "--url", "http://127.0.0.1:9", "--runs-dir", str(runs), *options])
    assert isinstance(result.exception, UsageError) and message in str(result.exception)  # exit 2 in the CLI
    assert not runs.exists()
