"""How exact are rigbench's *reported* figures? A ground-truth sweep's report set against the
server's own send log.

The figures judged are the ones a user reads in the report (``analysis.figures``), not a private
recount: aggregate output tok/s, TTFT p50, ITL p50 (per chunk) and TPOT p50 (per token) of each
step. The truth comes from the ground-truth server's log over the same measured requests (by
request id):

- aggregate tok/s: tokens the server sent inside the step's measured window (each chunk's
  tokens at the instant it left) / the window;
- TTFT: first send minus the time the request arrived (with ``queue``, the wait for a slot is
  in it, as it is in an open-loop client's latency from the intended start);
- ITL per chunk: each request's mean gap between sends, p50 over requests (the report's ITL
  is the same statistic of the client's arrivals);
- TPOT per token: each request's (last send - first send) / (tokens after the first chunk).

The load generator's CPU over the window comes with it, as CPU-ms per 1,000 streamed chunks.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from analysis.figures import run_figures
from analysis.load import load_run
from core.rundir import RunDir
from loadtest.ground_truth import read_truth_log
from loadtest.selftest import run_selftest
from loadtest.telemetry import LOADGEN_CPU_METRIC

TOK_S_TOLERANCE_PCT = 0.5
TTFT_TOLERANCE_MS = 2.0
ITL_TOLERANCE_MS = 0.5
TPOT_TOLERANCE_MS = 0.2


@dataclass
class StepFidelity:
    step: int
    users: int
    rate: float | None
    requests: int
    truth_tok_s: float
    client_tok_s: float
    tok_s_error_pct: float
    truth_ttft_p50_ms: float
    ttft_p50_error_ms: float
    truth_itl_p50_ms: float
    itl_p50_error_ms: float
    truth_tpot_p50_ms: float
    tpot_p50_error_ms: float
    start_lag_p50_ms: float | None = None
    loadgen_cpu_pct: float | None = None
    cpu_ms_per_1000_chunks: float | None = None

    @property
    def tracked(self) -> bool:
        """Followed: tok/s within 0.5 %, TTFT p50 within 2 ms, ITL p50 within 0.5 ms, TPOT p50 within 0.2 ms."""
        return (
            abs(self.tok_s_error_pct) <= TOK_S_TOLERANCE_PCT
            and abs(self.ttft_p50_error_ms) <= TTFT_TOLERANCE_MS
            and abs(self.itl_p50_error_ms) <= ITL_TOLERANCE_MS
            and abs(self.tpot_p50_error_ms) <= TPOT_TOLERANCE_MS
        )


def _truth_request_figures(entry: dict) -> tuple[float, float, float] | None:
    """(TTFT, mean gap between sends, per-token decode time) of one logged reply, in seconds."""
    sends = entry["sends"]
    if not sends:
        return None
    tokens = entry.get("tokens") or [1] * len(sends)
    ttft = sends[0] - entry["t_received"]
    if len(sends) < 2:
        return ttft, float("nan"), float("nan")
    span = sends[-1] - sends[0]
    return ttft, span / (len(sends) - 1), span / (sum(tokens) - tokens[0])


def _sent_in(truth: dict[str, dict], start: float, end: float) -> tuple[int, int]:
    """(tokens, chunks) the server sent inside [start, end)."""
    tokens = chunks = 0
    for entry in truth.values():
        counts = entry.get("tokens") or [1] * len(entry["sends"])
        for at, count in zip(entry["sends"], counts, strict=True):
            if start <= at < end:
                tokens += count
                chunks += 1
    return tokens, chunks


def _median_ms(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return statistics.median(finite) * 1000.0 if finite else float("nan")


def compare(run_path: Path, truth_log: Path) -> list[StepFidelity]:
    """Per-step fidelity of a finished ground-truth sweep's reported figures."""
    loaded = load_run(run_path)
    figures = run_figures(loaded)
    truth = read_truth_log(truth_log)
    records = loaded.records
    ok = records["error_kind"].isna() & ~records["interrupted"] & (records["phase"] == "measure")
    cpu = {s.step: s.metrics.get(LOADGEN_CPU_METRIC) for s in loaded.telemetry if s.boundary == "end"}
    results = []
    for step in figures.steps:
        ids = records.loc[ok & (records["step"] == step.index), "request_id"]
        per_request = [f for f in (_truth_request_figures(truth[i]) for i in ids if i in truth) if f is not None]
        if not per_request:
            continue
        tokens, chunks = _sent_in(truth, step.window_start, step.window_end)
        truth_tok_s = tokens / step.window_seconds
        reported = step.aggregate_tok_s.value
        truth_ttft, truth_itl, truth_tpot = (_median_ms([f[k] for f in per_request]) for k in range(3))
        load_cpu = cpu.get(step.index)
        lag = step.start_lag_s.get("p50") if step.start_lag_s else None
        results.append(
            StepFidelity(
                step=step.index,
                users=step.users,
                rate=step.rate,
                requests=len(per_request),
                truth_tok_s=truth_tok_s,
                client_tok_s=reported,
                tok_s_error_pct=(reported - truth_tok_s) / truth_tok_s * 100.0 if truth_tok_s else 0.0,
                truth_ttft_p50_ms=truth_ttft,
                ttft_p50_error_ms=step.ttft_s["p50"].value * 1000.0 - truth_ttft,
                truth_itl_p50_ms=truth_itl,
                itl_p50_error_ms=step.itl_s["p50"].value * 1000.0 - truth_itl,
                truth_tpot_p50_ms=truth_tpot,
                tpot_p50_error_ms=step.tpot_s["p50"].value * 1000.0 - truth_tpot,
                start_lag_p50_ms=lag * 1000.0 if lag is not None else None,
                loadgen_cpu_pct=load_cpu,
                cpu_ms_per_1000_chunks=(
                    load_cpu / 100.0 * step.window_seconds * 1000.0 / (chunks / 1000.0)
                    if load_cpu is not None and chunks
                    else None
                ),
            )
        )
    return results


def selftest(runs_dir: Path, **options: object) -> tuple[RunDir, list[StepFidelity]]:
    """A ground-truth sweep (``loadtest.selftest.run_selftest`` options) and its fidelity."""
    run, truth_log = run_selftest(runs_dir, **options)  # type: ignore[arg-type]
    return run, compare(run.path, truth_log)


def ceiling(results: list[StepFidelity]) -> float:
    """The highest true aggregate tok/s that was followed within the tolerances (0 if none)."""
    return max((r.truth_tok_s for r in results if r.tracked), default=0.0)


def results_table(results: list[StepFidelity]) -> list[dict]:
    rows = []
    for r in results:
        row = asdict(r)
        row["followed"] = r.tracked
        rows.append(row)
    return rows
