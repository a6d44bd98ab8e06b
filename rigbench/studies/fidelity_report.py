"""The load generator's fidelity on this machine, as a compact report to commit.

    rigbench study fidelity [--out runs/selftest-<host>.md]

Every figure is a reported one (what ``rigbench report`` prints) against the ground-truth
server's own send log (``rigbench.fidelity``):

1. closed loop, 1 to 64 users x 100 tok/s, one token per chunk;
2. the same at 64 users with three tokens per chunk and jittered token gaps (ITL per chunk
   reads ~3x TPOT per token; aggregate tok/s must still be exact);
3. open loop: Poisson arrivals at 80 % of a queued server's capacity, latency from the
   intended starts against the server's arrival-to-first-send;
4. a server that is not llama-server (1-5 tokens a chunk, a pause, no running counts, no
   ``/tokenize``) at 64, 128 and 256 users, cut at the last window's end and drained;
5. the capacity: more users at a faster per-user rate until a process stops following the
   truth, with ``--processes 1`` and ``--processes 2`` (or more).

Raw run directories go to a scratch folder; only the Markdown is meant to be committed.
Figures depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import os
import platform
import socket
from pathlib import Path

from tabulate import tabulate

from core.whole_files import write_whole
from loadtest.selftest import OPEN_LOOP_SLOTS, open_loop_capacity
from rigbench.fidelity import FOLLOWED_RULE, StepFidelity, capacity, selftest

COLUMNS = (
    "users",
    "rate",
    "truth_tok_s",
    "tok_s_error_pct",
    "ttft_p50_error_ms",
    "truth_itl_p50_ms",
    "itl_p50_error_ms",
    "truth_tpot_p50_ms",
    "tpot_p50_error_ms",
    "start_lag_p50_ms",
    "loadgen_cpu_pct",
    "cpu_ms_per_1000_chunks",
)
FOLLOWED = f"Followed: {FOLLOWED_RULE}."


def fidelity_table(results: list[StepFidelity]) -> str:
    rows = [[getattr(r, c) for c in COLUMNS] + ["yes" if r.tracked else "no"] for r in results]
    return tabulate(rows, headers=[*COLUMNS, "followed"], tablefmt="github", floatfmt=".3f", missingval="-")


def write_fidelity_report(out: Path, runs_dir: Path, *, measure: float = 5.0, capacity_rate: float = 200.0,
                          capacity_steps: list[int] | None = None, processes: list[int] | None = None) -> str:
    """Run every section's ground-truth sweeps (raw runs in ``runs_dir``) and write the Markdown to ``out``.

    ``capacity_steps`` (default 64, 128, 256 users) at ``capacity_rate`` tok/s each, once per
    load-process count in ``processes`` (default 1 and 2). Returns the Markdown.
    """
    runs_dir.mkdir(parents=True, exist_ok=True)
    common = {"warmup": 2.0, "measure": measure, "progress": False}

    sections = [
        f"# Load generator fidelity on {socket.gethostname()}",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"ground-truth server in its own process, TTFT 50 ms, measured windows of {measure:g} s. "
        "Command: `rigbench study fidelity`. " + FOLLOWED,
        "",
        "## Closed loop, 1 to 64 users x 100 tok/s, one token per chunk (replies 64-128 tokens)",
        "",
    ]
    _, target = selftest(runs_dir, user_steps=[1, 2, 4, 8, 16, 32, 64], **common)
    sections += [fidelity_table(target), ""]
    _, packed = selftest(runs_dir, user_steps=[64], tokens_per_chunk=3, jitter=0.3, **common)
    sections += ["## 64 users, 3 tokens per chunk, token gaps jittered by up to 30 %", "", fidelity_table(packed), ""]
    queued_rate = open_loop_capacity(OPEN_LOOP_SLOTS, 50.0, 100.0, 128)
    _, open_loop = selftest(runs_dir, rate_steps=[round(0.8 * queued_rate, 2)], reply_tokens=128, **common)
    sections += [
        f"## Open loop: Poisson arrivals at 80 % of a queued server's capacity ({OPEN_LOOP_SLOTS} slots, "
        f"128-token replies: {queued_rate:.2f} req/s)",
        "",
        "TTFT counts from each request's intended start; the truth's from its arrival at the server (queueing "
        "for a slot included).",
        "",
        fidelity_table(open_loop),
        "",
    ]

    steps = capacity_steps or [64, 128, 256]
    sections += [
        "## A server that is not llama-server: 1-5 tokens a chunk, a 100 ms pause mid-stream, no running counts",
        "",
        "No `timings_per_token`, no `continuous_usage_stats`, no `/tokenize`, no `/slots` or `/metrics`; users x 50 "
        "tok/s, 64-token replies, each load its own sweep. `--drain 0` cuts the requests in flight when the last "
        "window closes (they can only be counted by their chunks); the default drain lets them end with the "
        "server's usage.",
        "",
    ]
    no_counts = {"per_chunk_counts": False, "tokens_per_chunk": 1, "tokens_per_chunk_max": 5, "pause_ms": 100.0,
                 "llama_endpoints": False, "timeline": False, "tok_s_per_user": 50.0, "reply_tokens": 64}
    for label, drain in (("cut (--drain 0)", 0.0), ("drained (--drain 60)", 60.0)):
        results = [selftest(runs_dir, user_steps=[users], drain=drain, **no_counts, **common)[1][0] for users in steps]
        sections += [f"### {label}", "", fidelity_table(results), ""]
    sections += [f"## Capacity: users x {capacity_rate:g} tok/s each, by load processes", ""]
    summary = []
    for count in processes or [1, 2]:
        _, results = selftest(runs_dir, user_steps=steps, tok_s_per_user=capacity_rate, processes=count, **common)
        top = max(capacity(results), capacity(target) if count == 1 else 0.0)
        followed_all = all(r.tracked for r in results)
        summary.append([count, top, top / count, "lower bound (every step followed)" if followed_all else ""])
        sections += [f"### --processes {count}", "", fidelity_table(results), ""]
    sections += [
        "## Highest aggregate rate followed (1-process figures include the closed-loop run above)",
        "",
        tabulate(
            summary, headers=["processes", "tok/s", "tok/s per process", "note"], tablefmt="github", floatfmt=".0f"
        ),
        "",
    ]
    text = "\n".join(sections)
    out.parent.mkdir(parents=True, exist_ok=True)
    write_whole(out, text)
    return text
