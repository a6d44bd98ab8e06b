"""``rigbench check`` judges a finished step's load as the sweep does, so a run stopped before the sweep
judged its records (left ``complete`` by its load generator) is not called healthy."""

from __future__ import annotations

from pathlib import Path

from core.rundir import LoadSettings, RecordWriter, RequestRecord, RunDir, RunManifest, StepWindow
from core.rundir.check import check_run

T0 = 1_800_000_000.0


def build(root: Path, *, rate: float | None, sent: int, users_started: int | None = None,
          status: str = "complete", unopened_step: bool = False) -> RunDir:
    """One step (``rate`` req/s, else 4 users) with a 2 s warm-up and a 10 s window holding ``sent``
    measured requests, each 0.2 s and whole; ``unopened_step``: a second step was started but stopped
    before its window opened."""
    steps = 2 if unopened_step else 1
    load = LoadSettings(rate_steps=[rate] * steps, measure_seconds=10, warmup_seconds=2, max_tokens=4) if rate else (
        LoadSettings(user_steps=[4, 8][:steps], measure_seconds=10, warmup_seconds=2, max_tokens=4))
    windows = [StepWindow(index=0, users=0 if rate else 4, rate=rate, started_at=T0, measure_start=T0 + 2,
                          measure_end=T0 + 12, users_started=users_started)]
    if unopened_step:
        windows.append(StepWindow(index=1, users=0 if rate else 8, rate=rate, started_at=T0 + 12,
                                  measure_start=T0 + 14))
    manifest = RunManifest(run_id="20261130T040000Z-tiny-0002", created_at="2026-11-30T04:00:00+00:00",
                           ended_at="2026-11-30T04:00:20+00:00", status=status, profile="tiny", load=load,
                           steps=windows, last_complete_step=0)
    run = RunDir.create(root, manifest)
    with RecordWriter(run.shard_path("host-a")) as writer:
        for n in range(sent):
            start = T0 + 2 + n * 10 / sent
            writer.write(RequestRecord(
                request_id=f"r{n}", shard="host-a", step=0, users=0 if rate else 4, phase="measure",
                category="short", t_intended=start if rate else None, t_start=start, t_first_token=start + 0.05,
                t_last_token=start + 0.19, t_end=start + 0.2, content_chunks=4, http_status=200,
                completion_tokens=4))
    return run


def test_a_complete_open_loop_step_that_sent_under_half_its_rate_is_damage(tmp_path):
    """The sweep stopped after its load generator wrote ``complete``, before it judged the records."""
    report = check_run(build(tmp_path, rate=100.0, sent=40).path)
    assert [finding.message.split(",")[0] for finding in report.damaged] == [
        "the load that ran was 4% of 100 req/s (4 req/s sent)"]


def test_an_open_loop_step_that_sent_its_rate_is_healthy(tmp_path):
    assert check_run(build(tmp_path, rate=5.0, sent=50).path).healthy


def test_a_closed_loop_step_whose_window_opened_with_under_half_its_users_is_damage(tmp_path):
    report = check_run(build(tmp_path, rate=None, sent=40, users_started=1).path)
    assert [finding.message.split(",")[0] for finding in report.damaged] == [
        "only 1 of its 4 users had started when its window opened"]
    assert check_run(build(tmp_path / "all", rate=None, sent=40, users_started=4).path).healthy


def test_a_run_stopped_before_its_step_opened_its_window_keeps_its_finished_steps(tmp_path):
    """Interrupted cleanly while its next step's users were still starting: that step claims no window, so
    nothing broken is called measured; the finished step stands, and the status says where it stopped."""
    report = check_run(build(tmp_path, rate=None, sent=40, users_started=4, status="interrupted",
                             unopened_step=True).path)
    assert report.healthy
    assert "status" in [finding.where for finding in report.findings]
