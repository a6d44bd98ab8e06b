"""``rigbench ladder`` without the CLI's dependencies, for a bare GPU machine.

Why a second door: the ``rigbench`` command loads every command module (Locust, Fabric,
Pulumi), which a lent GPU machine does not have; this one needs only what the ladder itself
imports (pydantic, httpx, scipy, matplotlib, tabulate). Same options, same folder, same report:
``python3 -m rigbench.studies.quality_ladder SOURCE --questions Q --out DIR [--rungs ...]``.
SOURCE may be ``smollm2``: the real model from its pinned wheel, already in the cache.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from analysis.quality_report import write_ladder_report
from core.errors import RigbenchError
from core.rundir.quality import EvalSettings
from rigbench.quality_runs import DEFAULT_RUNGS, LadderOptions, resolve_source, run_ladder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m rigbench.studies.quality_ladder", description=__doc__)
    parser.add_argument("source")
    parser.add_argument("--questions", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rungs", default=DEFAULT_RUNGS)
    parser.add_argument("--repeat-rungs", default="")
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--no-bench", action="store_true")
    args = parser.parse_args(argv)
    try:
        options = LadderOptions(
            source=resolve_source(args.source),
            rungs=[name for name in args.rungs.split(",") if name],
            questions=args.questions,
            out=args.out,
            backend=args.backend,
            settings=EvalSettings(max_tokens=args.max_tokens),
            repeat_rungs=[name for name in args.repeat_rungs.split(",") if name],
            bench=not args.no_bench,
        )
        manifest = run_ladder(options, say=lambda line: print(line, file=sys.stderr, flush=True))
        print(f"{write_ladder_report(args.out)} ({manifest.wall_seconds:.0f} s)")
    except RigbenchError as error:
        print(f"quality_ladder: error: {error}", file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
