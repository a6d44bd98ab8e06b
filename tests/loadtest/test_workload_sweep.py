"""Drawn lengths, gamma arrivals and trace replays end to end: a real headless Locust against the
ground-truth server (its log says what arrived when, and how many tokens it sent) and the real
llama-server (its usage says how many prompt tokens it read)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from core.workload import parse_length
from loadtest.arrivals import LATE_START_S, sweep_arrivals
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.lengths import CLOSED_LOOP_KEY, OPEN_LOOP_KEY, draw_lengths
from loadtest.schedule import stages_for
from loadtest.sweep import run_sweep
from loadtest.trace import trace_arrivals, trace_rows
from rigbench.cli import app

pytestmark = pytest.mark.integration
TRACE = Path(__file__).resolve().parent / "data" / "short_trace.jsonl"
CONFIG = GroundTruthConfig(ttft_ms=20, itl_ms=5, model="default")  # each reply as long as its max_tokens


def sweep(tmp_path: Path, url: str, *options: str) -> RunDir:
    result = CliRunner().invoke(app, ["sweep", "--url", url, "--runs-dir", str(tmp_path / "runs"), "--no-progress",
                                      "--max-tokens", "16", *options])
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "runs").iterdir()
    return RunDir(path)


@pytest.mark.timing
def test_a_trace_replays_its_arrivals_lengths_and_conversations(tmp_path: Path) -> None:
    """Two load processes share the replay; the trace (a 1 s span) repeats to fill the 2.5 s step."""
    with GroundTruthServer(CONFIG, tmp_path / "truth.jsonl") as server:
        run = sweep(tmp_path, server.base_url, "--trace", str(TRACE), "--warmup", "1.5", "--measure", "1",
                    "--processes", "2")
    truth = read_truth_log(tmp_path / "truth.jsonl")
    manifest = run.read_manifest()
    assert manifest.status == "complete", manifest.status_detail
    load = manifest.load
    assert load.trace is not None and load.rate_steps == [4.0] and load.trace.rows == 4
    rows = trace_rows(load.trace)
    schedule = trace_arrivals(load.trace, 2.5)
    start = manifest.steps[0].started_at
    # arrival n by its time and prompt (a pass's first row arrives with the pass before's last, a longer one)
    number = {(round(offset, 6), rows[n % len(rows)].prompt_tokens): n for n, offset in enumerate(schedule)}
    records = sorted(run.read_records(), key=lambda r: number[round(r.t_intended - start, 6), r.prompt_tokens])
    assert len(records) == len(schedule) == 10 and all(r.ok and not r.interrupted for r in records)
    # each row was meant to start at its offset after the step's start, and once the worker processes have
    # started (in the warm-up, whose first arrivals wait for them), it arrived at the server within 10 ms of it
    assert np.allclose([r.t_intended - start for r in records], schedule, rtol=0, atol=1e-6)
    lags = [truth[r.request_id]["t_received"] - r.t_intended for r in records if r.phase == "measure"]
    # the window's rate is what the trace scheduled in it (4 arrivals in 1 s), not the trace's mean
    assert manifest.steps[0].rate == len(lags) / 1.0
    assert len(lags) == 4 and all(-0.001 < lag < LATE_START_S for lag in lags), lags
    for number, record in enumerate(records):
        row = rows[number % len(rows)]
        # the reply is exactly the row's tokens (the server's log and its usage); the prompt is the row's words
        assert sum(truth[record.request_id]["tokens"]) == record.completion_tokens == row.output_tokens
        assert record.prompt_tokens == record.context_tokens == row.prompt_tokens
        assert record.category == "trace"
    named = [(r.conversation, r.turn) for r in records]
    assert named == [(None, None), ("a", 1), (None, None), ("a", 2), (None, None), ("a#2", 1), (None, None),
                     ("a#2", 2), (None, None), ("a#3", 1)]
    # the processes took arrivals 0, 2, 4, ... and 1, 3, 5, ...
    shards = [r.shard for r in records]
    assert len(set(shards)) == 2 and all(shards[n] == shards[n % 2] for n in range(len(shards)))


def test_gamma_arrivals_with_drawn_lengths_follow_their_seeds(tmp_path: Path) -> None:
    """Arrival n of the run is sent at the seeded gamma schedule's n-th time with the lengths drawn for n."""
    prompt, output = "lognormal:median=40,sigma=0.5,min=5,max=120", "uniform:4-12"
    with GroundTruthServer(CONFIG, tmp_path / "truth.jsonl") as server:
        run = sweep(tmp_path, server.base_url, "--rates", "6", "--arrival", "gamma:0.5", "--warmup", "0.5",
                    "--measure", "1.5", "--prompt-length", prompt, "--output-length", output, "--workload-seed", "3")
    truth = read_truth_log(tmp_path / "truth.jsonl")
    manifest = run.read_manifest()
    assert manifest.status == "complete", manifest.status_detail
    load = manifest.load
    assert (load.arrival, load.arrival_shape, load.workload_seed) == ("gamma", 0.5, 3)
    records = sorted(run.read_records(), key=lambda r: r.t_intended)
    times = manifest.steps[0].started_at + sweep_arrivals(stages_for(load), "gamma", 0, shape=0.5)
    assert np.allclose([r.t_intended for r in records], times, rtol=0, atol=1e-6)
    finished = 0
    for number, record in enumerate(records):
        drawn = draw_lengths(parse_length(prompt, ""), parse_length(output, ""), 3, (OPEN_LOOP_KEY, number))
        assert record.context_tokens == drawn.prompt_tokens and record.category == "drawn"
        if not record.interrupted:
            finished += 1
            assert record.prompt_tokens == drawn.prompt_tokens  # the server counts words: exactly the draw
            assert sum(truth[record.request_id]["tokens"]) == record.completion_tokens == drawn.output_tokens
    assert finished >= len(records) - 2


def test_drawn_lengths_against_llama_server(llama_server, tmp_path: Path) -> None:
    """The server's usage: each reply is its drawn length (ignore_eos), and the prompt it read is the drawn
    prompt and the chat template's tokens, within two tokens of one constant."""
    prompt, output = parse_length("uniform:20-300", "--prompt-length"), parse_length("uniform:2-10", "--output-length")
    settings = LoadSettings(user_steps=[2], warmup_seconds=0.5, measure_seconds=2.0, max_tokens=4, ignore_eos=False,
                            prompt_length=prompt, output_length=output, workload_seed=5)
    manifest = new_manifest("drawn", "tiny", load=settings, server=server_at(llama_server.base_url, slots=4))
    run = RunDir.create(tmp_path, manifest)
    result = run_sweep(run, llama_server.base_url, progress=False)
    assert result.status == "complete", result.status_detail
    finished = [r for r in run.read_records() if not r.interrupted]
    assert len(finished) >= 6 and all(r.ok for r in finished)
    # every request's lengths are a draw of user 0 or 1 (keys are the run's user number and its request count)
    draws = {(d.prompt_tokens, d.output_tokens) for user in (0, 1) for sent in range(500)
             for d in [draw_lengths(prompt, output, 5, (CLOSED_LOOP_KEY, user, sent))]}
    assert all((r.context_tokens, r.completion_tokens) in draws for r in finished)
    assert all(r.completion_tokens == r.timings.predicted_n for r in finished)
    assert len({r.context_tokens for r in finished}) > 3  # drawn, not one length
    overhead = np.array([r.prompt_tokens - r.context_tokens for r in finished])
    assert np.all(np.abs(overhead - np.median(overhead)) <= 2), overhead
    assert 0 <= np.median(overhead) < 80  # the chat template's tokens around the prompt
