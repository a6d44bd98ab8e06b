"""The sweep controller when Locust's master resets the shape's clock and a controller replaces another."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from core.rundir import LoadSettings, RunDir, RunManifest, new_run_id, utc_now
from loadtest.controller import SweepController
from loadtest.schedule import make_stages


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


def test_a_window_opening_before_its_users_have_all_started_says_how_many_had(tmp_path) -> None:
    pytest.importorskip("gevent")
    options = SimpleNamespace(parallel_slots=8, context_tokens=0, processes=1, interruption_marker="", run_dir="")
    runner = SimpleNamespace(user_count=0)
    environment = SimpleNamespace(parsed_options=options, host="http://127.0.0.1:9", runner=runner)
    settings = LoadSettings(user_steps=[2, 8], warmup_seconds=10, measure_seconds=5, max_tokens=4)
    run = RunDir.create(tmp_path, RunManifest(run_id=new_run_id("ctl"), created_at=utc_now(), profile="tiny",
                                              load=settings))
    controller = SweepController(environment, make_stages(settings.user_steps, 10, 5), run)
    for elapsed, index, boundary, running in [(0, 0, "start", 0), (10, 0, "measure", 2), (15, 0, "end", 2),
                                              (15, 1, "start", 2), (25, 1, "measure", 3)]:
        runner.user_count = running
        controller._record_boundary(1000.0, elapsed, index, boundary)
    manifest = run.read_manifest()
    assert [step.users_started for step in manifest.steps] == [2, 3]
    shortfall = [warning for warning in manifest.warnings if "had started" in warning]
    assert shortfall == ["step 1 (8 users): 3 of its 8 users had started when its measured window opened, after "
                         "10 s of warm-up: the window measured a smaller load; the warm-up was shorter than starting "
                         "them took; lengthen --warmup"]
