"""The load generator's fidelity and per-process ceiling on this machine, as a compact report.

    .venv/bin/python -m loadtest.fidelity_report [--out runs/selftest-<host>.md]

1. the target: 1 to 64 users x 100 tok/s against the ground-truth server, one
   load process: aggregate tok/s error, TTFT p50 error, ITL p50 error per step;
2. the ceiling: more users at a faster per-user rate until a process stops following
   the truth within 1 %, with ``--processes 1`` and ``--processes 2`` (or more).

Raw run directories go to a scratch folder; only the Markdown summary is meant to be
committed. Figures depend on the machine and on whatever else runs on it.
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
from loadtest.selftest import StepFidelity, ceiling, run_selftest

COLUMNS = (
    "users",
    "truth_tok_s",
    "client_tok_s",
    "tok_s_error_pct",
    "ttft_p50_error_ms",
    "itl_p50_error_ms",
    "loadgen_cpu_pct",
)


def _table(results: list[StepFidelity]) -> str:
    rows = [[getattr(r, c) for c in COLUMNS] + ["yes" if r.tracked else "no"] for r in results]
    return tabulate(rows, headers=[*COLUMNS, "followed"], tablefmt="github", floatfmt=".3f")


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

    sections = [
        f"# Load generator fidelity on {socket.gethostname()}",
        "",
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"ground-truth server in its own process, replies 64-128 tokens, TTFT 50 ms, measured windows of "
        f"{args.measure:g} s. Command: `python -m loadtest.fidelity_report`.",
        "",
        "## Target: 1 to 64 users x 100 tok/s, one load process",
        "",
        "Targets at 64 users: tok/s error <= 0.5 %, TTFT p50 error <= 2 ms, ITL p50 error <= 0.5 ms.",
        "",
    ]
    _, target = run_selftest(
        args.scratch, user_steps=[1, 2, 4, 8, 16, 32, 64], warmup=2.0, measure=args.measure, progress=False
    )
    sections += [_table(target), ""]

    steps = parse_counts(args.ceiling_steps, "--ceiling-steps")
    sections += [f"## Ceiling: users x {args.ceiling_rate:g} tok/s each, by load processes", ""]
    summary = []
    for processes in parse_counts(args.processes, "--processes"):
        _, results = run_selftest(
            args.scratch,
            user_steps=steps,
            tok_s_per_user=args.ceiling_rate,
            warmup=2.0,
            measure=args.measure,
            processes=processes,
            progress=False,
        )
        top = max(ceiling(results), ceiling(target) if processes == 1 else 0.0)
        followed_all = all(r.tracked for r in results)
        summary.append([processes, top, top / processes, "lower bound (every step followed)" if followed_all else ""])
        sections += [f"### --processes {processes}", "", _table(results), ""]
    sections += [
        "## Highest aggregate rate followed (1-process figures include the target run above)",
        "",
        "Followed means: tok/s within 1 %, TTFT p50 within 2 ms, ITL p50 within 0.5 ms.",
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
