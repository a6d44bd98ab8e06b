"""One cell of the peers table: one tool on one load, its figures set against the truth server's send log.

The truth is read over the tool's own measured window when it says which one, else over the
span the truth server was busy; the tool's CPU over that busy span (start-up and report writing
left out).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from rigbench.fidelity import TruthEntry, tokens_sent
from rigbench.studies.peers.cpu_trace import CpuTrace
from rigbench.studies.peers.loads import Load
from rigbench.studies.peers.tools import ToolReport


def busy_span(entries: Sequence[TruthEntry], after: float | None = None) -> tuple[float, float] | None:
    """From the first request received to the last chunk sent: the span a load kept the server busy.

    ``after``: where the tool says its load began, so a check it made before (rigbench's pre-flight
    reply, seconds ahead of the load processes' start) is not taken for load."""
    load = [e for e in entries if after is None or e.t_received >= after]
    sends = [t for e in load for t in e.sends]
    if not sends:
        return None
    return min(e.t_received for e in load), max(sends)


def truth_tpot_ms(entries: Sequence[TruthEntry], start: float, end: float) -> list[float]:
    """Each reply's per-token decode time as the server sent it, for requests received in [start, end)."""
    return [e.tpot_s * 1000.0 for e in entries if e.tpot_s is not None and start <= e.t_received < end]


def truth_ttft_ms(entries: Sequence[TruthEntry], start: float, end: float) -> list[float]:
    """First send minus received (ms) of the requests received in [start, end) that got a chunk."""
    return [e.ttft_s * 1000.0 for e in entries if e.ttft_s is not None and start <= e.t_received < end]


@dataclass
class Cell:
    tool: str
    load: str
    ok: bool
    error: str | None = None
    report: dict | None = None
    truth: dict | None = None
    ttft_p50_error_ms: float | None = None
    tok_s_error_pct: float | None = None
    itl_p50_ms: float | None = None
    itl_unit: str | None = None
    tpot_p50_ms: float | None = None
    tpot_p50_error_ms: float | None = None
    cpu_seconds: float | None = None
    cpu_pct: float | None = None
    cpu_ms_per_1k_chunks: float | None = None
    cpu_seconds_lifetime: float | None = None
    wall_seconds: float | None = None
    loadavg_before: list[float] | None = None
    command: list[str] | None = None


def compare_cell(tool: str, load: Load, report: ToolReport, entries: Sequence[TruthEntry], cpu: CpuTrace) -> Cell:
    """A tool's figures against the truth log and its CPU over the span the server was busy."""
    span = busy_span(entries, report.load_start)
    if span is None:
        return Cell(tool, load.name, ok=False, error="the truth server logged no chunks", report=asdict(report))
    window = report.window or span
    tokens, chunks_in_window = tokens_sent(entries, *window)
    truth_tok_s = tokens / (window[1] - window[0]) if window[1] > window[0] else 0.0
    ttfts = truth_ttft_ms(entries, *window)
    truth_ttft = statistics.median(ttfts) if ttfts else None
    tpots = truth_tpot_ms(entries, *window)
    truth_tpot = statistics.median(tpots) if tpots else None
    gaps = [(b - a) * 1000.0 for e in entries for a, b in zip(e.sends, e.sends[1:], strict=False)]
    _, chunks = tokens_sent(entries, span[0], math.nextafter(span[1], math.inf))
    cpu_seconds = cpu.between(*span)
    truth = {
        "window": list(window),
        "window_from": "tool" if report.window else "truth server busy span",
        "busy_span": list(span),
        "requests_logged": len(entries),
        "requests_cut": sum(1 for e in entries if e.fault != "none"),
        "tok_s": truth_tok_s,
        "tokens_in_window": tokens,
        "chunks_in_window": chunks_in_window,
        "chunks_busy_span": chunks,
        "ttft_p50_ms": truth_ttft,
        "tpot_p50_ms": truth_tpot,
        "itl_ms_per_token": load.itl_ms,
        "itl_ms_per_chunk": load.itl_ms * load.k,
        "chunk_gap_p50_ms": statistics.median(gaps) if gaps else None,
    }
    return Cell(
        tool=tool,
        load=load.name,
        ok=True,
        report=asdict(report),
        truth=truth,
        ttft_p50_error_ms=(report.ttft_p50_ms - truth_ttft)
        if report.ttft_p50_ms is not None and truth_ttft is not None
        else None,
        tok_s_error_pct=(report.tok_s - truth_tok_s) / truth_tok_s * 100.0 if report.tok_s and truth_tok_s else None,
        itl_p50_ms=report.itl_p50_ms,
        itl_unit=report.itl_unit,
        tpot_p50_ms=report.tpot_p50_ms,
        tpot_p50_error_ms=(report.tpot_p50_ms - truth_tpot)
        if report.tpot_p50_ms is not None and truth_tpot is not None
        else None,
        cpu_seconds=cpu_seconds,
        cpu_pct=cpu_seconds / (span[1] - span[0]) * 100.0 if span[1] > span[0] else None,
        cpu_ms_per_1k_chunks=cpu_seconds * 1000.0 / chunks * 1000.0 if chunks else None,
        cpu_seconds_lifetime=cpu.lifetime_seconds,
    )
