"""The sweep schedule and the Locust shape, tested by faking the shape's run time."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.errors import LoadTestError, UsageError
from core.rundir import LoadSettings
from loadtest.schedule import boundaries, locate, locate_or_last, make_stages, total_duration

ROOT = Path(__file__).resolve().parents[2]
STAGES = make_stages([1, 4, 16], warmup=2.0, measure=5.0)


def test_locate_walks_steps_and_phases() -> None:
    assert locate(STAGES, 0.0).index == 0
    assert locate(STAGES, 1.99).phase == "warmup"
    assert locate(STAGES, 2.0).phase == "measure"
    position = locate(STAGES, 7.5)
    assert (position.index, position.users, position.phase) == (1, 4, "warmup")
    assert (position.step_start, position.measure_start, position.measure_end) == (7.0, 9.0, 14.0)
    assert locate(STAGES, 20.9).users == 16
    assert locate(STAGES, 21.0) is None
    assert total_duration(STAGES) == 21.0


def test_request_started_after_the_end_belongs_to_the_last_measured_window() -> None:
    position = locate_or_last(STAGES, 21.3)
    assert (position.index, position.phase, position.measure_end) == (2, "measure", 21.0)


def test_boundaries_are_start_measure_end_per_step() -> None:
    points = boundaries(STAGES)
    assert points[:3] == [(0.0, 0, "start"), (2.0, 0, "measure"), (7.0, 0, "end")]
    assert points[-1] == (21.0, 2, "end")
    assert len(points) == 9


SHAPE_CHECK = """
import time
from loadtest.schedule import make_rate_stages, make_stages
from loadtest.shapes import SweepShape

class FakeClockShape(SweepShape):
    now = 0.0
    def get_run_time(self):
        return self.now

class Closed: pass
class Open: pass

shape = FakeClockShape()
shape.stages = make_stages([1, 4, 16], warmup=2.0, measure=5.0)
shape.closed_loop_class, shape.open_loop_class = Closed, Open
ticks = []
for now in (0.5, 8.0, 15.0, 21.0):
    shape.now = now
    tick = shape.tick()
    ticks.append(tick and (tick[0], tick[1], [c.__name__ for c in tick[2]]))
rates = FakeClockShape()
rates.stages = make_rate_stages([2.0, 8.0], warmup=1.0, measure=2.0)
rates.closed_loop_class, rates.open_loop_class = Closed, Open
class TwoWorkers:
    worker_count = 2
rates.runner = TwoWorkers()
for now in (0.5, 4.0, 6.0):
    rates.now = now
    tick = rates.tick()
    ticks.append(tick and (tick[0], tick[1], [c.__name__ for c in tick[2]]))
seen = []
real = SweepShape()
real.on_reset = seen.append
real.reset_time()
print(ticks, abs(seen[0] - time.time()) < 5)
"""


def test_shape_ticks_users_with_instant_spawn_then_stops_and_reports_unix_start() -> None:
    """Run in a child process: importing Locust monkey-patches with gevent. An open-loop sweep
    keeps one dispatcher per load process (here two workers) through every rate step."""
    output = subprocess.run(
        [sys.executable, "-c", SHAPE_CHECK], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout
    assert output.strip().splitlines()[-1] == (
        "[(1, 10.0, ['Closed']), (4, 40.0, ['Closed']), (16, 160.0, ['Closed']), None, "
        "(2, 20.0, ['Open']), (2, 20.0, ['Open']), None] True"
    )


def test_caller_side_modules_do_not_import_locust() -> None:
    """run_sweep's caller must not be monkey-patched by gevent."""
    code = (
        "import sys, loadtest.sweep, loadtest.selftest, loadtest.schedule, loadtest.streaming, rigbench.cli;"
        "print('locust' in sys.modules, 'gevent' in sys.modules)"
    )
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert output.strip() == "False False"


def test_the_controller_and_the_dispatch_tally_do_not_import_locust() -> None:
    """Tests import the controller: importing Locust there would monkey-patch pytest's process."""
    code = "import sys, loadtest.controller, loadtest.dispatch_tally; print('locust' in sys.modules)"
    output = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert output.strip() == "False"


def test_bad_steps_are_clear_errors() -> None:
    with pytest.raises(LoadTestError, match=">= 1"):
        make_stages([0, 2], 1, 1)
    with pytest.raises(LoadTestError, match="measured window"):
        make_stages([1], 1, 0)


def test_one_measured_window_per_step() -> None:
    stages = make_stages([1, 8, 64], 2.0, [5.0, 10.0, 20.0])
    assert [(s.users, s.measure) for s in stages] == [(1, 5.0), (8, 10.0), (64, 20.0)]
    assert locate(stages, 2 + 5 + 2 + 10 + 2 + 19.9).index == 2 and locate(stages, 41.0) is None
    with pytest.raises(UsageError, match="2 measured windows for 3 user steps"):
        make_stages([1, 8, 64], 2.0, [5.0, 10.0])


def test_load_settings_keep_one_window_per_step_and_resume_slices_them() -> None:
    settings = LoadSettings(user_steps=[1, 8, 64], warmup_seconds=1, measure_seconds=[5, 10, 20], max_tokens=8)
    rest = settings.remaining(1)
    assert rest.user_steps == [8, 64] and rest.measure_seconds == [10, 20]
    single = LoadSettings(user_steps=[1, 2], warmup_seconds=1, measure_seconds=3, max_tokens=8)
    assert single.remaining(1).measure_seconds == 3
    with pytest.raises(ValidationError, match="2 windows for 3 user steps"):
        LoadSettings(user_steps=[1, 8, 64], warmup_seconds=1, measure_seconds=[5, 10], max_tokens=8)
