"""Fault tests: real processes hurt in one way each, then the next command must still work.

Each test records what had completed on disk before the fault and asserts that none of it
is lost afterwards, that the run ends with the right status and a clear message, and that
``rigbench check`` / ``rigbench report`` (or a new run) work on what is left. Faults inside
single requests (HTTP 500, disconnects, malformed events, stalls) are already recorded one
by one in tests/loadtest/test_sweep.py (``test_every_fault_kind_is_recorded...``,
``test_errors_are_recorded_and_the_threshold...``); here they are followed to the run level.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from PIL import Image
from rich.console import Console

import analysis.report
from core.rundir import LoadSettings, RequestRecord, RunDir, new_manifest, server_at
from core.rundir.server_ended import ServerEnded
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.sweep import run_sweep
from rigbench.local_rig import say_what_ran

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RIGBENCH = str(Path(sys.executable).parent / "rigbench")
COMMITTED_RUN = ROOT / "runs/gpu-h200-study-2026-11-30/runs/20261130T062952Z-gemma4-e2b-e2b-drafter2-random-181f"

# The private sshd and the rig built on it live in the provision tests' conftest; load them
# here under their own names so pytest finds them as fixtures of this module.
_spec = importlib.util.spec_from_file_location("provision_test_fixtures", ROOT / "tests/provision/conftest.py")
_provision_fixtures = importlib.util.module_from_spec(_spec)
sys.modules.setdefault(_spec.name, _provision_fixtures)  # dataclasses look their module up there
_spec.loader.exec_module(_provision_fixtures)
sshd = _provision_fixtures.sshd
rig = _provision_fixtures.rig
rig_paths = _provision_fixtures.rig_paths
build_cache = _provision_fixtures.build_cache
built_rig = _provision_fixtures.built_rig


# ---------------------------------------------------------------- helpers


def wait_for(condition: Callable[[], object], timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def completed_lines(run_path: Path) -> set[str]:
    """Every whole record line (newline-terminated) on disk now: what a fault must not lose."""
    lines: set[str] = set()
    for shard in (run_path / RunDir.RECORDS).glob("*.jsonl"):
        with open(shard, errors="replace") as handle:
            lines.update(line for line in handle if line.endswith("\n"))
    return lines


def ok_records(run_path: Path) -> int:
    return sum(1 for line in completed_lines(run_path) if '"error_kind"' not in line)


def only_run(runs: Path) -> Path | None:
    found = [p for p in runs.glob("*") if (p / RunDir.MANIFEST).exists()] if runs.is_dir() else []
    return found[0] if len(found) == 1 else None


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([RIGBENCH, *args], capture_output=True, text=True, cwd=ROOT, timeout=timeout)


def last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def processes_mentioning(text: str) -> list[psutil.Process]:
    """Live processes whose command line contains ``text`` (a run folder, a port argument)."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if process.info["status"] != psutil.STATUS_ZOMBIE and text in " ".join(process.info["cmdline"] or []):
                found.append(process)
    return found


def assert_next_commands_work(run_path: Path, check_exit: int = 0, report_refusal: str | None = None) -> None:
    """``rigbench check`` gives its verdict and ``rigbench report`` writes a report (or, for a
    run with no measured step, refuses in one line saying so and writes nothing)."""
    checked = cli("check", str(run_path), "--quiet")
    assert checked.returncode == check_exit, checked.stdout + checked.stderr
    status = RunDir(run_path).read_manifest().status
    assert checked.stdout.startswith(f"healthy: {run_path.name} {status}, "), checked.stdout
    reported = cli("report", str(run_path))
    if report_refusal is None:
        assert reported.returncode == 0, reported.stderr
        assert Path(last_line(reported.stdout)).is_file()
    else:
        assert reported.returncode == 2 and report_refusal in last_line(reported.stderr), reported.stderr
        assert "Traceback" not in reported.stderr and not (run_path / "report.md").exists()


def new_run(root: Path, settings: LoadSettings, port: int, slots: int) -> RunDir:
    manifest = new_manifest("fault", "tiny", load=settings, server=server_at(f"http://127.0.0.1:{port}", slots=slots))
    return RunDir.create(root, manifest)


def start_local_rig(runs: Path, users: str = "2,4", measure: str = "4", ride_out: str = "1") -> subprocess.Popen:
    return subprocess.Popen(
        [RIGBENCH, "local", "--steps", users, "--warmup", "0.5", "--measure", measure, "--max-tokens", "16",
         "--ride-out", ride_out, "--runs-dir", str(runs)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, start_new_session=True,
    )


def wait_for_records(runs: Path, process: subprocess.Popen, count: int = 5, timeout: float = 240) -> Path:
    def ready() -> Path | None:
        if process.poll() is not None:
            raise AssertionError(f"the load process ended early ({process.returncode}): {process.stderr.read()}")
        run_path = only_run(runs)
        return run_path if run_path is not None and ok_records(run_path) >= count else None

    return wait_for(ready, timeout, f"{count} completed records under {runs}")


def wait_for_first_step(run_path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    """Until step 0's measure window has closed, so the run has something to report."""

    def done() -> bool:
        if process.poll() is not None:
            raise AssertionError(f"the load process ended early ({process.returncode}): {process.stderr.read()}")
        with contextlib.suppress(Exception):
            return RunDir(run_path).read_manifest().last_complete_step == 0
        return False

    wait_for(done, timeout, f"step 0 of {run_path} to complete")
    time.sleep(1.0)  # well into step 1


# ---------------------------------------------------------------- 1. llama-server dies mid-step


@dataclass
class FaultedRun:
    """A run hurt once; several tests read the same outcome (a fault is slow to stage)."""

    run_path: Path
    before: set[str]
    returncode: int
    stderr: str
    server_port: int
    seconds_to_end: float  # from the hurt to the command's exit


def fault_local_rig(runs: Path, hurt: Callable[[subprocess.Popen], None], **rig: str) -> FaultedRun:
    """Start ``rigbench local`` (``rig``: :func:`start_local_rig`'s options), wait until step 0 is done and step 1
    under way, then ``hurt`` it."""
    process = start_local_rig(runs, **rig)
    try:
        run_path = wait_for_records(runs, process)
        wait_for_first_step(run_path, process)
        port = RunDir(run_path).read_manifest().server.port
        before = completed_lines(run_path)
        hurt_at = time.monotonic()
        hurt(process)
        _, stderr = process.communicate(timeout=180)
        seconds = time.monotonic() - hurt_at
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return FaultedRun(run_path, before, process.returncode, stderr, port, seconds)


def kill_llama_server(process: subprocess.Popen) -> None:
    servers = [p for p in psutil.Process(process.pid).children(recursive=True) if p.name() == "llama-server"]
    assert len(servers) == 1, servers
    servers[0].send_signal(signal.SIGKILL)


@pytest.fixture(scope="module")
def server_killed(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: Path) -> FaultedRun:
    """Killed early in a 60 s step under a 60 s ride-out: waiting out either would take a minute."""
    return fault_local_rig(tmp_path_factory.mktemp("killed") / "runs", kill_llama_server, measure="4,60",
                           ride_out="60")


def test_llama_server_killed_mid_step_fails_the_run_keeping_every_completed_record(
    server_killed: FaultedRun, tmp_path: Path
) -> None:
    run_path = server_killed.run_path
    after = completed_lines(run_path)
    assert server_killed.before <= after, f"{len(server_killed.before - after)} completed record(s) lost"
    errors = [json.loads(line) for line in after - server_killed.before if '"error_kind"' in line]
    assert errors and {e["error_kind"] for e in errors} <= {"connect", "disconnect"}
    manifest = RunDir(run_path).read_manifest()
    assert manifest.status == "failed" and manifest.ended_at and manifest.last_complete_step == 0
    assert manifest.status_detail.startswith("the server stopped answering: "), manifest.status_detail
    assert not processes_mentioning(str(run_path)), "locust outlived the run"
    assert_next_commands_work(run_path)
    # the rig is usable again: a fresh local run on a new server completes
    again = cli("local", "--steps", "1", "--warmup", "0.5", "--measure", "1", "--max-tokens", "8",
                "--runs-dir", str(tmp_path / "again"), timeout=300)
    assert again.returncode == 0, again.stderr
    assert RunDir(only_run(tmp_path / "again")).read_manifest().status == "complete"


def test_llama_server_killed_mid_step_makes_rigbench_local_exit_non_zero_saying_so(server_killed: FaultedRun) -> None:
    assert server_killed.returncode != 0, "a run whose server died must not exit 0"
    line = last_line(server_killed.stderr)
    assert server_killed.run_path.name in line and "failed" in line, server_killed.stderr
    assert "llama-server (http://127.0.0.1:" in line and "exited with code -9" in line, line  # the cause, named


def test_a_local_server_that_exits_is_not_ridden_out_the_run_fails_at_once_naming_its_exit(
    server_killed: FaultedRun,
) -> None:
    killed = server_killed
    # nothing restarts a server rigbench local started: its end, written into the run, stops the sweep at once
    assert killed.seconds_to_end < 40, f"the run took {killed.seconds_to_end:.0f} s to fail: the ride-out was waited"
    ended = ServerEnded.read(killed.run_path)
    assert ended is not None and ended.exit_code == -9 and ended.url == f"http://127.0.0.1:{killed.server_port}"
    said = f"llama-server (http://127.0.0.1:{killed.server_port}) exited with code -9; its log: "
    manifest = RunDir(killed.run_path).read_manifest()
    assert manifest.status == "failed" and manifest.last_complete_step == 0  # step 1 runs again on --resume
    assert said in manifest.status_detail and "--ride-out" in manifest.status_detail, manifest.status_detail
    assert killed.before <= completed_lines(killed.run_path), "a completed record was lost"
    line = last_line(killed.stderr)
    assert killed.returncode == 1 and killed.run_path.name in line and "failed" in line, killed.stderr
    assert said in line and line.count("exited with code") == 1, line  # the cause, named once


# ---------------------------------------------------------------- 2. faults inside requests, at the run level


def test_stalls_500s_and_disconnects_leave_a_complete_run_that_checks_and_reports(tmp_path: Path) -> None:
    """A stalled stream hits the client's read timeout; the run completes and its report counts each kind."""
    config = GroundTruthConfig(ttft_ms=5, itl_ms=5, model="default", stall_seconds=5,
                               fault_cycle=["none", "none", "none", "http_500", "disconnect", "stall"])
    settings = LoadSettings(user_steps=[2, 3], warmup_seconds=0.5, measure_seconds=3, max_tokens=8,
                            max_error_rate=0.9, read_timeout_seconds=0.5)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        run = new_run(tmp_path / "runs", settings, server.port, slots=4)
        manifest = run_sweep(run, server.base_url, progress=False)
    assert manifest.status == "complete", manifest.status_detail
    records = run.read_records()
    assert {r.error_kind for r in records} == {None, "http_500", "disconnect", "timeout"}
    assert_next_commands_work(run.path)
    summary = json.loads((run.path / "summary.json").read_text())
    assert "timeout" in json.dumps(summary) and "http_500" in json.dumps(summary)


def test_error_rate_above_the_limit_fails_rigbench_sweep_in_one_line_keeping_records(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default", fault_cycle=["none", "http_500", "disconnect"])
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        result = cli("sweep", "--url", server.base_url, "--steps", "1,2", "--warmup", "0.5", "--measure", "3",
                     "--max-tokens", "8", "--runs-dir", str(runs), "--max-error-rate", "0.3", "--no-progress")
    assert result.returncode == 1  # a run was made and did not complete
    line = last_line(result.stderr)
    assert line.startswith("rigbench: error: ") and "failed" in line and "error rate" in line, result.stderr
    assert "Traceback" not in result.stderr
    run_path = only_run(runs)
    manifest = RunDir(run_path).read_manifest()
    assert manifest.status == "failed" and manifest.ended_at
    kinds = {r.error_kind for r in RunDir(run_path).read_records()}
    assert None in kinds and {"http_500", "disconnect"} & kinds
    assert_next_commands_work(run_path, report_refusal="no step has a measured window")


# ---------------------------------------------------------------- 3. SIGTERM to the load process


def cut_and_kept(truth: Path, run_path: Path) -> tuple[dict[str, dict], dict[str, RequestRecord]]:
    """The replies the server could not finish (the client gone, or, stopped first, its own stop), and those
    of them the run recorded ``interrupted`` with no more chunks than the server sent."""
    cut = {rid: entry for rid, entry in read_truth_log(truth).items()
           if entry["fault"] in ("client_gone", "server_stopped")}
    records = {record.request_id: record for record in RunDir(run_path).read_records()}
    kept = {rid: records[rid] for rid in cut if rid in records and records[rid].interrupted}
    assert all(record.content_chunks <= len(cut[rid]["sends"]) for rid, record in kept.items())
    return cut, kept


def sweep_process(url: str, runs: Path, *options: str) -> subprocess.Popen:
    """``rigbench sweep`` against ``url`` as a child process, its output captured, runs into ``runs``."""
    return subprocess.Popen([RIGBENCH, "sweep", "--url", url, *options, "--runs-dir", str(runs), "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)


def test_sigterm_to_rigbench_sweep_interrupts_keeps_records_and_leaves_no_locust(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=5, itl_ms=5, model="default")
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        process = sweep_process(server.base_url, runs, "--steps", "2,4", "--warmup", "0.5", "--measure", "2",
                                "--max-tokens", "16")
        run_path = wait_for_records(runs, process, timeout=60)
        wait_for_first_step(run_path, process)
        before = completed_lines(run_path)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=90)
    assert process.returncode == 1  # a run was made and did not complete
    assert last_line(stderr) == f"rigbench: error: {run_path}: interrupted (Ctrl-C or SIGTERM); its records are kept"
    assert before <= completed_lines(run_path)
    manifest = RunDir(run_path).read_manifest()
    assert manifest.status == "interrupted" and manifest.ended_at and manifest.last_complete_step == 0
    assert not processes_mentioning(str(run_path)), "locust outlived rigbench sweep"
    cut, kept = cut_and_kept(tmp_path / "truth.jsonl", run_path)  # the replies in flight: recorded as they stood
    assert kept.keys() == cut.keys(), f"{len(cut) - len(kept)} of {len(cut)} cut replies not recorded interrupted"
    assert_next_commands_work(run_path)


def test_ctrl_c_records_every_request_in_flight_and_says_how_to_go_on(tmp_path: Path) -> None:
    """Ctrl-C while four replies stream: each one the server saw cut is recorded ``interrupted`` with what
    it had received, as at the sweep's end; the command then says what ran and how to go on. (SIGTERM takes
    the same path: the test above.)"""
    config = GroundTruthConfig(ttft_ms=5, itl_ms=100, model="default")  # a 20-token reply streams for 2 s
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        process = sweep_process(server.base_url, runs, "--steps", "2,4", "--warmup", "0.5", "--measure", "2.5,30",
                                "--max-tokens", "20")
        run_path = wait_for_records(runs, process, count=2, timeout=60)
        wait_for_first_step(run_path, process)  # then 1 s into step 1: its four replies are streaming
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=90)
    cut, kept = cut_and_kept(tmp_path / "truth.jsonl", run_path)
    assert len(cut) >= 4, f"{len(cut)} replies were streaming at the stop"
    assert kept.keys() == cut.keys(), f"{len(cut) - len(kept)} of {len(cut)} cut replies not recorded interrupted"
    assert sum(record.content_chunks for record in kept.values()) > 0, "the interrupted records kept no chunk"
    assert last_line(stderr) == f"rigbench: error: {run_path}: interrupted (Ctrl-C or SIGTERM); its records are kept"
    assert "At a glance:" in stdout and f"write the report: rigbench report {run_path}\n" in stdout, stdout
    assert f"go on with its remaining steps: rigbench sweep --resume {run_path}\n" in stdout, stdout


@pytest.fixture(scope="module")
def local_rig_terminated(tmp_path_factory: pytest.TempPathFactory, llama_server_binary: Path) -> FaultedRun:
    return fault_local_rig(tmp_path_factory.mktemp("sigterm") / "runs", lambda p: p.send_signal(signal.SIGTERM))


def test_sigterm_to_rigbench_local_interrupts_and_stops_llama_server_and_locust(
    local_rig_terminated: FaultedRun,
) -> None:
    run_path = local_rig_terminated.run_path
    assert local_rig_terminated.before <= completed_lines(run_path)
    manifest = RunDir(run_path).read_manifest()
    assert manifest.status == "interrupted" and manifest.ended_at and manifest.last_complete_step == 0
    assert manifest.status_detail == "stopped by Ctrl-C or SIGTERM"
    assert not processes_mentioning(str(run_path)), "locust outlived rigbench local"
    port = f"--port {local_rig_terminated.server_port}"
    assert not [p for p in processes_mentioning(port) if p.name() == "llama-server"], "orphan llama-server"
    assert local_rig_terminated.returncode != 0
    assert_next_commands_work(run_path)


def test_sigterm_to_rigbench_local_ends_with_one_clear_line(local_rig_terminated: FaultedRun) -> None:
    line = last_line(local_rig_terminated.stderr)
    assert line.startswith("rigbench: error: ") and "interrupted" in line, local_rig_terminated.stderr
    assert local_rig_terminated.run_path.name in line


def test_sigterm_to_rigbench_local_writes_the_report_of_what_ran_and_says_how_to_go_on(
    local_rig_terminated: FaultedRun,
) -> None:
    """As its --help and docs/local.md say: an interrupted run's report is still written."""
    run_path, stderr = local_rig_terminated.run_path, local_rig_terminated.stderr
    assert f"report: {run_path / 'report.md'}" in stderr and (run_path / "report.md").is_file(), stderr
    assert f"then rigbench sweep --resume {run_path} --url URL;" in stderr, stderr


def test_ctrl_c_on_rigbench_local_writes_the_report_of_what_ran_and_says_how_to_go_on(
    tmp_path: Path, llama_server_binary: Path,
) -> None:
    """Ctrl-C at a terminal: SIGINT to the whole foreground process group (rigbench, Locust, llama-server), not
    only to rigbench as SIGTERM above. The run ends interrupted, keeps what ran, and, as its --help and
    docs/local.md say, writes the report of what ran and prints how to go on."""
    faulted = fault_local_rig(tmp_path / "runs", lambda process: os.killpg(process.pid, signal.SIGINT))
    run_path, stderr = faulted.run_path, faulted.stderr
    assert faulted.returncode == 1, stderr
    assert last_line(stderr) == f"rigbench: error: {run_path}: interrupted (Ctrl-C or SIGTERM); its records are kept"
    assert faulted.before <= completed_lines(run_path)
    manifest = RunDir(run_path).read_manifest()
    assert (manifest.status, manifest.last_complete_step) == ("interrupted", 0), manifest.status_detail
    assert "At a glance:" in stderr and f"report: {run_path / 'report.md'}" in stderr, stderr
    assert (run_path / "report.md").is_file()
    assert (f"serve the model again (rigbench serve --profile tiny prints its URL), then rigbench sweep --resume "
            f"{run_path} --url URL; then rigbench report {run_path} reports the whole sweep") in stderr, stderr
    port = f"--port {faulted.server_port}"
    assert not [p for p in processes_mentioning(port) if p.name() == "llama-server"], "orphan llama-server"


def test_a_second_ctrl_c_while_the_report_is_written_leaves_it_unwritten_and_says_how_to_write_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The report of what ran is cut by a second Ctrl-C (staged here where it lands: the moment the report's
    files are written, which no signal sent from outside can hit reliably): no report, the command that
    writes it, and still how to go on."""
    run = Path(shutil.copytree(COMMITTED_RUN, tmp_path / COMMITTED_RUN.name,
                               ignore=shutil.ignore_patterns("plots", "report.md", "summary.json")))
    RunDir(run).update_manifest(status="interrupted", last_complete_step=0)  # its 64-user step left to run

    def stopped_again(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(analysis.report, "write_sections", stopped_again)
    console = Console(file=io.StringIO(), width=100)
    say_what_ran([run], "tiny", console)
    said = console.file.getvalue()
    assert f"no report: stopped again while it was written; write it with rigbench report {run}\n" in said, said
    assert f"then rigbench sweep --resume {run} --url URL; then rigbench report {run} reports" in said, said
    assert not (run / "report.md").exists()


# ---------------------------------------------------------------- 4. full disk


def stop_everything(process: subprocess.Popen, run_path: Path) -> None:
    """Kill a hung sweep and its Locust (which runs in a session of its own)."""
    for child in processes_mentioning(str(run_path)):
        with contextlib.suppress(psutil.Error):
            child.kill()
    if process.poll() is None:
        process.kill()
        process.wait()


def test_a_full_disk_fails_the_sweep_naming_the_run_folder_and_keeps_what_was_written(
    tmp_path: Path, small_disk: Path
) -> None:
    runs = small_disk / "runs"
    config = GroundTruthConfig(ttft_ms=1, itl_ms=0, model="default")
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        process = sweep_process(server.base_url, runs, "--steps", "8", "--warmup", "0.5", "--measure", "3",
                                "--max-tokens", "4")
        run_path = wait_for_records(runs, process, count=20, timeout=60)
        # leave ~24 KiB (the sweep may fill it by itself first): it runs out of room within seconds
        free = shutil.disk_usage(small_disk).free
        with contextlib.suppress(OSError), open(small_disk / "filler", "wb") as filler:
            filler.write(b"\0" * max(0, free - 24 * 1024))
        before = completed_lines(run_path)
        try:
            _, stderr = process.communicate(timeout=45)  # a 3.5 s sweep: ample time to stop and say why
            hung = False
        except subprocess.TimeoutExpired:
            stop_everything(process, run_path)
            _, stderr = process.communicate()
            hung = True
    assert before <= completed_lines(run_path), "records written before the disk filled were lost"
    assert not hung, "rigbench sweep did not end 40 s after its last step was due to end on a full disk"
    assert process.returncode != 0, "a sweep that could not write its records must not succeed"
    line = last_line(stderr)
    assert str(run_path) in line and "No space left" in line, stderr
    with contextlib.suppress(FileNotFoundError):
        (small_disk / "filler").unlink()  # room for check and report to work again
    manifest = RunDir(run_path).read_manifest()
    assert manifest.status in ("failed", "interrupted") and "No space left" in (manifest.status_detail or "")
    # the disk filled before the step's measured window closed, so report refuses in one line
    assert_next_commands_work(run_path, report_refusal="no step has a measured window")


def test_a_report_on_a_full_disk_says_so_in_one_line_and_leaves_no_cut_file(tmp_path: Path, small_disk: Path) -> None:
    """Like the sweep, ``rigbench report`` says ENOSPC in one line naming the file, and every file it leaves
    is whole (each is written beside, then renamed): no traceback, no cut PNG."""
    run = shutil.copytree(COMMITTED_RUN, tmp_path / COMMITTED_RUN.name,
                          ignore=shutil.ignore_patterns("plots", "report.md", "summary.json"))
    free = shutil.disk_usage(small_disk).free
    with open(small_disk / "filler", "wb") as filler:  # room for about one plot
        filler.write(b"\0" * max(0, free - 60 * 1024))
    out = small_disk / "report"
    reported = cli("report", str(run), "--out", str(out))
    assert reported.returncode == 2 and "Traceback" not in reported.stderr, reported.stderr
    line = last_line(reported.stderr)
    assert line.startswith(f"rigbench: error: cannot write {out}/") and "No space left on device (ENOSPC)" in line, line
    left = [path for path in out.rglob("*") if path.is_file()]
    assert not [path for path in left if path.name.startswith(".")], f"a temporary file is left: {left}"
    for path in left:  # whatever was written before the disk filled is whole
        with Image.open(path) as image:
            image.load()


# ---------------------------------------------------------------- 5. the SSH link drops during a remote sweep


@dataclass
class DroppedSweep:
    message: str
    rig_run: Path
    copied: list[Path]
    local_runs: Path


def drop_ssh_during_remote_sweep(built_rig, sshd, tmp_path: Path) -> DroppedSweep:
    """Serve on the rig, start a remote sweep, SIGKILL the sshd serving the connection once the rig
    has records, let the rig's sweep finish on its own, then fetch over a new connection."""
    import threading

    from core.errors import ProvisionError
    from core.network import free_port
    from provision.connection import connect
    from provision.serve import serve, stop
    from provision.sweep import fetch, sweep

    connection, paths, profile, _ = built_rig
    local_runs = tmp_path / "runs"
    serve(connection, profile, paths, port=free_port(), health_timeout=120)
    listener = psutil.Process(int((sshd.folder / "sshd.pid").read_text()))
    remote_runs = Path(paths.runs)

    def drop_link_when_records_appear() -> None:
        run_path = wait_for(lambda: only_run(remote_runs), 120, "the rig's run")
        wait_for(lambda: ok_records(run_path) >= 5, 120, "records on the rig")
        for child in listener.children():  # the sshd serving this connection; the rig's processes live on
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGKILL)

    killer = threading.Thread(target=drop_link_when_records_appear, daemon=True)
    killer.start()
    again = None
    try:
        with pytest.raises(ProvisionError) as raised:
            sweep(connection, profile, {"user_steps": [2, 4], "warmup_seconds": 0.5, "measure_seconds": 8.0}, paths,
                  local_runs=local_runs, rigbench=RIGBENCH)
        killer.join(timeout=5)
        rig_run = only_run(remote_runs)
        # the rig's sweep goes on without the link; a new connection fetches everything it wrote
        wait_for(lambda: RunDir(rig_run).read_manifest().status != "running", 120, "the rig's run to end")
        wait_for(lambda: (Path(paths.root) / "sweep-result.json").is_file(), 120, "the rig's sweep command to end")
        again = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key),
                        known_hosts=sshd.known_hosts(tmp_path / "known_hosts2"), strict_host_key=True)
        copied = fetch(again, paths, local_runs)
    finally:
        with contextlib.suppress(Exception):
            stop(again or connection, paths)
        if again is not None:
            again.close()
    return DroppedSweep(str(raised.value), rig_run, copied, local_runs)


def test_ssh_drop_during_remote_sweep_says_the_link_was_lost_and_fetch_gets_the_rig_results(
    built_rig, sshd, tmp_path: Path
) -> None:
    dropped = drop_ssh_during_remote_sweep(built_rig, sshd, tmp_path)
    assert dropped.message.startswith("sweep: ") and f"{sshd.host}:{sshd.port}" in dropped.message, dropped.message
    assert "SSH" in dropped.message and "fetch" in dropped.message, dropped.message
    assert dropped.copied == [dropped.local_runs / dropped.rig_run.name]
    assert completed_lines(dropped.copied[0]) == completed_lines(dropped.rig_run)
    manifest = RunDir(dropped.copied[0]).read_manifest()
    assert manifest.status == RunDir(dropped.rig_run).read_manifest().status == "complete"
    assert_next_commands_work(dropped.copied[0])
