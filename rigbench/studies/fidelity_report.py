"""The load generator's fidelity on this machine, as a compact report to commit.

    .venv/bin/python -m rigbench.studies.fidelity_report [--out runs/selftest-<host>.md]

Every figure is a reported one (what ``rigbench report`` prints) against the ground-truth
server's own send log (``rigbench.fidelity``):

1. closed loop, 1 to 64 users x 100 tok/s, one token per chunk;
2. the same at 64 users with three tokens per chunk and jittered token gaps (ITL per chunk
   reads ~3x TPOT per token; aggregate tok/s must still be exact);
3. open loop: Poisson arrivals at 80 % of a queued server's capacity, latency from the
   intended starts against the server's arrival-to-first-send;
4. the ceiling: more users at a faster per-user rate until a process stops following the
   truth, with ``--processes 1`` and ``--processes 2`` (or more).

Raw run directories go to a scratch folder; only the Markdown is meant to be committed.
Figures depend on the machine and on whatever else runs on it.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import tempfile
from pathlib import Path

from tabulate import tabulate

from core.lists import parse_counts
from loadtest.selftest import OPEN_LOOP_SLOTS, open_loop_capacity
from rigbench.fidelity import StepFidelity, ceiling, selftest

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
FOLLOWED = "Followed: tok/s within 0.5 %, TTFT p50 within 2 ms, ITL p50 within 0.5 ms, TPOT p50 within 0.2 ms."


def fidelity_table(results: list[StepFidelity]) -> str:
    rows = [[getattr(r, c) for c in COLUMNS] + ["yes" if r.tracked else "no"] for r in results]
    return tabulate(rows, headers=[*COLUMNS, "followed"], tablefmt="github", floatfmt=".3f", missingval="-")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs") / f"selftest-{socket.gethostname()}.md")
    parser.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "rigbench-fidelity")
    parser.add_argument("--measure", type=float, default=5.0)
    parser.add_argument("--ceiling-rate", type=float, default=200.0, help="per-user tok/s in the ceiling search")
    parser.add_argument("--ceiling-steps", default="64,128,256")
    parser.add_argument("--processes", default="1,2", help="process counts for the ceiling search")
    args = parser.parse_args()
    args.scratch.mkdir(parents=True, exist_ok=True)
    common = {"warmup": 2.0, "measure": args.measure, "progress": False}

    sections = [
        f"# Load generator fidelity on {socket.gethostname()}",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"ground-truth server in its own process, TTFT 50 ms, measured windows of {args.measure:g} s. "
        "Command: `python -m rigbench.studies.fidelity_report`. " + FOLLOWED,
        "",
        "## Closed loop, 1 to 64 users x 100 tok/s, one token per chunk (replies 64-128 tokens)",
        "",
    ]
    _, target = selftest(args.scratch, user_steps=[1, 2, 4, 8, 16, 32, 64], **common)
    sections += [fidelity_table(target), ""]
    _, packed = selftest(args.scratch, user_steps=[64], tokens_per_chunk=3, jitter=0.3, **common)
    sections += ["## 64 users, 3 tokens per chunk, token gaps jittered by up to 30 %", "", fidelity_table(packed), ""]
    capacity = open_loop_capacity(OPEN_LOOP_SLOTS, 50.0, 100.0, 128)
    _, open_loop = selftest(args.scratch, rate_steps=[round(0.8 * capacity, 2)], reply_tokens=128, **common)
    sections += [
        f"## Open loop: Poisson arrivals at 80 % of a queued server's capacity ({OPEN_LOOP_SLOTS} slots, "
        f"128-token replies: {capacity:.2f} req/s)",
        "",
        "TTFT counts from each request's intended start; the truth's from its arrival at the server (queueing "
        "for a slot included).",
        "",
        fidelity_table(open_loop),
        "",
    ]

    steps = parse_counts(args.ceiling_steps, "--ceiling-steps")
    sections += [f"## Ceiling: users x {args.ceiling_rate:g} tok/s each, by load processes", ""]
    summary = []
    for processes in parse_counts(args.processes, "--processes"):
        _, results = selftest(
            args.scratch, user_steps=steps, tok_s_per_user=args.ceiling_rate, processes=processes, **common
        )
        top = max(ceiling(results), ceiling(target) if processes == 1 else 0.0)
        followed_all = all(r.tracked for r in results)
        summary.append([processes, top, top / processes, "lower bound (every step followed)" if followed_all else ""])
        sections += [f"### --processes {processes}", "", fidelity_table(results), ""]
    sections += [
        "## Highest aggregate rate followed (1-process figures include the closed-loop run above)",
        "",
        tabulate(
            summary, headers=["processes", "tok/s", "tok/s per process", "note"], tablefmt="github", floatfmt=".0f"
        ),
        "",
    ]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(sections))
    print(args.out.read_text())


if __name__ == "__main__":
    main()
