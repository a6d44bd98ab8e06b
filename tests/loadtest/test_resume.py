"""Spot interruption and resume, end to end: a real Locust sweep against the ground-truth
server, the watcher's marker file written mid-sweep, ``rigbench sweep --resume``, and the
analysis that joins the two runs into one sweep."""

from __future__ import annotations

import json
import re
import socket
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import loadtest.sweep as sweep
from analysis.figures import run_figures
from analysis.load import load_run
from analysis.report import write_report
from core.errors import LoadTestError
from core.rundir import LoadSettings, RunDir, RunManifest, ServerInfo, new_manifest, new_run_id, server_at, utc_now
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.resume import check_resumable, go_on_command, start_resumed_run
from loadtest.sweep import run_sweep
from rigbench.cli import app

pytestmark = pytest.mark.integration


def write_marker_after_first_step(run: RunDir, marker: Path, stop: threading.Event) -> None:
    """What infra/templates/spot_watcher.sh does on the two-minute notice, once step 0 is done."""
    while not stop.is_set():
        if run.read_manifest().last_complete_step == 0:
            time.sleep(0.3)
            notice = {"action": "terminate", "time": "2026-11-30T05:00:00Z"}
            marker.write_text(json.dumps({"detected_at": "2026-11-30T04:58:00Z", "instance_action": notice}))
            return
        time.sleep(0.05)


@pytest.mark.timing
def test_marker_interrupts_the_sweep_and_resume_finishes_it_in_a_linked_run(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=10, itl_ms=10, model="default", tokens=40)  # ~0.4 s a request
    settings = LoadSettings(user_steps=[1, 2, 3], warmup_seconds=0.5, measure_seconds=1.5, max_tokens=40)
    marker = tmp_path / "rig" / "spot-interruption.json"
    marker.parent.mkdir()
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        manifest = new_manifest("tiny", "tiny", load=settings, server=server_at(server.base_url, slots=64))
        run = RunDir.create(runs, manifest)
        stop = threading.Event()
        writer = threading.Thread(target=write_marker_after_first_step, args=(run, marker, stop), daemon=True)
        writer.start()
        started = time.monotonic()
        try:
            manifest = run_sweep(
                run,
                server.base_url,
                progress=False,
                interruption_marker=marker,
            )
        finally:
            stop.set()
        assert time.monotonic() - started < 5.5, "the sweep ran on past the notice"
        assert manifest.status == "interrupted" and manifest.last_complete_step == 0
        assert str(marker) in manifest.status_detail and "rigbench sweep --resume" in manifest.status_detail
        records = run.read_records()
        assert records and all(r.error_kind is None for r in records)  # a notice is not a server fault
        assert {r.step for r in records} == {0, 1}

        # the marker is still on disk (older): the resumed sweep must not stop at once because of it
        result = CliRunner().invoke(
            app,
            ["sweep", "--resume", str(run.path), "--url", server.base_url, "--no-progress"]
            + ["--interruption-marker", str(marker)],
        )
        assert result.exit_code == 0, result.output
        again = CliRunner().invoke(app, ["sweep", "--resume", str(run.path), "--no-progress"])
    resumed_path = next(p for p in runs.iterdir() if p.name != run.path.name)
    resumed = RunDir(resumed_path).read_manifest()
    assert resumed.status == "complete" and resumed.resumed_from == run.path.name
    assert resumed.load.user_steps == [2, 3] and resumed.load.max_tokens == 40
    assert resumed.linked_runs == [run.path.name] and run.read_manifest().linked_runs == [resumed_path.name]
    assert any("already present at the start" in w for w in resumed.warnings)
    # a second resume of the same run would repeat its steps: refused, one clear line, nothing created
    assert again.exit_code != 0 and isinstance(again.exception, LoadTestError)
    assert f"already resumed by {resumed_path.name}" in str(again.exception) and len(list(runs.iterdir())) == 2

    for path in (run.path, resumed_path):  # either directory loads as the whole sweep
        joined = load_run(path)
        assert joined.chain == [run.path.name, resumed_path.name]
        assert [(w.index, w.users) for w in joined.manifest.steps] == [(0, 1), (1, 2), (2, 3)]
        assert set(joined.records["step"]) == {0, 1, 2}  # the cut step 1 of the first run is left out
        assert "resumed sweep: 2 linked runs joined" in joined.warnings[0]
    figures = run_figures(load_run(resumed_path))
    assert [s.users for s in figures.steps] == [1, 2, 3] and all(s.aggregate_tok_s.value > 0 for s in figures.steps)
    text = write_report([resumed_path]).read_text()
    assert "resumed sweep joined from 2 linked runs" in text and "resumed sweep: 2 linked runs joined" in text


def stored_run(root: Path, status: str, last_complete_step: int | None) -> RunDir:
    manifest = RunManifest(
        run_id=new_run_id("tiny"),
        created_at=utc_now(),
        profile="tiny",
        status=status,
        last_complete_step=last_complete_step,
        server=ServerInfo(args=[], host="127.0.0.1", port=8080),
        load=LoadSettings(user_steps=[1, 2, 4], warmup_seconds=1, measure_seconds=2, max_tokens=8),
    )
    return RunDir.create(root, manifest)


@pytest.mark.parametrize(
    ("status", "last", "message"),
    [
        ("complete", 2, "the sweep is complete; there is nothing to resume"),
        ("running", 0, "status is running; a sweep may still be writing it"),
        ("failed", 2, "every step completed (status failed); there is nothing to resume"),
    ],
)
def test_resume_refuses_runs_with_nothing_to_continue_and_creates_nothing(tmp_path, status, last, message) -> None:
    run = stored_run(tmp_path, status, last)
    with pytest.raises(LoadTestError, match=re.escape(message)):
        start_resumed_run(run, None)
    assert [p.name for p in tmp_path.iterdir()] == [run.path.name] and run.read_manifest().linked_runs == []


@pytest.mark.parametrize(("status", "last"), [("interrupted", 0), ("failed", 1), ("interrupted", None),
                                            ("complete", 2), ("running", 0), ("failed", 2)])
def test_the_go_on_hint_is_given_for_every_run_resume_takes_and_no_other(tmp_path, status, last) -> None:
    """``--resume`` takes an interrupted or a failed run with steps left (``check_resumable``); the hint printed
    after a stop names exactly those."""
    run = stored_run(tmp_path, status, last)
    takes = status in ("interrupted", "failed") and last != 2
    assert go_on_command(run, url="URL") == (f"rigbench sweep --resume {run.path} --url URL" if takes else None)
    if takes:
        check_resumable(run)
    else:
        with pytest.raises(LoadTestError):
            check_resumable(run)


def test_resume_plan_repeats_the_cut_step_and_keeps_the_old_server_unless_told(tmp_path) -> None:
    run = stored_run(tmp_path, "interrupted", 0)
    new, url = start_resumed_run(run, None)
    assert url == "http://127.0.0.1:8080" and new.read_manifest().load.user_steps == [2, 4]
    fresh = stored_run(tmp_path / "other", "interrupted", None)  # cut inside its first step: all steps again
    new, url = start_resumed_run(fresh, "http://10.0.0.5:9000")
    manifest = new.read_manifest()
    assert url == "http://10.0.0.5:9000" and manifest.load.user_steps == [1, 2, 4]
    assert (manifest.server.host, manifest.server.port, manifest.status) == ("10.0.0.5", 9000, "running")


def test_default_marker_is_the_watchers_path_on_a_rig_only(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("RIGBENCH_SPOT_MARKER", raising=False)
    monkeypatch.setattr(sweep, "RIG_INTERRUPTION_MARKER", tmp_path / "missing" / "spot-interruption.json")
    assert sweep.default_interruption_marker() is None
    monkeypatch.setattr(sweep, "RIG_INTERRUPTION_MARKER", tmp_path / "spot-interruption.json")
    assert sweep.default_interruption_marker() == tmp_path / "spot-interruption.json"
    monkeypatch.setenv("RIGBENCH_SPOT_MARKER", str(tmp_path / "elsewhere.json"))
    assert sweep.default_interruption_marker() == tmp_path / "elsewhere.json"


def test_a_run_remembers_how_its_server_was_reached_scheme_and_ipv6_brackets_too(tmp_path) -> None:
    for url in ("http://[::1]:8080", "https://[fd00::5]:8443", "https://rig.example:443", "http://127.0.0.1:9"):
        assert server_at(url).url == url
    run = stored_run(tmp_path, "interrupted", 0)
    run.update_manifest(server=server_at("https://[fd00::5]:8443"))
    new, url = start_resumed_run(run, None)
    assert url == "https://[fd00::5]:8443" and new.read_manifest().server.url == url


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


def test_resume_of_a_run_against_ipv6_loopback_reaches_its_server_again(tmp_path: Path) -> None:
    """``--resume`` makes the URL again from the run's host, port and scheme: ``http://[::1]:PORT``."""
    if not ipv6_loopback():
        pytest.skip("no IPv6 loopback (::1) here to serve on")
    config = GroundTruthConfig(ttft_ms=5, itl_ms=5, model="default")
    runs = tmp_path / "runs"
    with GroundTruthServer(config, tmp_path / "truth.jsonl", host="::1") as server:
        assert server.base_url.startswith("http://[::1]:")
        settings = LoadSettings(user_steps=[1, 2], warmup_seconds=0.3, measure_seconds=0.7, max_tokens=8)
        old = RunDir.create(runs, new_manifest("v6", "tiny", load=settings, server=server_at(server.base_url, slots=4)))
        old.update_manifest(status="interrupted", last_complete_step=0, ended_at=utc_now())
        result = CliRunner().invoke(app, ["sweep", "--resume", str(old.path), "--no-progress"])
    assert result.exit_code == 0, result.output
    (resumed,) = [path for path in runs.iterdir() if path != old.path]
    manifest = RunDir(resumed).read_manifest()
    assert manifest.status == "complete" and manifest.server.url == server.base_url
    assert f"against {server.base_url}" in result.output and manifest.load.user_steps == [2]


def test_a_resumed_repeat_stays_the_same_repeat_of_its_arm(tmp_path) -> None:
    from core.rundir.models import RepeatInfo

    run = stored_run(tmp_path, "interrupted", 0)
    repeat = RepeatInfo(series="s", arm="draft", index=2, of=3, order=3)
    run.update_manifest(repeat=repeat)
    new, _ = start_resumed_run(run, None)
    assert new.read_manifest().repeat == repeat  # its remaining steps join the same run of the arm
