"""``rigbench check``: run directories built by hand, whole and damaged in one way each."""

from __future__ import annotations

import gzip
import io
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest
from typer.testing import CliRunner

from core.errors import RunDirError
from core.rundir import (
    LoadSettings,
    RecordWriter,
    RequestRecord,
    RunDir,
    RunManifest,
    StepWindow,
    TelemetrySnapshot,
)
from core.rundir.check import check_run
from rigbench.cli import app

T0 = 1_800_000_000.0
RUN_ID = "20261130T040000Z-tiny-0001"


def record(step: int, users: int, n: int, shard: str, phase: str = "measure") -> RequestRecord:
    start = T0 + step * 10 + (3 if phase == "measure" else 0.5) + n * 0.1
    return RequestRecord(
        request_id=f"{shard}-{step}-{n}-{phase}",
        shard=shard,
        step=step,
        users=users,
        phase=phase,
        category="short",
        t_start=start,
        t_first_token=start + 0.05,
        t_last_token=start + 0.5,
        t_end=start + 0.51,
        content_chunks=16,
        http_status=200,
        completion_tokens=16,
    )


def build_run(root: Path, status: str = "complete", steps: int = 2) -> RunDir:
    """A whole run: 2 planned steps (1 and 2 users), 2 shards with 3 records per step, telemetry."""
    windows = [
        StepWindow(index=i, users=u, started_at=T0 + i * 10, measure_start=T0 + i * 10 + 2, measure_end=T0 + i * 10 + 9)
        for i, u in enumerate([1, 2][:steps])
    ]
    manifest = RunManifest(
        run_id=RUN_ID,
        created_at="2026-11-30T04:00:00+00:00",
        ended_at="2026-11-30T04:00:20+00:00" if status != "running" else None,
        status=status,
        profile="tiny",
        load=LoadSettings(user_steps=[1, 2], warmup_seconds=2, measure_seconds=7, max_tokens=16),
        steps=windows,
        last_complete_step=steps - 1,
    )
    run = RunDir.create(root, manifest)
    for shard in ("host-a", "host-b"):
        with RecordWriter(run.shard_path(shard)) as writer:
            for window in windows:
                writer.write(record(window.index, window.users, 0, shard, phase="warmup"))
                writer.write(record(window.index, window.users, 1, shard))
                if shard == "host-a":
                    writer.write(record(window.index, window.users, 2, shard))
    for window in windows:
        for boundary in ("start", "measure", "end"):
            run.append_telemetry(
                TelemetrySnapshot(taken_at=T0, step=window.index, users=window.users, boundary=boundary)
            )
    return run


def edit_manifest(run: RunDir, **changes) -> None:
    data = json.loads(run.manifest_path.read_text())
    data.update(changes)
    run.manifest_path.write_text(json.dumps(data))


def damage_line(path: Path, number: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[number - 1] = text
    path.write_text("".join(lines))


def invoke(run: RunDir):
    return CliRunner().invoke(app, ["check", str(run.path)])


def test_whole_run_is_healthy(tmp_path):
    run = build_run(tmp_path)
    report = check_run(run.path)
    assert report.findings == []
    assert report.healthy
    assert report.record_count == 10
    assert dict(report.records_per_step) == {0: 5, 1: 5}
    assert dict(report.measured_per_step) == {0: 3, 1: 3}
    assert report.telemetry.good == 6
    result = invoke(run)
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"healthy: {RUN_ID} complete, 2 steps, 10 records in 2 shards"
    assert "shard      host-a.jsonl: 6 records" in result.output


def test_truncated_last_line_is_a_warning_not_damage(tmp_path):
    run = build_run(tmp_path)
    with open(run.shard_path("host-b"), "a") as handle:
        handle.write('{"schema_version": 1, "request_id": "x", "shar')
    result = invoke(run)
    assert result.exit_code == 0, result.output
    assert "shard      host-b.jsonl: 4 records; truncated last line 5" in result.output
    assert "WARNING  records/host-b.jsonl:5: truncated last line (a writer stopped mid-line); analysis skips it" in (
        result.output
    )
    assert result.output.splitlines()[-1].endswith("10 records in 2 shards, 1 warning")


def test_damaged_lines_are_listed_with_their_numbers(tmp_path):
    run = build_run(tmp_path)
    damage_line(run.shard_path("host-a"), 2, "not json at all\n")
    damage_line(run.shard_path("host-a"), 4, '{"schema_version": 1}\n')
    report = check_run(run.path)
    assert report.shards[0].damaged_lines == [2, 4]
    wheres = [f.where for f in report.damaged]
    assert wheres == ["records/host-a.jsonl:2", "records/host-a.jsonl:4"]
    assert report.damaged[0].message == "Invalid JSON: expected ident at line 1 column 2"
    assert report.damaged[1].message.startswith("request_id: Field required")
    result = invoke(run)
    assert result.exit_code == 1
    assert "shard      host-a.jsonl: 4 records; damaged line(s) 2, 4" in result.output
    assert result.output.splitlines()[-1].startswith(
        f"damaged: 2 problems in {run.path} (first: records/host-a.jsonl:2"
    )


def test_corrupt_gzip_shard_is_unreadable(tmp_path):
    run = build_run(tmp_path)
    plain = run.shard_path("host-b")
    data = gzip.compress(plain.read_bytes())
    plain.unlink()
    (plain.parent / "host-b.jsonl.gz").write_bytes(data[: len(data) // 2])
    report = check_run(run.path)
    assert not report.healthy
    finding = report.damaged[0]
    assert finding.where == "records/host-b.jsonl.gz"
    assert finding.message.startswith("unreadable after")


def test_whole_gzip_shard_is_read(tmp_path):
    run = build_run(tmp_path)
    plain = run.shard_path("host-b")
    (plain.parent / "host-b.jsonl.gz").write_bytes(gzip.compress(plain.read_bytes()))
    plain.unlink()
    report = check_run(run.path)
    assert report.healthy, report.findings
    assert report.record_count == 10


def test_unknown_schema_version_is_damage_with_the_reader_message(tmp_path):
    run = build_run(tmp_path)
    edit_manifest(run, schema_version=2)
    report = check_run(run.path)
    assert report.manifest is None
    assert [(f.where, f.message) for f in report.damaged] == [
        (
            "manifest.json",
            "schema_version 2 is not supported (this rigbench reads version 1); upgrade rigbench or re-run",
        )
    ]
    assert invoke(run).exit_code == 1


def test_manifest_that_is_not_json(tmp_path):
    run = build_run(tmp_path)
    run.manifest_path.write_text('{"run_id": ')
    report = check_run(run.path)
    assert report.damaged[0].message.startswith("not valid JSON")
    assert report.record_count == 10  # shards are still counted


def test_running_status_without_a_writer_is_flagged(tmp_path):
    run = build_run(tmp_path, status="running")
    report = check_run(run.path)
    assert [f.where for f in report.damaged] == ["status"]
    assert report.damaged[0].message.startswith("running, but no process is writing this run: the writer may have died")


def test_running_status_with_a_live_pid_file_is_only_a_warning(tmp_path):
    run = build_run(tmp_path, status="running")
    (run.path / "sweep.pid").write_text(f"{os.getpid()}\n")
    report = check_run(run.path)
    assert report.healthy
    assert [f.message for f in report.findings] == [
        f"running: process {os.getpid()} is still writing this run; check again when it ends"
    ]


@pytest.mark.integration
def test_running_status_follows_the_shard_writer_process(tmp_path):
    """A load process names its shard <host>-<pid>: alive, the run is in progress; killed, it is flagged."""
    run = build_run(tmp_path, status="running")
    writer = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.05)
        shard = run.shard_path(f"{socket.gethostname()}-{writer.pid}")
        with RecordWriter(shard) as records:
            records.write(record(1, 2, 9, shard.stem))
        report = check_run(run.path)
        assert report.healthy
        assert report.findings[0].message.startswith(f"running: process {writer.pid} is still writing")
    finally:
        writer.kill()
        writer.wait()
    report = check_run(run.path)
    assert [f.where for f in report.damaged] == ["status"]
    assert "the writer may have died" in report.damaged[0].message


def test_a_pid_reused_by_a_newer_process_is_not_the_writer(tmp_path):
    run = build_run(tmp_path, status="running")
    pid_file = run.path / "sweep.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    started = psutil.Process().create_time()
    os.utime(pid_file, (started - 60, started - 60))  # written a minute before this process existed
    assert [f.where for f in check_run(run.path).damaged] == ["status"]


def test_records_of_an_unlisted_step_and_a_step_without_records(tmp_path):
    run = build_run(tmp_path)
    with RecordWriter(run.shard_path("host-c")) as writer:
        writer.write(record(5, 8, 0, "host-c"))
    manifest = run.read_manifest()
    extra = StepWindow(index=2, users=4, started_at=T0 + 20, measure_start=T0 + 22, measure_end=T0 + 29)
    run.write_manifest(manifest.model_copy(update={"steps": [*manifest.steps, extra], "last_complete_step": 2}))
    messages = [f"{f.where}: {f.message}" for f in check_run(run.path).damaged]
    assert messages == [
        "records: 1 record names step 5, which the manifest does not list",
        "step 2 (4 users): completed in the manifest but no shard holds a record of it",
        "steps: status complete but 3 of 2 planned steps are listed",
    ]


def test_insane_windows(tmp_path):
    run = build_run(tmp_path)
    manifest = run.read_manifest()
    first, second = manifest.steps
    steps = [
        first.model_copy(update={"measure_end": first.measure_start - 1}),
        second.model_copy(update={"started_at": first.measure_start - 5, "measure_start": first.measure_start - 6}),
    ]
    run.write_manifest(manifest.model_copy(update={"steps": steps}))
    messages = [f"{f.where}: {f.message}" for f in check_run(run.path).damaged]
    assert messages == [
        f"step 0 (1 user): measure window is empty or reversed ({first.measure_start} .. {first.measure_start - 1})",
        "step 1 (2 users): measurement starts 1.000 s before the step",
        "step 1 (2 users): starts 4.000 s before the previous step ended",
    ]


def test_complete_run_missing_planned_steps(tmp_path):
    run = build_run(tmp_path, steps=1)
    messages = [f"{f.where}: {f.message}" for f in check_run(run.path).damaged]
    assert messages == ["steps: status complete but 1 of 2 planned steps are listed"]


def test_interrupted_run_is_healthy_but_says_so(tmp_path):
    run = build_run(tmp_path, status="interrupted", steps=1)
    edit_manifest(run, status_detail="stopped by Ctrl-C or SIGTERM")
    report = check_run(run.path)
    assert report.healthy
    assert [f.message for f in report.findings] == ["interrupted (stopped by Ctrl-C or SIGTERM); last complete step 0"]


def test_damaged_telemetry_line(tmp_path):
    run = build_run(tmp_path)
    damage_line(run.path / "telemetry.jsonl", 3, '{"schema_version": 1, "taken_at": "soon"}\n')
    report = check_run(run.path)
    assert [f.where for f in report.damaged] == ["telemetry.jsonl:3"]
    assert report.telemetry.good == 5


def test_missing_records_folder(tmp_path):
    run = build_run(tmp_path)
    for shard in run.shard_paths():
        shard.unlink()
    (run.path / "records").rmdir()
    messages = [f"{f.where}: {f.message}" for f in check_run(run.path).damaged]
    assert messages[0] == "records/: missing; the run wrote no records"


def test_not_a_run_directory(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(RunDirError, match="not a run directory"):
        check_run(tmp_path)
    with pytest.raises(RunDirError, match="no such directory"):
        check_run(tmp_path / "missing")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


@pytest.mark.integration
@pytest.mark.timeout(900)
def test_a_real_local_rig_run_checks_healthy_then_damaged(tmp_path):
    """The writers' own output (sweep, telemetry, Locust files, report) passes; then break it as a crash would."""
    from rich.console import Console

    from rigbench.local_rig import LocalRigOptions, run_local_rig

    runs = tmp_path / "runs"
    run_local_rig(
        LocalRigOptions(runs_root=runs, load={"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 1}),
        console=Console(file=io.StringIO()),
    )
    (path,) = runs.iterdir()
    report = check_run(path)
    assert report.healthy, [f.line() for f in report.findings]
    assert report.manifest.status == "complete"
    assert [s.users for s in report.manifest.steps] == [1, 2]
    assert report.record_count > 0
    assert report.record_count == len(RunDir(path).read_records())
    assert all(report.measured_per_step[s.index] > 0 for s in report.manifest.steps)
    assert report.telemetry.good == 6  # start, measure, end of each step

    shard = RunDir(path).shard_paths()[0]
    with open(shard, "a") as handle:
        handle.write('{"schema_version": 1, "request_id": "cut-of')
    RunDir(path).update_manifest(status="running", ended_at=None)
    result = CliRunner().invoke(app, ["check", "--quiet", str(path)])
    assert result.exit_code == 1
    assert result.output.startswith(f"damaged: 1 problem in {path} (first: status: running, but no process")


def rewrite_records(run: RunDir, change) -> None:
    """Every record of every shard passed through ``change`` (a dict of field updates per record)."""
    for path in run.shard_paths():
        records = [RequestRecord.model_validate_json(line) for line in path.read_text().splitlines()]
        path.write_text("".join(r.model_copy(update=change(r)).model_dump_json() + "\n" for r in records))


def test_a_step_with_no_successful_request_measured_nothing(tmp_path):
    run = build_run(tmp_path)
    rewrite_records(run, lambda r: {"error_kind": "http_500"} if r.step == 1 and r.phase == "measure" else {})
    report = check_run(run.path)
    assert not report.healthy
    assert report.summary() == (
        f"damaged: 1 problem in {run.path} (first: step 1 (2 users): no request of the step ended successfully in "
        "its measured window (3 cut or failed): it measured nothing; re-run the step with a longer --measure, or see "
        "the records' error_kind)"
    )
    assert invoke(run).exit_code == 1


def test_a_warm_up_request_that_ends_inside_the_window_measured_the_step(tmp_path):
    """Requests longer than the warm-up: the measure-phase ones fail, but one that started in the
    warm-up ended inside the window, so the step measured a whole request."""
    run = build_run(tmp_path)
    rewrite_records(run, lambda r: {"error_kind": "http_500"} if r.step == 1 and r.phase == "measure" else (
        {"t_end": T0 + 10 + 2.5} if r.step == 1 else {}))
    assert check_run(run.path).healthy


def test_a_run_whose_records_are_all_interrupted_measured_no_whole_request(tmp_path):
    run = build_run(tmp_path)
    rewrite_records(run, lambda r: {"interrupted": True})
    messages = [finding.message for finding in check_run(run.path).damaged]
    assert messages[0] == "all 10 records are interrupted: the run measured no whole request"
