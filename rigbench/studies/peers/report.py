"""The peers study's report: a Markdown table (one row per figure per load, one column per tool), the method,
the errors, and every figure in ``results.json``."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import psutil
from tabulate import tabulate

from core.whole_files import write_whole
from rigbench.studies.peers.cells import Cell
from rigbench.studies.peers.cpu_trace import SAMPLE_SECONDS
from rigbench.studies.peers.loads import REPLY_TOKENS, TTFT_MS, Durations, Load


def _fmt(value: float | None, digits: int = 1, signed: bool = False) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:+.{digits}f}" if signed else f"{value:.{digits}f}"


ROWS: tuple[tuple[str, Callable[[Cell], str]], ...] = (
    ("TTFT p50 error (ms)", lambda c: _fmt(c.ttft_p50_error_ms, 1, signed=True)),
    ("aggregate tok/s error (%)", lambda c: _fmt(c.tok_s_error_pct, 2, signed=True)),
    ("ITL p50 (ms)", lambda c: f"{_fmt(c.itl_p50_ms, 2)} per {c.itl_unit}"),
    ("TPOT p50 (ms)", lambda c: _fmt(c.tpot_p50_ms, 2)),
    ("TPOT p50 error (ms)", lambda c: _fmt(c.tpot_p50_error_ms, 2, signed=True)),
    ("load tool CPU (% of one core)", lambda c: _fmt(c.cpu_pct, 0)),
    ("CPU ms per 1,000 chunks", lambda c: _fmt(c.cpu_ms_per_1k_chunks, 0)),
)


def _truth_note(row: str, load: Load, cells: Sequence[Cell]) -> str:
    truths = [c.truth for c in cells if c.ok and c.truth]
    if row.startswith("TTFT"):
        values = [t["ttft_p50_ms"] for t in truths if t["ttft_p50_ms"] is not None]
        return f"truth {statistics.median(values):.1f} ms" if values else "truth n/a"
    if row.startswith("aggregate"):
        values = [t["tok_s"] for t in truths]
        return f"truth {statistics.median(values):.0f} tok/s" if values else "truth n/a"
    if row.startswith("ITL"):
        return f"truth {load.itl_ms:.2f}/token, {load.itl_ms * load.k:.2f}/chunk"
    if row.startswith("TPOT p50 error"):
        values = [t["tpot_p50_ms"] for t in truths if t.get("tpot_p50_ms") is not None]
        return f"against each run's send log, median {statistics.median(values):.2f}" if values else "truth n/a"
    if row.startswith("TPOT"):
        return f"configured {load.itl_ms:.2f}"
    if row.startswith("CPU ms"):
        values = [t["chunks_busy_span"] for t in truths]
        return f"{statistics.median(values):,.0f} chunks" if values else ""
    return ""


def _error_cell(cell: Cell, first_row: bool) -> str:
    """A failed run's cells: the error, cut short, in its load's first row; a dash below it."""
    if not first_row:
        return "-"
    text = (cell.error or "failed").replace("|", "/")
    return f"error: {text[:90]}" + ("…" if len(text) > 90 else "")


def side_by_side(loads: Sequence[Load], cells: Mapping[tuple[str, str], Cell], tools: Sequence[str]) -> str:
    """The Markdown table: one row per figure per load, one column per tool."""
    rows = []
    for load in loads:
        here = [cells.get((tool, load.slug)) or Cell(tool, load.name, ok=False, error="not run") for tool in tools]
        for number, (label, show) in enumerate(ROWS):
            note = _truth_note(label, load, here)
            first = f"**{load.name}**: {label}" + (f" ({note})" if note else "")
            rows.append([first, *(show(c) if c.ok else _error_cell(c, number == 0) for c in here)])
    return tabulate(rows, headers=["load (truth server)", *tools], tablefmt="github", disable_numparse=True)


def machine() -> dict:
    model = platform.processor() or platform.machine()
    with_name = Path("/proc/cpuinfo")
    if with_name.exists():
        for line in with_name.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "host": socket.gethostname(),
        "cpu_model": model,
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_at_start": list(os.getloadavg()),
    }


METHOD = """\
Each tool ran alone against its own ground-truth server (a fresh process per run, on loopback,
`loadtest.ground_truth`: first token {ttft:g} ms after a request arrives, then one token per
interval, K tokens a chunk, {reply} tokens a reply whatever the request asks), the loads in
order, the tools in the order of the columns. A closed-loop load ran N concurrent streams
for {seconds:g} s: **rigbench** as `rigbench sweep --steps N --warmup {warmup:g} --measure
{measure:g} --max-tokens {reply} --ignore-eos --timeline` (its figures from the run directory
through `analysis`, as `rigbench report` reads them); **servebench** as `servebench run
--concurrency N --duration {seconds:g} --output-len {reply} --ignore-eos --warmup 0 --no-gpu`
(its `run.json`); **guidellm** as `guidellm run --profile kind=concurrent,streams=N,warmup={warmup:g}
--constraint kind=max_duration,seconds={seconds:g}` on a prompt file that asks {reply} tokens a
reply (its benchmarks JSON). An open-loop load (`Poisson R req/s`) gives each tool the rate
instead: `rigbench sweep --rates R --arrival poisson --arrival-seed 1`, `servebench run --rate R
--arrival-dist poisson`, `guidellm run --profile kind=poisson,rate=R`; its truth server streams
at most N replies at once and queues the rest, so the truth's TTFT (from the request's arrival)
holds the queue, and rigbench counts latency from each request's intended start. Exact command
lines are in `results.json`.

*Error* is the tool's figure minus the truth. TTFT: the tool's p50 minus the p50 of (first chunk
sent - request received) in the truth server's log, over the requests it received in the tool's
measured window. Aggregate tok/s: the tool's reported output rate against the tokens the truth
server sent in the same window (rigbench and guidellm say which window they measured; for
servebench, which does not, the span the truth server was busy, first request received to last
chunk sent, which is the level's duration). ITL and TPOT are shown as each tool reports them:
per chunk (rigbench: each request's mean gap between content chunks; servebench: every gap
between content chunks) or per token (guidellm); the truth is the configured interval, times K
per chunk. CPU is the tool's whole process tree (psutil, sampled every {sample:g} s) over the
span the truth server was busy, so start-up and report writing are left out (the lifetime total
is in `results.json`); per 1,000 chunks divides it by the chunks the truth server sent in that span.

Noise: one run per tool and load; the truth server shares the machine's cores with the tool
(its own process), so a busy machine shows up as TTFT error and as CPU. The load average before
each run is in `results.json`; figures from a shared or small machine are not a ranking.
"""


def _errors_section(loads: Sequence[Load], cells: Mapping[tuple[str, str], Cell], tools: Sequence[str]) -> list[str]:
    failed = [cells[(t, load.slug)] for load in loads for t in tools if (t, load.slug) in cells]
    lines = [f"- {c.tool}, {c.load}: {c.error}" for c in failed if not c.ok]
    return ["## Errors", "", *lines, ""] if lines else []


def write_report(out: Path, loads: Sequence[Load], cells: Mapping[tuple[str, str], Cell], *, tools: Sequence[str],
                 durations: Durations, versions: Mapping[str, str | None], install_errors: Mapping[str, str],
                 command: str, started: float) -> str:
    """README.md and results.json in ``out``; the table."""
    table = side_by_side(loads, cells, tools)
    info = machine()
    results = {
        "command": command,
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": info,
        "versions": dict(versions),
        "install_errors": dict(install_errors),
        "settings": {"seconds": durations.seconds, "warmup": durations.warmup,
                     "reply_tokens": REPLY_TOKENS, "ttft_ms": TTFT_MS, "cpu_sample_seconds": SAMPLE_SECONDS},
        "loads": [asdict(load) | {"name": load.name, "slug": load.slug} for load in loads],
        "cells": [asdict(cells[(tool, load.slug)]) for load in loads for tool in tools if (tool, load.slug) in cells],
    }  # fmt: skip
    write_whole(out / "results.json", json.dumps(results, indent=2) + "\n")
    versions = ", ".join(f"{t} {versions.get(t) or 'not installed'}" for t in tools)
    text = "\n".join([
        f"# Load generators against the ground-truth server on {info['host']}",
        "",
        f"{info['cpu_model']}, {info['logical_cores']} logical cores, Python {info['python']}; {versions}.",
        f"Load average at the start: {', '.join(f'{x:.2f}' for x in info['loadavg_at_start'])}.",
        "",
        "```bash",
        command,
        "```",
        "",
        table,
        "",
        *_errors_section(loads, cells, tools),
        "## Method",
        "",
        METHOD.format(ttft=TTFT_MS, reply=REPLY_TOKENS, seconds=durations.seconds,
                      warmup=durations.warmup, measure=durations.measure, sample=SAMPLE_SECONDS),
    ])  # fmt: skip
    write_whole(out / "README.md", text)
    return table
