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
A step is *followed* when every figure is within its tolerance (``TOLERANCES``, said once). The
log's lines are read as ``TruthEntry`` models, which the peers study (``rigbench study peers``)
judges other load generators with.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from analysis.figures import run_figures
from analysis.load import load_run
from core.rundir import RunDir
from loadtest.ground_truth import read_truth_log
from loadtest.selftest import run_selftest
from loadtest.telemetry import LOADGEN_CPU_METRIC


@dataclass(frozen=True)
class Tolerance:
    """How far one reported figure may be from the truth for a step to count as followed."""

    figure: str  # the StepFidelity field holding the error
    label: str
    limit: float
    unit: str

    def met(self, step: StepFidelity) -> bool:
        return abs(getattr(step, self.figure)) <= self.limit

    def __str__(self) -> str:
        return f"{self.label} within {self.limit:g} {self.unit}"


TOLERANCES = (
    Tolerance("tok_s_error_pct", "tok/s", 0.5, "%"),
    Tolerance("ttft_p50_error_ms", "TTFT p50", 2.0, "ms"),
    Tolerance("itl_p50_error_ms", "ITL p50", 0.5, "ms"),
    Tolerance("tpot_p50_error_ms", "TPOT p50", 0.2, "ms"),
)
FOLLOWED_RULE = ", ".join(map(str, TOLERANCES))  # "tok/s within 0.5 %, TTFT p50 within 2 ms, ..."


class TruthEntry(BaseModel):
    """One line of the ground-truth server's send log: a request, when it arrived, and each chunk it sent.

    Both judges read the log through it: the selftest's fidelity (rigbench's reported figures) and
    the peers study (other load generators' figures).
    """

    model_config = ConfigDict(frozen=True)

    request_id: str
    t_received: float = Field(description="unix time the request arrived")
    sends: list[float] = Field(default_factory=list, description="unix time each chunk left")
    tokens: list[int] = Field(default_factory=list, description="tokens in each chunk")
    fault: str = Field("none", description="how the stream ended early (client_gone, ...), or none")

    @model_validator(mode="before")
    @classmethod
    def _one_token_a_send(cls, data: Any) -> Any:
        """A log without per-chunk counts carries one token a send."""
        if isinstance(data, dict):
            sends = data.get("sends") or []
            data = {**data, "sends": sends, "tokens": data.get("tokens") or [1] * len(sends)}
        return data

    @model_validator(mode="after")
    def _a_count_per_send(self) -> TruthEntry:
        if len(self.tokens) != len(self.sends):
            raise ValueError(f"{len(self.sends)} sends but {len(self.tokens)} token counts")
        return self

    @property
    def ttft_s(self) -> float | None:
        """First send minus arrival; None for a request cut before its first chunk."""
        return self.sends[0] - self.t_received if self.sends else None

    @property
    def mean_gap_s(self) -> float | None:
        """The mean gap between sends (ITL per chunk); None with fewer than two sends."""
        return (self.sends[-1] - self.sends[0]) / (len(self.sends) - 1) if len(self.sends) > 1 else None

    @property
    def tpot_s(self) -> float | None:
        """Per-token decode time as sent: last send - first send over the tokens after the first chunk."""
        after_first = sum(self.tokens) - self.tokens[0] if self.tokens else 0
        return (self.sends[-1] - self.sends[0]) / after_first if len(self.sends) > 1 and after_first > 0 else None


def read_truth(path: Path) -> list[TruthEntry]:
    """Every request the truth server logged (cut ones too); none when there is no log."""
    return [TruthEntry.model_validate(raw) for raw in read_truth_log(path).values()]


def tokens_sent(entries: Iterable[TruthEntry], start: float, end: float) -> tuple[int, int]:
    """(tokens, chunks) the truth server sent in [start, end), each chunk counted when it left."""
    tokens = chunks = 0
    for entry in entries:
        for at, count in zip(entry.sends, entry.tokens, strict=True):
            if start <= at < end:
                tokens += count
                chunks += 1
    return tokens, chunks


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
        """Followed: every figure within its tolerance (``TOLERANCES``)."""
        return all(tolerance.met(self) for tolerance in TOLERANCES)


def _median_ms(values: Sequence[float | None]) -> float:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    return statistics.median(finite) * 1000.0 if finite else float("nan")


def compare(run_path: Path, truth_log: Path) -> list[StepFidelity]:
    """Per-step fidelity of a finished ground-truth sweep's reported figures."""
    loaded = load_run(run_path)
    figures = run_figures(loaded)
    truth = {entry.request_id: entry for entry in read_truth(truth_log)}
    records = loaded.records
    ok = records["error_kind"].isna() & ~records["interrupted"] & (records["phase"] == "measure")
    cpu = {s.step: s.metrics.get(LOADGEN_CPU_METRIC) for s in loaded.telemetry if s.boundary == "end"}
    results = []
    for step in figures.steps:
        ids = records.loc[ok & (records["step"] == step.index), "request_id"]
        per_request = [truth[i] for i in ids if i in truth and truth[i].sends]
        if not per_request:
            continue
        tokens, chunks = tokens_sent(truth.values(), step.window_start, step.window_end)
        truth_tok_s = tokens / step.window_seconds
        reported = step.aggregate_tok_s.value
        truth_ttft = _median_ms([entry.ttft_s for entry in per_request])
        truth_itl = _median_ms([entry.mean_gap_s for entry in per_request])
        truth_tpot = _median_ms([entry.tpot_s for entry in per_request])
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


def capacity(results: list[StepFidelity]) -> float:
    """The highest true aggregate tok/s that was followed within the tolerances (0 if none)."""
    return max((r.truth_tok_s for r in results if r.tracked), default=0.0)


def results_table(results: list[StepFidelity]) -> list[dict]:
    rows = []
    for r in results:
        row = asdict(r)
        row["followed"] = r.tracked
        rows.append(row)
    return rows
