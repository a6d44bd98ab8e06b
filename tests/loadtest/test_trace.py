"""Traces (``loadtest.trace``): the reader's file:line refusals, the replay's arrival times and their shares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from analysis.gate import workload_differences
from core.errors import LoadTestError, UsageError
from core.rundir import LoadSettings, RunManifest, new_manifest, server_at
from core.rundir.models import SessionSettings
from core.workload import describe_arrivals, parse_length
from loadtest.arrivals import process_share, run_arrivals, window_rate
from loadtest.lengths import WorkloadLengths
from loadtest.schedule import stages_for
from loadtest.trace import trace_arrivals, trace_rate, trace_rows, trace_source
from rigbench.cli import app

TRACE = Path(__file__).resolve().parent / "data" / "short_trace.jsonl"
GOOD = '{"offset_s": 0, "prompt_tokens": 4, "output_tokens": 2}'


def test_the_sample_trace_reads_whole_and_blank_lines_are_skipped() -> None:
    source = trace_source(TRACE, 2.0)
    rows = trace_rows(source)
    assert source.rows == len(rows) == 4 and source.speed == 2.0
    assert [row.offset_s for row in rows] == [0.0, 0.25, 0.5, 1.0]
    assert [(row.conversation, row.turn) for row in rows] == [(None, None), ("a", 1), (None, None), ("a", 2)]
    assert trace_rate(source) == 8.0  # 4 rows over a 1 s span, twice as fast


@pytest.mark.parametrize("lines, message", [
    ([GOOD, "{offset_s: 1}"], ":2: not JSON (Expecting property name enclosed in double quotes)"),
    ([GOOD, "", '{"offset_s": 1, "prompt_tokens": 0, "output_tokens": 2}'],
     ":3: prompt_tokens: Input should be greater than or equal to 1"),
    (['{"offset_s": 0, "prompt_tokens": 4}'], ":1: output_tokens: Field required"),
    ([GOOD, '{"offset_s": 1, "prompt_tokens": 4, "output_tokens": 2, "colour": "red"}'], ":2: colour: unknown key"),
    (['{"offset_s": 2, "prompt_tokens": 4, "output_tokens": 2}', GOOD],
     ":2: offset_s 0 is before the line above's (2); a trace is in arrival order"),
    (["[1, 2]"], ":1: (top level): Input should be a valid dictionary"),
    (["", "  "], ": the trace holds no rows"),
])
def test_a_bad_trace_is_refused_naming_its_file_and_line(tmp_path: Path, lines: list[str], message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LoadTestError) as caught:
        trace_source(path)
    assert str(caught.value).startswith(f"{path.resolve()}{message}"), str(caught.value)


def test_a_trace_that_changed_since_the_run_began_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    path.write_text(GOOD + "\n" + GOOD.replace('"offset_s": 0', '"offset_s": 1') + "\n")
    source = trace_source(path)
    path.write_text(GOOD + "\n")
    with pytest.raises(LoadTestError, match="changed since the run began"):
        trace_rows(source)


def test_a_replay_follows_the_offsets_and_repeats_for_as_long_as_the_step_lasts() -> None:
    source = trace_source(TRACE)  # offsets 0, 0.25, 0.5, 1.0: a span of 1 s
    assert trace_arrivals(source, 1.0).tolist() == [0.0, 0.25, 0.5]  # the step ends before the last row
    assert trace_arrivals(source, 1.01).tolist() == [0.0, 0.25, 0.5, 1.0, 1.0]
    # past its end the trace starts again one span later, its first row with the last of the pass before
    assert trace_arrivals(source, 2.6).tolist() == [0.0, 0.25, 0.5, 1.0, 1.0, 1.25, 1.5, 2.0, 2.0, 2.25, 2.5]
    # --trace-speed 2: the offsets halve, and the passes follow one (halved) span apart
    assert trace_arrivals(trace_source(TRACE, 2.0), 1.3).tolist() == [0.0, 0.125, 0.25, 0.5, 0.5, 0.625, 0.75, 1.0,
                                                                    1.0, 1.125, 1.25]
    assert trace_arrivals(source, 0.0).tolist() == []


def test_arrival_n_is_row_n_mod_rows_and_the_mean_rate_is_the_trace_s() -> None:
    source = trace_source(TRACE)
    times = trace_arrivals(source, 100.0)
    assert len(times) / 100.0 == pytest.approx(trace_rate(source), rel=0.01)
    offsets = np.array([row.offset_s for row in trace_rows(source)])
    numbers = np.arange(len(times))
    assert np.allclose(times, offsets[numbers % 4] + numbers // 4 * 1.0, rtol=0, atol=1e-12)


@pytest.mark.parametrize("processes", [1, 2, 3])
def test_processes_share_a_replay_exactly_as_poisson_arrivals(processes: int) -> None:
    settings = LoadSettings(rate_steps=[trace_rate(trace_source(TRACE))], warmup_seconds=0.5, measure_seconds=3,
                            max_tokens=8, trace=trace_source(TRACE))
    whole = run_arrivals(stages_for(settings), settings)
    assert np.array_equal(whole, trace_arrivals(settings.trace, 3.5))  # type: ignore[arg-type]
    shares = [process_share(whole, index, processes) for index in range(processes)]
    numbers = np.sort(np.concatenate([share[0] for share in shares]))
    assert numbers.tolist() == list(range(len(whole)))
    assert np.array_equal(np.sort(np.concatenate([share[1] for share in shares])), whole)
    # the lengths of arrival n are row n mod rows' wherever it is sent
    lengths = WorkloadLengths(settings)
    sent = [lengths.for_arrival(int(n)) for index in range(processes) for n in shares[index][0]]
    assert sorted((item.prompt_tokens, item.output_tokens) for item in sent if item) == sorted(
        (row.prompt_tokens, row.output_tokens) for n in range(len(whole)) for row in [lengths.rows[n % 4]])


def test_sweep_refuses_an_empty_or_bad_trace_before_any_run_folder(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(GOOD + "\n{\n")
    result = CliRunner().invoke(app, ["sweep", "--url", "http://127.0.0.1:9", "--runs-dir", str(runs),
                                      "--trace", str(bad)])
    assert isinstance(result.exception, UsageError) and f"{bad.resolve()}:2: not JSON" in str(result.exception)
    assert not runs.exists()


@pytest.mark.integration
def test_the_console_script_refuses_an_empty_trace_in_one_line(tmp_path: Path) -> None:
    """What a user sees: exit 2, one line on stderr, and no run folder."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    runs = tmp_path / "runs"
    rigbench = Path(sys.executable).with_name("rigbench")
    done = subprocess.run([rigbench, "sweep", "--trace", str(empty), "--url", "http://127.0.0.1:9", "--runs-dir",
                           str(runs)], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"rigbench: error: {empty.resolve()}: the trace holds no rows; expected one JSON object "
                           "per line (offset_s, prompt_tokens, output_tokens)\n")
    assert not runs.exists()


def test_a_gate_tells_apart_workloads_that_differ_only_in_arrivals_or_lengths() -> None:
    def manifest(**load: object) -> RunManifest:
        settings = LoadSettings(warmup_seconds=1, measure_seconds=2, max_tokens=8, **load)  # type: ignore[arg-type]
        return new_manifest("t", "tiny", load=settings, server=server_at("http://127.0.0.1:9", slots=1))

    poisson = manifest(rate_steps=[4.0])
    bursty = manifest(rate_steps=[4.0], arrival="gamma", arrival_shape=0.25)
    assert describe_arrivals(bursty.load) == "gamma:0.25 (seed 0)"  # type: ignore[arg-type]
    assert workload_differences(bursty, poisson) == ["arrivals gamma:0.25 (seed 0) in the run, poisson (seed 0) in "
                                                     "the baseline"]
    source = trace_source(TRACE, 2.0)
    replay = manifest(rate_steps=[8.0], trace=source)
    assert describe_arrivals(replay.load) == f"trace short_trace.jsonl ({source.sha256[:12]}, 4 rows, speed 2)"  # type: ignore[arg-type]
    drawn = manifest(user_steps=[2], prompt_length=parse_length("uniform:64-512", ""),
                     output_length=parse_length("lognormal:median=100,sigma=0.5,max=400", ""), workload_seed=4)
    assert workload_differences(drawn, manifest(user_steps=[2])) == [
        "prompts drawn uniform:64-512 (workload seed 4) in the run, mixed in the baseline",
        "max_tokens drawn lognormal:median=100,sigma=0.5,min=1,max=400 (workload seed 4) in the run, 8 in the "
        "baseline",
    ]
    assert workload_differences(manifest(user_steps=[2]), manifest(user_steps=[2])) == []
    chat = manifest(user_steps=[2], cache_prompt=True, sessions=SessionSettings(turns_min=2, turns_max=3))
    assert workload_differences(chat, manifest(user_steps=[2])) == [
        "requests conversations of 2-3 turns, thinking exponential 3 s, a 0-token system prompt (workload seed 0), "
        "prompt cache on in the run, one-shot prompts, prompt cache off in the baseline"]


def test_a_trace_windows_rate_is_what_the_trace_scheduled_in_it_not_its_mean(tmp_path: Path) -> None:
    path = tmp_path / "burst.jsonl"
    offsets = [0.0, 0.1, 0.2, 0.3, 3.0]  # four at once, then a long quiet stretch: 5 rows in 3 s
    path.write_text("".join(f'{{"offset_s": {o}, "prompt_tokens": 4, "output_tokens": 2}}\n' for o in offsets))
    source = trace_source(path)
    busy = LoadSettings(rate_steps=[trace_rate(source)], warmup_seconds=0, measure_seconds=1, max_tokens=2,
                        trace=source)
    quiet = busy.model_copy(update={"warmup_seconds": 1.0, "measure_seconds": 1.5})
    assert trace_rate(source) == pytest.approx(5 / 3)
    assert window_rate(stages_for(busy), busy, 0) == 4.0
    assert window_rate(stages_for(quiet), quiet, 0) == 0.0
    rates = LoadSettings(rate_steps=[2.5], warmup_seconds=1, measure_seconds=2, max_tokens=2)
    assert window_rate(stages_for(rates), rates, 0) == 2.5  # a rate's window is the rate
