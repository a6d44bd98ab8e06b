"""Analysis speed check: write a synthetic run of N records (default 1,000,000) and time its analysis.

    taskset -c 0 .venv/bin/python -m analysis.speed_check [--records 1000000] [--repeats 3] [--keep DIR]

A benchmark script, not a test: run it pinned to one core on an otherwise idle machine. The
targets, for a million records (a long 64-user sweep writes about that many) on one core: load
and figures under 2 s together, the full report (``rigbench report --format all``: report.md,
report.html, steps.csv, requests.csv, summary.json, plots) under 4 s. The run is ended as a
sweep ends it, by writing its columnar side file (``core.rundir.columns``; timed on its own,
it is the one pass over the shards' JSON); then load, figures and the full report are each
timed ``--repeats`` times. The synthetic sweep has
7 steps (1..64 users), back-to-back streaming requests of 256 tokens per user, six prompt
categories, a drafter's timings, two shards. Lines are written with a format string (not
pydantic) so that writing stays quick; a sample is validated against RequestRecord so the
file is a faithful run directory.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

from analysis.figures import run_figures
from analysis.load import load_run
from analysis.report import REPORT_FORMATS, write_report
from core.rundir import LoadSettings, RequestRecord, RunDir, StepWindow, new_manifest, utc_now
from core.rundir.columns import write_record_table
from core.wording import counted

T = TypeVar("T")
USER_STEPS = (1, 2, 4, 8, 16, 32, 64)
CATEGORIES = ("code", "chat", "story", "explanation", "facts", "summary")
TOKENS = 256
LINE = (
    '{{"schema_version":1,"request_id":"{rid}","shard":"{shard}","step":{step},"users":{users},'
    '"phase":"{phase}","category":"{cat}","t_start":{ts:.6f},"t_first_token":{tf:.6f},'
    '"t_last_token":{tl:.6f},"t_end":{te:.6f},"content_chunks":{tok},"http_status":200,'
    '"prompt_tokens":{pt},"completion_tokens":{tok},"timings":{{"prompt_n":{pt},"prompt_ms":{pms:.3f},'
    '"predicted_n":{tok},"predicted_ms":{dms:.3f},"predicted_per_second":{pps:.3f},'
    '"draft_n":{dn},"draft_n_accepted":{da}}}}}\n'
)


def write_synthetic_run(root: Path, records: int, seed: int = 0) -> Path:
    """A complete run directory with about ``records`` request records; returns its path."""
    rng = np.random.default_rng(seed)
    weights = np.array(USER_STEPS, dtype=float) / (1 + 0.04 * np.array(USER_STEPS))
    per_step = np.maximum((records * weights / weights.sum()).astype(int), 1)
    per_step[-1] += records - per_step.sum()
    manifest = new_manifest(
        f"speed-check-{records}",
        "synthetic-benchmark",
        load=LoadSettings(
            user_steps=list(USER_STEPS), warmup_seconds=0, measure_seconds=0, max_tokens=TOKENS, processes=2
        ),
        server=None,
    )
    run = RunDir.create(root, manifest)
    handles = [open(run.shard_path(f"p{i}"), "w") for i in range(2)]  # noqa: SIM115
    clock, steps = 1.8e9, []
    for index, (users, count) in enumerate(zip(USER_STEPS, per_step, strict=True)):
        rate = 130.0 / (1 + 0.05 * users)
        duration = TOKENS / rate + 0.05
        per_user = int(np.ceil(count / users))
        warmup = max(1, per_user // 10)
        user = np.repeat(np.arange(users), per_user)[:count]
        order = np.tile(np.arange(per_user), users)[:count]
        ttft = 0.03 * np.sqrt(users) * rng.lognormal(0, 0.3, count)
        decode = duration * rng.lognormal(0, 0.1, count)
        t_start = clock + order * (duration + 0.1) + user * 0.01
        t_first = t_start + ttft
        t_last = t_first + decode
        measure_start, measure_end = clock + warmup * (duration + 0.1), clock + (per_user - 1) * (duration + 0.1)
        steps.append(
            StepWindow(
                index=index,
                users=users,
                started_at=clock,
                measure_start=measure_start,
                measure_end=max(measure_end, measure_start + 1),
            )
        )
        categories = rng.integers(0, len(CATEGORIES), count)
        drafted = rng.integers(100, 140, count)
        accepted = (drafted * rng.uniform(0.5, 0.8, count)).astype(int)
        for i in range(count):
            shard = int(user[i] % 2)
            handles[shard].write(
                LINE.format(
                    rid=f"s{index}-{i}",
                    shard=f"p{shard}",
                    step=index,
                    users=users,
                    phase="warmup" if order[i] < warmup else "measure",
                    cat=CATEGORIES[categories[i]],
                    ts=t_start[i],
                    tf=t_first[i],
                    tl=t_last[i],
                    te=t_last[i] + 0.001,
                    tok=TOKENS,
                    pt=120,
                    pms=ttft[i] * 900,
                    dms=decode[i] * 1000,
                    pps=TOKENS / decode[i] * 1.02,
                    dn=drafted[i],
                    da=accepted[i],
                )
            )
        clock += per_user * (duration + 0.1) + 1
    for handle in handles:
        handle.close()
    run.update_manifest(steps=steps, status="complete", ended_at=utc_now())
    with open(run.shard_path("p0")) as handle:
        RequestRecord.model_validate_json(handle.readline())
    return run.path


def _timed(action: Callable[..., T], *args: object, **options: object) -> tuple[float, T]:
    started = time.perf_counter()
    result = action(*args, **options)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="write the run here and keep it")
    args = parser.parse_args()

    root = args.keep or Path(tempfile.mkdtemp(prefix="rigbench-speed-check-"))
    seconds, path = _timed(write_synthetic_run, root, args.records)
    print(f"wrote {args.records:,} records to {path} in {seconds:.1f} s")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    seconds, _ = _timed(write_record_table, RunDir(path))
    print(f"run end: shards parsed and side file written in {seconds:.2f} s (once, as the sweep ends the run)")
    times: dict[str, list[float]] = {"load": [], "figures": [], "load+figures": [], "full report": []}
    for _ in range(args.repeats):
        loaded, run = _timed(load_run, path)
        analysed, figures = _timed(run_figures, run)
        reported, report = _timed(write_report, [path], formats=REPORT_FORMATS)
        for name, value in zip(times, (loaded, analysed, loaded + analysed, reported), strict=True):
            times[name].append(value)
    for name, values in times.items():
        print(f"{name:>13}: " + ", ".join(f"{value:.2f} s" for value in values))
    print(f"{len(run.records):,} records, {counted(len(figures.steps), 'step')}, {counted(cores, 'core')} allowed; "
          f"report {report}")
    if args.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
