"""The sweep controller when Locust's master resets the shape's clock and a controller replaces another."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from core.rundir import LoadSettings, RunDir, RunManifest, new_run_id, utc_now
from loadtest.controller import SweepController
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.schedule import make_stages
from loadtest.telemetry import BUSIEST_PROCESS_CPU_METRIC, MACHINE_CPU_METRIC, OTHER_CPU_METRIC, SERVER_CPU_METRIC


def test_a_replacing_controller_moves_the_open_window_to_its_clock_and_scrapes_once(tmp_path) -> None:
    pytest.importorskip("gevent")
    options = SimpleNamespace(parallel_slots=4, context_tokens=0, processes=1, interruption_marker="", run_dir="")
    # nothing listens on port 9: the snapshots carry the scrape error, which is what this test needs
    environment = SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9")
    settings = LoadSettings(user_steps=[1, 2], warmup_seconds=0.5, measure_seconds=1.0, max_tokens=4)
    run = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl"), created_at=utc_now(), profile="tiny",
                                              load=settings))
    stages = make_stages(settings.user_steps, settings.warmup_seconds, settings.measure_seconds)

    first = SweepController(environment, stages, run)
    first._record_boundary(1000.0, 0.0, 0, "start")
    second = SweepController(environment, stages, run, replaces=first)
    second._record_boundary(1000.1, 0.0, 0, "start")  # Locust reset its clock 0.1 s later

    steps = run.read_manifest().steps
    assert [(s.index, s.started_at, s.measure_start) for s in steps] == [(0, 1000.1, 1000.6)]
    assert [(t.step, t.boundary) for t in run.read_telemetry()] == [(0, "start")]
    # a controller for another run shares nothing
    other = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl2"), created_at=utc_now(), profile="tiny",
                                                load=settings))
    assert SweepController(environment, stages, other, replaces=second).recorded == set()


@pytest.mark.parametrize(("busiest", "cause"), [
    (0.0, "the warm-up was shorter than starting them took; lengthen --warmup"),
    (150.0, "a load process was 150% busy over the warm-up: it could not start them in time; spread the users over "
            "--processes N"),
])
def test_a_window_opening_before_its_users_have_all_started_says_how_many_had(tmp_path, busiest, cause) -> None:
    pytest.importorskip("gevent")
    options = SimpleNamespace(parallel_slots=8, context_tokens=0, processes=1, interruption_marker="", run_dir="")
    runner = SimpleNamespace(user_count=0)
    environment = SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9", runner=runner)
    settings = LoadSettings(user_steps=[2, 8], warmup_seconds=10, measure_seconds=5, max_tokens=4)
    run = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl"), created_at=utc_now(), profile="tiny",
                                              load=settings))
    controller = SweepController(environment, make_stages(settings.user_steps, 10, 5), run)
    # the load process is this test's, whose CPU the suite's other workers may make look busy: its reading is
    # given, so each case names the cause it asserts
    readings = controller._cpu_readings
    controller._cpu_readings = lambda: {**readings(), BUSIEST_PROCESS_CPU_METRIC: busiest}
    for elapsed, index, boundary, running in [(0, 0, "start", 0), (10, 0, "measure", 2), (15, 0, "end", 2),
                                              (15, 1, "start", 2), (25, 1, "measure", 3)]:
        runner.user_count = running
        controller._record_boundary(1000.0, elapsed, index, boundary)
    manifest = run.read_manifest()
    assert [step.users_started for step in manifest.steps] == [2, 3]
    shortfall = [warning for warning in manifest.warnings if "had started" in warning]
    assert shortfall == ["step 1 (8 users): 3 of its 8 users had started when its measured window opened, after "
                         "10 s of warm-up: the window measured a smaller load; " + cause]


def busy_stranger(seconds: float = 15.0) -> psutil.Process:
    """A process spinning on one core that is no child of this one (its parent exits at once): to the
    controller in this process it is neither a load process nor the server. It stops by itself after
    ``seconds``, should the test not get to end it."""
    spin = f"import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass"
    launch = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', sys.argv[1]], "
              "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
    launched = subprocess.run([sys.executable, "-c", launch, spin], capture_output=True, text=True, check=True,
                              timeout=30)
    return psutil.Process(int(launched.stdout))


def test_each_window_records_the_cpu_other_processes_kept_busy_and_a_busy_one_shows(tmp_path: Path) -> None:
    """The server (a child of this process here) is found by its port and kept out of the load processes; a
    stranger spinning through the second window is in that window's others' share, at least by what it used."""
    pytest.importorskip("gevent")
    options = SimpleNamespace(parallel_slots=4, context_tokens=0, processes=1, interruption_marker="", run_dir="")
    settings = LoadSettings(user_steps=[1, 2], warmup_seconds=0.1, measure_seconds=1.0, max_tokens=4)
    run = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl"), created_at=utc_now(), profile="tiny",
                                              load=settings))
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default", slots=4)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        assert server.process is not None
        environment = SimpleNamespace(parsed_options=options, host=server.base_url,
                                      runner=SimpleNamespace(user_count=1))
        controller = SweepController(environment, make_stages(settings.user_steps, 0.1, 1.0), run)
        assert server.process.pid in controller.served.pids() and not controller.served.unseen
        t0 = time.time()
        controller._record_boundary(t0, 0.0, 0, "start")
        controller._record_boundary(t0, 0.1, 0, "measure")
        time.sleep(0.6)
        controller._record_boundary(t0, 1.1, 0, "end")
        controller._record_boundary(t0, 1.1, 1, "start")
        stranger = busy_stranger()
        try:
            controller._record_boundary(t0, 1.2, 1, "measure")
            spent = sum(stranger.cpu_times()[:2])
            opened = time.monotonic()
            time.sleep(1.0)
            controller._record_boundary(t0, 2.2, 1, "end")
            share = (sum(stranger.cpu_times()[:2]) - spent) / (time.monotonic() - opened) * 100 / psutil.cpu_count()
        finally:
            stranger.kill()
    ends = {snapshot.step: snapshot.metrics for snapshot in run.read_telemetry() if snapshot.boundary == "end"}
    for metrics in ends.values():
        assert 0.0 <= metrics[OTHER_CPU_METRIC] <= metrics[MACHINE_CPU_METRIC]
        assert SERVER_CPU_METRIC in metrics
    assert share > 100 / psutil.cpu_count() / 4  # it did spin (a crowded machine gives it less than a core)
    assert ends[1][OTHER_CPU_METRIC] >= share * 0.8, (ends, share)


def test_a_server_here_whose_process_cannot_be_seen_is_said_to_be_in_the_others(tmp_path: Path) -> None:
    pytest.importorskip("gevent")
    options = SimpleNamespace(parallel_slots=4, context_tokens=0, processes=1, interruption_marker="", run_dir="")
    environment = SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9")  # nothing listens on port 9
    settings = LoadSettings(user_steps=[1], warmup_seconds=0.1, measure_seconds=0.2, max_tokens=4)
    run = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl"), created_at=utc_now(), profile="tiny",
                                              load=settings))
    controller = SweepController(environment, make_stages(settings.user_steps, 0.1, 0.2), run)
    controller._record_boundary(time.time(), 0.0, 0, "start")
    assert SERVER_CPU_METRIC not in run.read_telemetry()[0].metrics
    controller._note_unseen_servers()
    controller._note_unseen_servers()
    unseen = [warning for warning in run.read_manifest().warnings if "no process listening on port 9" in warning]
    assert unseen == ["http://127.0.0.1:9 is served on this machine, but no process listening on port 9 could be "
                      "seen (another user's, or psutil may not list connections here): rigbench_other_cpu_percent "
                      "includes that server's CPU"]
