"""What a run that measured nothing, or less load than it names, says about why, branch by branch, on hand-built
records: the glance of a run in which no step has an aggregate (``analysis.headline.nothing_measured``), the knee's
caveat for a step with no aggregate, and the reasons the sweep gives when it fails a step after the load
(``loadtest.sweep``'s judge of the records: nothing measured, or a shortfall, each with its cause). The same case
end to end, against a real server that never ends its streams: tests/reliability/test_nothing_measured.py."""

from __future__ import annotations

import re
from pathlib import Path

from analysis.report import write_report_with_headline
from core.rundir import LoadSettings, RequestRecord, RunDir, RunManifest, StepWindow
from core.rundir.models import TraceSource
from loadtest.sweep import _judge_records


def judge(path: Path) -> RunManifest:
    """The manifest after the sweep's judge of the records, as ``run_sweep`` ends with it (the run ``complete``)."""
    run = RunDir(path)
    manifest = run.read_manifest()
    return _judge_records(run, manifest, manifest.load)


def timed_out(kit, request_id: str, *, step: int, users: int, t_start: float) -> RequestRecord:
    """A request that streamed 8 tokens, then nothing until its read timeout."""
    return kit.record(request_id, step=step, users=users, t_start=t_start, error_kind="timeout").model_copy(
        update={"t_end": t_start + 3.0, "http_status": 200, "streamed_tokens": 8})


def open_window(rate: float, start: float, length: float) -> StepWindow:
    """An open-loop step's window, opened 5 s after the step began."""
    return StepWindow(index=0, users=0, rate=rate, started_at=start - 5, measure_start=start,
                      measure_end=start + length)


# ---------------------------------------------------------------- the glance and the knee


def test_a_run_with_no_aggregate_says_at_each_step_what_happened_instead(kit) -> None:
    """Step 0's requests all timed out in its window; step 1's window saw no request at all."""
    t0 = kit.T0
    records = [timed_out(kit, f"a{n}", step=0, users=1, t_start=t0 + 101 + n * 3.1) for n in range(3)]
    steps = [kit.window(0, 1), kit.window(1, 2, start=t0 + 200, end=t0 + 210)]
    load = LoadSettings(user_steps=[1, 2], warmup_seconds=1, measure_seconds=10, max_tokens=21, read_timeout_seconds=3)
    path = kit.make_run("nothing", steps, {"p0": records}, load=load)
    report, headline = write_report_with_headline([path])
    assert headline == (
        "No step has an aggregate output rate: at 1 user every request running in the window failed (timeout 3: "
        "streams stalled past the read timeout (3 s, --read-timeout)); at 2 users no request ran in the window. No "
        "throughput, latency or cost stands on that: see the warnings.")
    assert report.read_text().split("## At a glance\n\n", 1)[1].startswith(headline)
    assert "step 1 (2 users): no request ran in its 10.0 s window, so the step has no aggregate, latency or " \
           "per-user figure: the users were not sending (see the load that ran)" in report.read_text()


def test_the_knee_names_the_step_that_had_no_aggregate_to_compare(kit) -> None:
    """1 and 2 users stream well; at 4 users every request timed out: the knee is judged on the two others, and
    the sentence says which step it could not compare."""
    t0 = kit.T0
    records = []
    for index, users in enumerate((1, 2)):
        start = t0 + 100 + index * 100
        records += [kit.record(f"{index}-{user}-{n}", step=index, users=users, t_start=start - 2 + n * 2.6 + user * 0.1)
                    for user in range(users) for n in range(5)]
    records += [timed_out(kit, f"2-{user}", step=2, users=4, t_start=t0 + 301 + user * 0.2) for user in range(4)]
    steps = [kit.window(0, 1), kit.window(1, 2, start=t0 + 200, end=t0 + 210),
             kit.window(2, 4, start=t0 + 300, end=t0 + 310)]
    _, headline = write_report_with_headline([kit.make_run("knee", steps, {"p0": records})])
    assert headline.startswith("Best aggregate output "), headline
    knee = next(sentence for sentence in headline.split(". ") if "knee" in sentence)
    assert knee.endswith("(4 users had no aggregate to compare: see the warnings)"), knee
    assert "at 4 users" not in knee.split(" (4 users had no aggregate", 1)[0], "not compared, not named a figure"


# ---------------------------------------------------------------- the sweep: a step that measured nothing


def test_a_step_whose_requests_failed_is_said_to_have_failed_with_the_fix(kit) -> None:
    records = [timed_out(kit, f"a{n}", step=0, users=1, t_start=kit.T0 + 101 + n * 3.1) for n in range(3)]
    manifest = judge(kit.make_run("failed", [kit.window()], {"p0": records}))
    assert manifest.status == "failed"
    assert manifest.status_detail.startswith(
        "step 0 (1 user): no request of the step ended successfully in its measured window (the others: 3 timeout), "
        "so nothing was measured; its requests failed (3 timed out): streams stall past --read-timeout"), (
        manifest.status_detail)
    assert "--measure" not in manifest.status_detail


def test_a_step_whose_requests_were_still_streaming_at_the_end_is_told_to_measure_longer(kit) -> None:
    """Stopped by the harness while streaming well (no error of theirs): the window was too short."""
    records = [kit.record(f"a{user}", t_start=kit.T0 + 101, decode=20.0).model_copy(
        update={"interrupted": True, "t_end": kit.T0 + 112}) for user in range(2)]
    manifest = judge(kit.make_run("streaming", [kit.window(0, 2)], {"p0": records}))
    assert manifest.status == "failed"
    assert manifest.status_detail.endswith(
        "(the others: 2 interrupted), so nothing was measured; its requests were still streaming when the sweep "
        "ended: give the step a longer --measure or --drain"), manifest.status_detail


def test_a_step_of_which_no_request_was_sent_points_at_the_load_generator(kit) -> None:
    t0 = kit.T0
    healthy = [kit.record(f"a{n}", t_start=t0 + 98 + n * 2.6) for n in range(5)]
    steps = [kit.window(0, 1), kit.window(1, 2, start=t0 + 200, end=t0 + 210)]
    manifest = judge(kit.make_run("unsent", steps, {"p0": healthy}))
    assert manifest.status == "failed"
    assert manifest.status_detail == (
        "step 1 (2 users): no request of the step ended successfully in its measured window (the others: none), so "
        "nothing was measured; no request of it was sent: the load generator did not start it (see locust.log)")


# ---------------------------------------------------------------- the sweep: a step that ran less load than it names


def test_a_closed_loop_step_whose_requests_were_refused_says_its_users_backed_off(kit) -> None:
    """One answer in 2.6 s and three 503s: 4 users kept ~0.4 requests in flight."""
    t0 = kit.T0
    records = [kit.record("ok", users=4, t_start=t0 + 100)]
    records += [kit.record(f"r{n}", users=4, t_start=t0 + 101 + n, error_kind="http_503") for n in range(3)]
    manifest = judge(kit.make_run("refused", [kit.window(0, 4)], {"p0": records}))
    assert manifest.status == "failed"
    assert manifest.status_detail.startswith("step 0 (4 users): the load that ran was "), manifest.status_detail
    assert ", under 50%: its figures would stand for a load that did not run; 3 of its 4 requests failed (3 refused " \
           "(503)), and its users waited after each refusal as the server asked (backing off): " in (
               manifest.status_detail)


def test_a_closed_loop_step_whose_users_had_not_started_says_lengthen_the_warmup(kit) -> None:
    window = kit.window(0, 4).model_copy(update={"users_started": 1})
    records = [kit.record("ok", users=4, t_start=kit.T0 + 100)]
    manifest = judge(kit.make_run("unstarted", [window], {"p0": records}))
    assert manifest.status == "failed"
    assert manifest.status_detail.endswith(
        "its figures would stand for a load that did not run; only 1 of its 4 users had started when its window "
        "opened: lengthen --warmup, or spread the users over --processes N"), manifest.status_detail


def test_a_closed_loop_step_whose_users_sat_idle_says_the_generator_could_not_keep_them_sending(kit) -> None:
    window = kit.window(0, 4).model_copy(update={"users_started": 4})
    records = [kit.record("ok", users=4, t_start=kit.T0 + 100)]
    manifest = judge(kit.make_run("idle", [window], {"p0": records}))
    assert manifest.status == "failed"
    assert manifest.status_detail.endswith(
        "its users were between requests for most of the window, with no error to show for it: the load generator "
        "could not keep them sending; spread the users over --processes N"), manifest.status_detail


def test_an_open_loop_window_too_short_for_its_rate_asks_for_a_longer_measure(kit) -> None:
    """0.2 req/s over 5 s names one arrival; this seed's schedule put none there. A warm-up request ends inside
    the window, so the step measured something and the shortfall is what is judged."""
    t0 = kit.T0
    load = LoadSettings(rate_steps=[0.2], warmup_seconds=5, measure_seconds=5, max_tokens=21)
    warmup = kit.record("w", users=0, phase="warmup", t_start=t0 + 98)
    manifest = judge(kit.make_run("sparse", [open_window(0.2, t0 + 100, 5)], {"p0": [warmup]}, load=load))
    assert manifest.status == "failed"
    assert "its schedule put 0 arrivals in its 5 s window where 0.2 req/s names 1: a window this short holds too " \
           "few of its random arrivals; give --measure " in manifest.status_detail, manifest.status_detail


def test_an_open_loop_generator_behind_its_schedule_is_said_to_have_fallen_behind(kit) -> None:
    t0 = kit.T0
    load = LoadSettings(rate_steps=[10.0], warmup_seconds=5, measure_seconds=10, max_tokens=21)
    records = [kit.record(f"a{n}", users=0, t_start=t0 + 100 + n * 2) for n in range(5)]
    manifest = judge(kit.make_run("behind", [open_window(10.0, t0 + 100, 10)], {"p0": records}, load=load))
    assert manifest.status == "failed"
    found = re.search(r"the load generator sent 5 of the (\d+) arrivals its schedule put in the window: it fell "
                      r"behind \(see the late-start warnings\); use --processes N, or lower rates$",
                      manifest.status_detail)
    assert found and int(found.group(1)) > 50, manifest.status_detail


def test_a_trace_step_that_sent_too_little_says_the_generator_did_not_send_its_schedule(kit) -> None:
    """A trace's window rate is its schedule's already: there is no seeded schedule to count, only what was sent."""
    t0 = kit.T0
    trace = TraceSource(path="trace.jsonl", sha256="0" * 64, rows=100)
    load = LoadSettings(rate_steps=[10.0], trace=trace, warmup_seconds=5, measure_seconds=10, max_tokens=21)
    records = [kit.record(f"a{n}", users=0, t_start=t0 + 100 + n * 2) for n in range(5)]
    manifest = judge(kit.make_run("trace", [open_window(10.0, t0 + 100, 10)], {"p0": records}, load=load))
    assert manifest.status == "failed"
    assert manifest.status_detail.endswith(
        "its figures would stand for a load that did not run; the load generator did not send its schedule; use "
        "--processes N, or lower rates"), manifest.status_detail
