"""Soak benchmark: many users for minutes against the tiny-model local rig; is the load process's memory flat?

    .venv/bin/python tests/reliability/soak.py --minutes 10 --users 64 [--write-note]

One step of ``--users`` users (a 30 s warm-up, then the rest of ``--minutes`` measured)
runs through the ordinary sweep (a headless Locust process) against llama-server serving
the tiny synthetic model, with one slot per user so no request waits past the read
timeout in llama-server's queue. Every 10 s the Locust process tree's resident memory is
sampled with psutil. A leak in the load generator shows up as RSS that keeps growing
after warm-up; an error shows up as a record with an ``error_kind`` or a Locust exception.

Exit 0 when there were no client-side errors, the run is ``complete`` and the RSS at the
end is at most 1.2 x the RSS at the end of the 30 s warm-up; 1 otherwise. Not a pytest
test (it takes minutes and both cores): pytest does not collect this file's name.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import psutil

from core.cache import cache_root
from core.machine import machine_info
from core.profile import load_profile, merge_server_args, parallel_slots
from core.rundir import LoadSettings, RigInfo, RunDir, new_manifest, server_at, utc_now
from llamacpp.build import build_llama_cpp
from llamacpp.server import LocalServer
from loadtest.sweep import run_sweep
from rigbench.local_rig import model_file

ROOT = Path(__file__).resolve().parents[2]

WARMUP_SECONDS = 30.0
SAMPLE_SECONDS = 10.0
RSS_GROWTH_LIMIT = 1.2
MIB = 1024 * 1024


@dataclass
class Sample:
    elapsed: float
    rss_bytes: int
    processes: int


@dataclass
class SoakResult:
    run_path: Path
    status: str
    samples: list[Sample] = field(default_factory=list)
    requests: int = 0
    error_records: int = 0
    locust_exceptions: int = 0
    interrupted: int = 0
    tokens_per_second: float = 0.0
    error_kinds: dict[str, int] = field(default_factory=dict)

    @property
    def errors(self) -> int:
        return self.error_records + self.locust_exceptions

    @property
    def start_rss(self) -> int:
        """RSS at the end of the warm-up: the first sample taken after it."""
        after = [s for s in self.samples if s.elapsed >= WARMUP_SECONDS]
        return (after or self.samples)[0].rss_bytes

    @property
    def end_rss(self) -> int:
        return self.samples[-1].rss_bytes

    @property
    def max_rss(self) -> int:
        return max(s.rss_bytes for s in self.samples)

    def failures(self) -> list[str]:
        found = []
        if self.status != "complete":
            found.append(f"run ended {self.status}, not complete")
        if self.errors:
            found.append(f"{self.errors} client-side error(s): {self.error_kinds or ''} "
                         f"{self.locust_exceptions} Locust exception(s)")
        if not self.samples:
            found.append("no RSS sample of the load process was taken")
        elif self.end_rss > self.start_rss * RSS_GROWTH_LIMIT:
            found.append(f"load-process RSS grew from {self.start_rss / MIB:.1f} to {self.end_rss / MIB:.1f} MiB "
                         f"(over x{RSS_GROWTH_LIMIT})")
        return found


def locust_tree(run_path: Path) -> list[psutil.Process]:
    """The load processes of this run: Locust (and its workers) name the run folder on their command line."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            cmdline = process.info["cmdline"] or []
            if "locust" in cmdline and str(run_path) in cmdline:
                found.append(process)
                found.extend(process.children(recursive=True))
    return list({p.pid: p for p in found}.values())


def sample_rss(run_path: Path) -> tuple[int, int]:
    total = count = 0
    for process in locust_tree(run_path):
        with contextlib.suppress(psutil.Error):
            total += process.memory_info().rss
            count += 1
    return total, count


def tally(run: RunDir, result: SoakResult) -> None:
    manifest = run.read_manifest()
    result.status = manifest.status
    records = run.read_records()
    result.requests = len(records)
    for record in records:
        result.interrupted += record.interrupted  # cut off by the sweep's end: not a client error
        if record.error_kind:
            result.error_records += 1
            result.error_kinds[record.error_kind] = result.error_kinds.get(record.error_kind, 0) + 1
    exceptions = run.path / "locust_exceptions.csv"
    if exceptions.exists():
        with open(exceptions, newline="") as handle:
            result.locust_exceptions = sum(int(row["Count"]) for row in csv.DictReader(handle))
    step = manifest.steps[0] if manifest.steps else None
    if step is not None and step.measure_end is not None:
        tokens = sum(r.completion_tokens or 0 for r in records if r.phase == "measure" and r.ok and not r.interrupted)
        result.tokens_per_second = tokens / (step.measure_end - step.measure_start)


def soak(minutes: float, users: int, runs_root: Path) -> SoakResult:
    profile = load_profile("tiny")
    cache = cache_root()
    built = build_llama_cpp(profile.llama_cpp.spec(), "cpu", extra_options=profile.llama_cpp.cmake_options)
    model_path, model = model_file(profile, None, cache)
    # one slot per user and room in the unified KV cache for all of them at once: the longest
    # prompt with its chat template is about 300 tokens, plus the reply (256 per user ran out:
    # 128 of 48,247 requests got "Context size has been exceeded" in a 10-minute soak)
    args = merge_server_args(profile.server_args(model_path, None), ["--parallel", str(users), "-c", str(512 * users)])
    server = LocalServer(built.binary("llama-server"), args)
    measure = max(10.0, minutes * 60 - WARMUP_SECONDS)
    load = LoadSettings(user_steps=[users], warmup_seconds=WARMUP_SECONDS, measure_seconds=measure,
                        max_tokens=profile.request.max_tokens, temperature=profile.request.temperature,
                        cache_prompt=profile.request.cache_prompt, ignore_eos=profile.request.ignore_eos,
                        arm="soak")
    manifest = new_manifest(
        "tiny-soak", profile.name, load=load, server=server_at(server.base_url, server.args, parallel_slots(args)),
        rig=RigInfo(kind="local", machine=machine_info()), build=built.build_info(), model=model,
    )
    run = RunDir.create(runs_root, manifest)
    server.log_path = run.path / "llama-server.log"
    result = SoakResult(run.path, "running")
    print(f"soak: {users} users for {minutes:g} min ({WARMUP_SECONDS:.0f} s warm-up), run {run.path}", flush=True)
    failure: list[BaseException] = []

    def sweep() -> None:
        try:
            run_sweep(run, server.base_url, progress=False)
        except BaseException as error:  # reported below, after the sampler stops
            failure.append(error)

    with server:
        thread = threading.Thread(target=sweep, name="soak-sweep")
        started = time.monotonic()
        thread.start()
        next_sample = started + SAMPLE_SECONDS
        while thread.is_alive():
            thread.join(timeout=max(0.0, next_sample - time.monotonic()))
            if thread.is_alive():
                rss, count = sample_rss(run.path)
                if count:
                    sample = Sample(time.monotonic() - started, rss, count)
                    result.samples.append(sample)
                    print(f"  {sample.elapsed:6.0f} s  load RSS {rss / MIB:7.1f} MiB in {count} process(es)",
                          flush=True)
                next_sample += SAMPLE_SECONDS
    if failure:
        print(f"soak: the sweep raised {type(failure[0]).__name__}: {failure[0]}", file=sys.stderr)
    tally(run, result)
    return result


def summary_lines(result: SoakResult, minutes: float, users: int) -> list[str]:
    machine = machine_info()
    lines = [
        f"- users: {users}, duration: {minutes:g} min (one step: {WARMUP_SECONDS:.0f} s warm-up, rest measured)",
        f"- machine: {machine.cpu_model or '?'}, {machine.cpu_cores} cores, {machine.memory_gib:.0f} GiB "
        f"(shared with other work: figures are indicative)",
        f"- run status: {result.status}",
        f"- requests: {result.requests}; client-side errors: {result.errors} "
        f"({result.error_records} error record(s) {result.error_kinds or ''}, "
        f"{result.locust_exceptions} Locust exception(s)); {result.interrupted} in flight at the end, "
        "recorded interrupted",
        f"- aggregate tok/s (measure window): {result.tokens_per_second:.1f}",
    ]
    if result.samples:
        lines.append(
            f"- load-process RSS: start (after warm-up) {result.start_rss / MIB:.1f} MiB, "
            f"end {result.end_rss / MIB:.1f} MiB, max {result.max_rss / MIB:.1f} MiB "
            f"({len(result.samples)} samples every {SAMPLE_SECONDS:.0f} s; "
            f"end/start {result.end_rss / result.start_rss:.3f}, limit {RSS_GROWTH_LIMIT})"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--runs", type=Path, default=None, help="keep the run directory here (default: a temp folder)")
    parser.add_argument("--write-note", action="store_true", help="write runs/soak-<UTC date>.md with the figures")
    args = parser.parse_args(argv)
    if args.minutes * 60 < WARMUP_SECONDS + 10 or args.users < 1:
        parser.error(f"--minutes must leave at least 10 s after the {WARMUP_SECONDS:.0f} s warm-up; --users >= 1")
    runs_root = args.runs or Path(tempfile.mkdtemp(prefix="rigbench-soak-"))
    try:
        result = soak(args.minutes, args.users, runs_root)
        lines = summary_lines(result, args.minutes, args.users)
        failures = result.failures()
        print("\n".join(lines))
        print("soak: " + ("PASS" if not failures else "FAIL: " + "; ".join(failures)))
        if args.write_note:
            note = ROOT / "runs" / f"soak-{datetime.now(UTC):%Y-%m-%d}.md"
            note.parent.mkdir(exist_ok=True)
            note.write_text(
                f"# Soak: {args.users} users, {args.minutes:g} min, tiny-model local rig\n\n"
                f"`python tests/reliability/soak.py --minutes {args.minutes:g} --users {args.users}` "
                f"on {utc_now()}\n\n" + "\n".join(lines)
                + f"\n\nVerdict: {'PASS' if not failures else 'FAIL: ' + '; '.join(failures)}\n"
            )
            print(f"note: {note}")
        return 1 if failures else 0
    finally:
        if args.runs is None:
            shutil.rmtree(runs_root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
