"""Check a run directory end to end and say exactly what is damaged.

Analysis refuses a damaged run with the first error it meets; this check reads everything
(manifest, every shard line, telemetry, step windows) and lists every problem, so a user
knows whether a run can be trusted, re-analysed after a crash, or must be re-run.

Two kinds of finding:

- **damage**: data that is wrong or missing (invalid manifest, unreadable lines, records of
  steps the manifest does not list, steps without records, impossible windows, a run left
  ``running`` by a writer that is gone), or a run that measured nothing: a finished step whose
  measured window holds no successful request, or records that are all interrupted; or a finished step
  that ran under half the load it names (``core.load_reached.FAIL_BELOW``): an open-loop step whose
  measured window saw under half its rate sent, a closed-loop step whose window opened with under half
  its users started. The sweep fails such a run once its load is over, but a sweep stopped between its
  load generator's last word (``complete``) and that judgement leaves it ``complete``: the check judges
  it again, so its verdict does not hang on when the run was stopped. The check exits 1.
- **warning**: readable but worth knowing (a truncated last line that analysis skips, a run
  still being written, duplicate request ids). The check exits 0.
"""

from __future__ import annotations

import gzip
import socket
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import psutil
from pydantic import ValidationError

from core import wording
from core.errors import RunDirError
from core.load_reached import FAIL_BELOW, load_reached, sent_rate
from core.rundir import RequestRecord, RunDir, RunManifest, StepWindow, TelemetrySnapshot
from core.rundir.jsonl import forms
from core.validation import describe_validation_error

Severity = Literal["damage", "warning"]
# A writer may record its pid beside the manifest (``<anything>.pid``); shards are named
# ``<host>-<pid>`` by the load processes, which is the other way to find a live writer.
PID_FILE_SUFFIX = ".pid"


@dataclass(frozen=True)
class Finding:
    severity: Severity
    where: str
    message: str

    def line(self) -> str:
        return f"{self.severity.upper():8} {self.where}: {self.message}"


@dataclass
class FileCount:
    """What one JSONL file (shard or telemetry) held."""

    name: str
    good: int = 0
    damaged_lines: list[int] = field(default_factory=list)
    truncated_line: int | None = None
    unreadable: str | None = None


@dataclass
class CheckReport:
    path: Path
    manifest: RunManifest | None = None
    shards: list[FileCount] = field(default_factory=list)
    telemetry: FileCount | None = None
    records_per_step: Counter[int] = field(default_factory=Counter)
    measured_per_step: Counter[int] = field(default_factory=Counter)
    last_ok_end: dict[int, float] = field(default_factory=dict)  # per step: when its last whole request ended
    cut_or_failed_per_step: Counter[int] = field(default_factory=Counter)
    measured_starts: dict[int, list[float]] = field(default_factory=dict)  # per step: its measured requests' starts
    interrupted: int = 0
    findings: list[Finding] = field(default_factory=list)

    def damage(self, where: str, message: str) -> None:
        self.findings.append(Finding("damage", where, message))

    def warn(self, where: str, message: str) -> None:
        self.findings.append(Finding("warning", where, message))

    @property
    def damaged(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "damage"]

    @property
    def healthy(self) -> bool:
        return not self.damaged

    @property
    def record_count(self) -> int:
        return sum(s.good for s in self.shards)

    def summary(self) -> str:
        """The one line a user (or a script) reads first."""
        if not self.healthy:
            first = self.damaged[0]
            more = f" (first: {first.where}: {first.message})"
            return f"damaged: {wording.counted(len(self.damaged), 'problem')} in {self.path}{more}"
        status = self.manifest.status if self.manifest else "?"
        steps = len(self.manifest.steps) if self.manifest else 0
        warned = f", {wording.counted(len(self.findings), 'warning')}" if self.findings else ""
        return (
            f"healthy: {self.path.name} {status}, {wording.counted(steps, 'step')}, "
            f"{wording.counted(self.record_count, 'record')} in {wording.counted(len(self.shards), 'shard')}{warned}"
        )


def check_run(path: Path | str) -> CheckReport:
    """Read every part of a run directory; raises RunDirError only when it is not one at all."""
    run = RunDir(path)
    if not run.path.is_dir():
        raise RunDirError(f"{run.path}: no such directory; expected a run directory such as runs/<run-id>")
    if not run.manifest_path.exists() and not (run.path / RunDir.RECORDS).is_dir():
        raise RunDirError(
            f"{run.path}: not a run directory (no {RunDir.MANIFEST} and no {RunDir.RECORDS}/); "
            "pass a folder under runs/, e.g. runs/<run-id>"
        )
    report = CheckReport(run.path)
    try:
        report.manifest = run.read_manifest()
    except RunDirError as error:
        report.damage(RunDir.MANIFEST, str(error).removeprefix(f"{run.manifest_path}: "))
    _check_shards(run, report)
    _check_telemetry(run, report)
    if report.manifest is not None:
        _check_status(run, report.manifest, report)
        _check_steps(report.manifest, report)
    return report


def _jsonl_lines(path: Path):
    """(line number, text, is_last) of a plain or gzipped JSONL file."""
    yield from RunDir(path.parent).iter_record_lines(path)


def _scan(path: Path, where: str, model: type, report: CheckReport) -> tuple[FileCount, list]:
    """Validate every line of a JSONL file; damaged lines and a truncated tail become findings."""
    counted = FileCount(path.name)
    items = []
    try:
        for number, line, is_last in _jsonl_lines(path):
            if not line.strip():
                continue
            try:
                items.append(model.model_validate_json(line))
                counted.good += 1
            except ValidationError as error:
                if is_last and not line.endswith("\n"):
                    counted.truncated_line = number
                    report.warn(
                        f"{where}:{number}", "truncated last line (a writer stopped mid-line); analysis skips it"
                    )
                else:
                    counted.damaged_lines.append(number)
                    report.damage(
                        f"{where}:{number}",
                        describe_validation_error(error, "line").removeprefix("line: ").removeprefix("(top level): "),
                    )
    except (OSError, EOFError, UnicodeDecodeError, zlib.error, gzip.BadGzipFile) as error:
        counted.unreadable = str(error)
        report.damage(where, f"unreadable after {wording.counted(counted.good, 'good line')}: {error}")
    return counted, items


def _check_shards(run: RunDir, report: CheckReport) -> None:
    try:
        paths = run.shard_paths()
    except RunDirError:
        report.damage(f"{RunDir.RECORDS}/", "missing; the run wrote no records")
        return
    if not paths:
        report.damage(f"{RunDir.RECORDS}/", "holds no shard (*.jsonl); the load processes wrote nothing")
    seen: Counter[str] = Counter()
    for path in paths:
        where = f"{RunDir.RECORDS}/{path.name}"
        counted, records = _scan(path, where, RequestRecord, report)
        report.shards.append(counted)
        record: RequestRecord
        for record in records:
            report.records_per_step[record.step] += 1
            report.interrupted += record.interrupted
            if record.phase == "measure":
                report.measured_per_step[record.step] += 1
                report.measured_starts.setdefault(record.step, []).append(record.t_start)
            if record.ok and not record.interrupted:
                report.last_ok_end[record.step] = max(report.last_ok_end.get(record.step, 0.0), record.t_end)
            else:
                report.cut_or_failed_per_step[record.step] += 1
            seen[record.request_id] += 1
    total = sum(report.records_per_step.values())
    if total and report.interrupted == total:
        report.damage(f"{RunDir.RECORDS}/", f"{'its one record is' if total == 1 else f'all {total} records are'} "
                                            "interrupted: the run measured no whole request")
    duplicates = [rid for rid, n in seen.items() if n > 1]
    if duplicates:
        report.warn(
            f"{RunDir.RECORDS}/", f"{wording.counted(len(duplicates), 'request id')} recorded more than once, e.g. "
                                  f"{duplicates[0]}"
        )


def _check_telemetry(run: RunDir, report: CheckReport) -> None:
    paths = forms(run.path / RunDir.TELEMETRY)  # plain, packed by `rigbench compact`, or both (read as RunDir does)
    if not paths:
        report.warn(RunDir.TELEMETRY, "missing; server telemetry was not recorded")
        return
    counts = [_scan(path, path.name, TelemetrySnapshot, report)[0] for path in paths]
    report.telemetry = counts[0] if len(counts) == 1 else \
        FileCount(" and ".join(count.name for count in counts), sum(count.good for count in counts))


def writer_pids(run: RunDir) -> list[tuple[int, Path]]:
    """Processes that may be writing this run, each with the file that names it: pid files
    beside the manifest, and shards named ``<this host>-<pid>`` by the load processes."""
    named = []
    for pid_file in run.path.glob(f"*{PID_FILE_SUFFIX}"):
        text = pid_file.read_text().strip()
        if text.isdigit():
            named.append((int(text), pid_file))
    host = socket.gethostname()
    records = run.path / RunDir.RECORDS
    if records.is_dir():
        for shard in records.glob("*.jsonl"):
            stem_host, _, pid = shard.stem.rpartition("-")
            if stem_host == host and pid.isdigit():
                named.append((int(pid), shard))
    return named


def alive_writer(run: RunDir) -> int | None:
    """A live writer's pid. A process started after the file naming it was last written holds a
    reused pid, not the writer (one second of slack for clock granularity)."""
    for pid, evidence in writer_pids(run):
        try:
            if psutil.Process(pid).create_time() <= evidence.stat().st_mtime + 1.0:
                return pid
        except (psutil.Error, OSError):
            continue
    return None


def _check_status(run: RunDir, manifest: RunManifest, report: CheckReport) -> None:
    if manifest.status == "running":
        pid = alive_writer(run)
        if pid is not None:
            report.warn("status", f"running: process {pid} is still writing this run; check again when it ends")
        else:
            report.damage(
                "status",
                "running, but no process is writing this run: the writer may have died; its records up to the "
                "crash are kept (re-run the missing steps with `rigbench sweep --resume`)",
            )
    elif manifest.status in ("failed", "interrupted"):
        detail = f" ({manifest.status_detail})" if manifest.status_detail else ""
        report.warn("status", f"{manifest.status}{detail}; last complete step {manifest.last_complete_step}")
    if manifest.status != "running" and manifest.ended_at is None:
        report.warn("status", f"{manifest.status} but ended_at is not set")


def _shortfall(step: StepWindow, report: CheckReport) -> str | None:
    """A finished step that ran under ``FAIL_BELOW`` of the load it names, as the sweep judges it
    (``loadtest.sweep``): an open-loop step by the rate its measured requests were sent at, a closed-loop
    one by the users started when its window opened (its in-flight mean needs every record's span, which
    the sweep's own judgement reads)."""
    length = (step.measure_end or step.measure_start) - step.measure_start
    if length <= 0:
        return None
    if step.rate is not None:
        starts = np.array(report.measured_starts.get(step.index, []), dtype=float)
        sent = sent_rate(starts, step.measure_start, step.measure_start + length)
        reached = load_reached(step.users, step.rate, 0.0, sent)
        label = f"the load that ran was {reached:.0%} of {step.rate:g} req/s ({sent:.3g} req/s sent)"
        cause = "the load generator fell behind its schedule, or the window held too few of its arrivals"
    elif step.users_started is not None and step.users > 0:
        reached = step.users_started / step.users
        label = (f"only {step.users_started} of its {wording.counted(step.users, 'user')} had started when its "
                 "window opened")
        cause = "the load generator could not start them in time"
    else:
        return None
    if reached is None or reached >= FAIL_BELOW:
        return None
    return (f"{label}, under {FAIL_BELOW:.0%}: its figures stand for a load that did not run ({cause}); a sweep "
            "fails such a run once its load is over, one stopped before that left it unjudged; re-run the step "
            "with --processes N or a lighter load")


def _check_steps(manifest: RunManifest, report: CheckReport) -> None:
    steps: list[StepWindow] = manifest.steps
    indices = [s.index for s in steps]
    if len(set(indices)) != len(indices):
        report.damage("steps", f"step indices repeat: {indices}")
    if indices != sorted(indices):
        report.damage("steps", f"step indices out of order: {indices}")
    listed = set(indices)
    for step, count in sorted(report.records_per_step.items()):
        if step not in listed:
            report.damage("records", f"{wording.counted(count, 'record')} {'names' if count == 1 else 'name'} step "
                                     f"{step}, which the manifest does not list")
    previous_end: float | None = None
    for position, step in enumerate(steps):
        load = f"{step.rate:g} req/s" if step.rate is not None else wording.counted(step.users, "user")
        where = f"step {step.index} ({load})"
        if step.measure_start < step.started_at:
            report.damage(where, f"measurement starts {step.started_at - step.measure_start:.3f} s before the step")
        if step.measure_end is not None and step.measure_end <= step.measure_start:
            report.damage(where, f"measure window is empty or reversed ({step.measure_start} .. {step.measure_end})")
        if step.measure_end is None and (position < len(steps) - 1 or manifest.status == "complete"):
            report.damage(where, "has no measure_end although the sweep went past it")
        if previous_end is not None and step.started_at < previous_end:
            report.damage(where, f"starts {previous_end - step.started_at:.3f} s before the previous step ended")
        previous_end = step.measure_end
        if step.measure_end is not None and report.records_per_step[step.index] == 0:
            report.damage(where, "completed in the manifest but no shard holds a record of it")
        elif step.measure_end is not None and report.last_ok_end.get(step.index, 0.0) <= step.measure_start:
            others = report.cut_or_failed_per_step[step.index]
            report.damage(
                where,
                f"no request of the step ended successfully in its measured window ({others} cut or failed): it "
                "measured nothing; re-run the step with a longer --measure, or see the records' error_kind",
            )
        elif step.measure_end is not None and (shortfall := _shortfall(step, report)) is not None:
            report.damage(where, shortfall)
    if manifest.last_complete_step is not None and manifest.last_complete_step not in listed:
        report.damage("last_complete_step", f"{manifest.last_complete_step} is not among the steps {indices}")
    planned = manifest.load.step_count if manifest.load else None
    resumed = manifest.resumed_from is not None
    if manifest.status == "complete" and not resumed and planned is not None and len(steps) != planned:
        report.damage("steps",
                      f"status complete but {len(steps)} of {wording.counted(planned, 'planned step')} are listed")
