"""A spot notice on a rig whose work folder is not /opt/dlami/nvme, then ``resume`` from home, over SSH.

The rig is this machine behind the private sshd; its work folder is under the test's temp folder, so the
sweep notices the marker only because the step names it (``RigPaths.spot_marker``), not by the default
path. The resumed run goes up to the rig as to a new one (the rig's copy is removed first), with the old
marker still on disk, which the resume step clears.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.load import load_run
from core.network import free_port
from core.rundir import RunDir
from provision.resume import resume
from provision.serve import serve, stop
from provision.sweep import RigSweepInterrupted, sweep

pytestmark = pytest.mark.integration

RIGBENCH = str(Path(sys.executable).parent / "rigbench")
NOTICE = {"action": "terminate", "time": "2026-12-05T10:00:00Z"}


def record_lines(run_path: Path) -> set[str]:
    lines: set[str] = set()
    for shard in (run_path / RunDir.RECORDS).glob("*.jsonl"):
        lines.update(line for line in shard.read_text().splitlines(keepends=True) if line.endswith("\n"))
    return lines


def notice_once_step_zero_is_done(runs: Path, marker: Path, stop_waiting: threading.Event) -> None:
    """Write the watcher's marker (whole, as it does) once the rig's run has completed its first step."""
    while not stop_waiting.is_set():
        found = [path for path in runs.glob("*") if (path / RunDir.MANIFEST).is_file()] if runs.is_dir() else []
        try:
            done = len(found) == 1 and RunDir(found[0]).read_manifest().last_complete_step == 0
        except (OSError, ValueError):
            done = False
        if done:
            time.sleep(0.5)  # into step 1
            partial = marker.with_name(marker.name + ".tmp")
            partial.write_text(json.dumps({"detected_at": "2026-12-05T09:58:00Z", "instance_action": NOTICE}))
            partial.replace(marker)
            return
        time.sleep(0.1)


def test_a_spot_notice_stops_the_rig_sweep_and_resume_finishes_it_from_home(built_rig, tmp_path: Path) -> None:
    rig, paths, profile, build = built_rig
    assert not paths.work.startswith("/opt/dlami/nvme")
    local_runs = tmp_path / "runs"
    marker = Path(paths.spot_marker)
    serve(rig, profile, paths, port=free_port(), health_timeout=120)
    stop_waiting = threading.Event()
    writer = threading.Thread(target=notice_once_step_zero_is_done, args=(Path(paths.runs), marker, stop_waiting),
                              daemon=True)
    writer.start()
    try:
        with pytest.raises(RigSweepInterrupted) as raised:
            sweep(rig, profile, {"user_steps": [1, 2, 3], "warmup_seconds": 0.5, "measure_seconds": 2.0}, paths,
                  local_runs=local_runs, rigbench=RIGBENCH)
        stop_waiting.set()
        # 1. the run is home, interrupted at its last complete step, every record the rig wrote kept
        (home,) = raised.value.copied
        rig_copy = Path(paths.runs) / home.name
        interrupted = RunDir(home).read_manifest()
        assert home.parent == local_runs and interrupted.status == "interrupted", interrupted.status_detail
        assert interrupted.last_complete_step == 0 and str(marker) in interrupted.status_detail
        assert interrupted.build is not None and interrupted.build.key == build.key, "annotated like any sweep's run"
        assert record_lines(home) and record_lines(home) == record_lines(rig_copy)
        message = str(raised.value)
        assert message.startswith("sweep: a spot interruption notice"), message
        assert "terminate at 2026-12-05T10:00:00Z" in message, message
        assert f"{home} (1 of 3 steps complete)" in message, message
        assert f"rigbench provision --profile tiny resume --run {home}" in message, message

        # 2. resume from home on a "new" rig: the rig's copy is gone, the old notice still on disk
        shutil.rmtree(rig_copy)
        (linked,) = resume(rig, profile, [home], paths, rigbench=RIGBENCH)
    finally:
        stop_waiting.set()
        stop(rig, paths)
    assert not marker.exists(), "the answered notice is cleared before the resumed sweep"
    resumed = RunDir(linked).read_manifest()
    assert linked.parent == local_runs and resumed.status == "complete", resumed.status_detail
    assert resumed.resumed_from == home.name and resumed.load.user_steps == [2, 3]
    assert not any("already present" in warning for warning in resumed.warnings), resumed.warnings
    assert resumed.build is not None and resumed.build.key == build.key and resumed.model.synthetic
    before = RunDir(home).read_manifest()
    assert before.linked_runs == [linked.name] and before.build == interrupted.build, "the old run keeps its facts"
    assert (Path(paths.runs) / home.name / RunDir.MANIFEST).is_file(), "uploaded to the rig for the resume"
    for path in (home, linked):  # either folder loads as the whole sweep
        joined = load_run(path)
        assert joined.chain == [home.name, linked.name]
        assert [(step.index, step.users) for step in joined.manifest.steps] == [(0, 1), (1, 2), (2, 3)]
        assert set(joined.records["step"]) == {0, 1, 2}
        assert joined.warnings[0].startswith("resumed sweep: 2 linked runs joined")
