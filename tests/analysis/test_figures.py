"""Per-step figures from hand-built run directories, every formula checked by hand."""

from __future__ import annotations

import json

import pytest

from analysis import intervals
from analysis.figures import counter_rate, counter_tok_s, decode_call_rates, run_figures
from analysis.load import load_run
from analysis.report import write_report
from core.errors import AnalysisError
from core.rundir import LoadSettings, RunDir, TelemetrySnapshot


def test_aggregate_throughput_counts_straddling_requests_pro_rata(kit):
    t0 = kit.T0
    # window [t0+100, t0+110): 10 s
    shards = {
        "p0": [
            # decode [95, 105), 11 tokens: half the span inside -> 5.5 tokens (tagged warm-up: still counts)
            kit.record("a", phase="warmup", t_start=t0 + 94.5, ttft=0.5, decode=10.0, tokens=11),
            # decode [101, 109), 9 tokens, wholly inside -> 9
            kit.record("b", t_start=t0 + 100.5, ttft=0.5, decode=8.0, tokens=9),
            # decode [108, 118), 10 tokens: 2 of 10 s inside -> 2
            kit.record("c", t_start=t0 + 107.0, ttft=1.0, decode=10.0, tokens=10),
            # an error makes no tokens
            kit.record("d", t_start=t0 + 103.0, error_kind="http_500"),
        ]
    }
    figures = run_figures(load_run(kit.make_run("r1", [kit.window()], shards)))
    step = figures.steps[0]
    assert step.output_tokens == pytest.approx(16.5)
    assert step.aggregate_tok_s.value == pytest.approx(1.65)
    assert step.aggregate_tok_s.n == 10
    assert step.requests == 3 and step.ok == 2
    assert step.errors == {"http_500": 1}
    # successful completions inside the window: a (ends 105.01) and b (109.01); c ends at 118.01
    assert step.request_rate == pytest.approx(2 / 10)


def test_latency_and_per_user_formulas(kit):
    t0 = kit.T0
    shards = {
        "p0": [
            # TTFT 0.5, 21 tokens over 2 s: client (21-1)/2 = 10 tok/s, mean ITL 2/20 = 0.1 s
            kit.record("a", category="code", t_start=t0 + 101, ttft=0.5, decode=2.0, tokens=21, server_tok_s=10.5),
            # TTFT 1.5, 11 tokens over 2 s: client 5 tok/s, ITL 0.2 s
            kit.record("b", category="chat", t_start=t0 + 102, ttft=1.5, decode=2.0, tokens=11, server_tok_s=5.5),
            # TTFT 1.0, 41 tokens over 2 s: client 20 tok/s, ITL 0.05 s
            kit.record("c", category="chat", t_start=t0 + 103, ttft=1.0, decode=2.0, tokens=41, server_tok_s=20.5),
        ]
    }
    step = run_figures(load_run(kit.make_run("r1", [kit.window()], shards))).steps[0]
    assert step.ttft_s["p50"].value == pytest.approx(1.0)
    assert step.ttft_s["p90"].value == pytest.approx(1.0 + 0.8 * 0.5)  # rank 1.8 between 1.0 and 1.5
    assert step.client_tok_s.value == pytest.approx(10.0)
    assert step.server_tok_s.value == pytest.approx(10.5)
    assert step.itl_s["p50"].value == pytest.approx(0.1)
    assert step.e2e_s["p50"].value == pytest.approx(1.0 + 2.0 + 0.01)
    # geometric mean of category means (server timings): code 10.5, chat (5.5 + 20.5) / 2 = 13
    assert step.geomean_tok_s.value == pytest.approx((10.5 * 13.0) ** 0.5)


def test_drafter_acceptance_and_tokens_per_decode_step(kit):
    t0 = kit.T0
    shards = {
        "p0": [
            kit.record("a", t_start=t0 + 101, tokens=21, draft=(10, 6)),
            kit.record("b", t_start=t0 + 102, tokens=21, draft=(20, 14)),
        ]
    }
    step = run_figures(load_run(kit.make_run("r1", [kit.window()], shards))).steps[0]
    assert step.draft_acceptance.value == pytest.approx(20 / 30)
    # 42 tokens from 42 - 20 = 22 target steps
    assert step.tokens_per_decode_step == pytest.approx(42 / 22)


def test_step_without_closed_window_is_a_counted_warning(kit):
    t0 = kit.T0
    steps = [kit.window(0, 1), kit.window(1, 2, start=t0 + 200, end=None)]
    shards = {"p0": [kit.record("a", t_start=t0 + 101), kit.record("b", step=1, users=2, t_start=t0 + 201)]}
    figures = run_figures(load_run(kit.make_run("r1", steps, shards, status="interrupted")))
    assert [s.users for s in figures.steps] == [1]
    assert any("step 1 (2 users) has no closed measured window" in w for w in figures.warnings)
    assert any("run status is interrupted" in w for w in figures.warnings)


def test_run_with_no_measured_window_is_a_clear_error(kit):
    shards = {"p0": [kit.record("a", t_start=kit.T0 + 101)]}
    run = load_run(kit.make_run("r1", [kit.window(end=None)], shards, status="failed"))
    with pytest.raises(AnalysisError, match="no step has a measured window"):
        run_figures(run)


def test_server_counter_rate_from_telemetry_snapshots(kit):
    t0 = kit.T0
    path = kit.make_run("r1", [kit.window()], {"p0": [kit.record("a", t_start=t0 + 101)]})
    run_dir = RunDir(path)
    counter = "llamacpp:tokens_predicted_total"
    for boundary, taken_at, tokens in (("start", t0 + 95, 0.0), ("measure", t0 + 100, 40.0), ("end", t0 + 110, 240.0)):
        snapshot = TelemetrySnapshot(taken_at=taken_at, step=0, users=1, boundary=boundary, metrics={counter: tokens})
        run_dir.append_telemetry(snapshot)
    step = run_figures(load_run(path)).steps[0]
    assert step.server_counter_tok_s == pytest.approx((240 - 40) / 10)


def test_records_without_token_counts_fall_back_to_chunks_with_a_warning(kit):
    t0 = kit.T0
    record = kit.record("a", t_start=t0 + 101, ttft=0.5, decode=2.0, tokens=21, server_tok_s=None)
    record = record.model_copy(update={"completion_tokens": None})
    figures = run_figures(load_run(kit.make_run("r1", [kit.window()], {"p0": [record]})))
    assert figures.steps[0].output_tokens == pytest.approx(21)
    assert any("1 successful record carries no token count" in w for w in figures.warnings)


def test_interrupted_and_partial_requests_count_their_streamed_chunks_in_the_window(kit):
    t0 = kit.T0
    # window [t0+100, t0+110): 10 s, 2 users; each request takes ~30 s, longer than the window
    still_streaming = kit.record("a", users=2, t_start=t0 + 99.0, ttft=1.0, decode=12.0, tokens=25).model_copy(
        # stopped by the harness at t0+112: 25 chunks over decode [100, 112] -> 10 of 12 s inside -> 25*10/12
        update={"interrupted": True, "completion_tokens": None, "timings": None, "t_end": t0 + 112.0}
    )
    cut = kit.record("b", users=2, t_start=t0 + 104.0, ttft=1.0, decode=4.0, tokens=9).model_copy(
        # a disconnect after 9 chunks over [105, 109], wholly inside -> 9 tokens that were generated
        update={"error_kind": "disconnect", "completion_tokens": None, "timings": None}
    )
    shards = {"p0": [still_streaming, cut, kit.record("c", users=2, t_start=t0 + 103.0, error_kind="http_500")]}
    run = kit.make_run("r1", [kit.window(users=2)], shards, status="complete")
    figures = run_figures(load_run(run))
    step = figures.steps[0]
    assert step.output_tokens == pytest.approx(25 * 10 / 12 + 9)
    assert step.aggregate_tok_s.value == pytest.approx((25 * 10 / 12 + 9) / 10)
    # neither partial request is a success; the interrupted one is no error either
    assert step.ok == 0 and step.errors == {"disconnect": 1, "http_500": 1} and step.requests == 3
    assert step.completed_in_window == 0
    [warning] = [w for w in figures.warnings if "window shorter than a request" in w]
    # no request finished: each partial one's time to its last chunk, scaled up to max_tokens 21 (never down):
    # a: 13 s for 25 chunks -> 13 s; b: 5 s for 9 chunks -> 5 * 21 / 9 = 11.67 s; median 12.33 s; advice twice
    # that, rounded up: 25 s
    assert "only 0 requests completed inside its 10.0 s window" in warning
    assert "one takes ~12.3 s" in warning and "measure at least ~25 s" in warning
    assert "server counter not recorded" in warning


def test_a_window_with_fewer_completions_than_users_is_warned_with_the_server_counter(kit):
    t0 = kit.T0
    # 2 users, one finished request inside [100, 110) (e2e 0.5 + 4 + 0.01 s), one finishing after it
    shards = {
        "p0": [
            kit.record("a", users=2, t_start=t0 + 101, ttft=0.5, decode=4.0, tokens=9),
            kit.record("b", users=2, t_start=t0 + 107, ttft=0.5, decode=8.0, tokens=9),
        ]
    }
    run = kit.make_run("r1", [kit.window(users=2)], shards)
    counter = "llamacpp:tokens_predicted_total"
    snaps = [
        TelemetrySnapshot(taken_at=t0 + 100, step=0, users=2, boundary="measure", metrics={counter: 100.0}),
        TelemetrySnapshot(taken_at=t0 + 110, step=0, users=2, boundary="end", metrics={counter: 115.0}),
    ]
    (run / "telemetry.jsonl").write_text("".join(s.model_dump_json() + "\n" for s in snaps))
    figures = run_figures(load_run(run))
    assert figures.steps[0].completed_in_window == 1
    [warning] = [w for w in figures.warnings if "window shorter than a request" in w]
    # median e2e of the finished requests: (4.51 + 8.51) / 2 = 6.51 s -> at least ceil(13.02) = 14 s
    assert "one takes ~6.5 s" in warning and "measure at least ~14 s" in warning
    assert "server counter 1.5 tok/s (it counts finished requests only" in warning


def test_a_step_window_recorded_twice_is_refused(kit):
    # which window holds the step's records is unknown; `rigbench check` calls it damage too
    t0 = kit.T0
    steps = [kit.window(0, 1), kit.window(0, 1, start=t0 + 100.2, end=t0 + 110)]
    shards = {"p0": [kit.record("a", t_start=t0 + 101), kit.record("b", t_start=t0 + 104)]}
    with pytest.raises(AnalysisError, match=r"lists step\(s\) 0 more than once.*rigbench check"):
        run_figures(load_run(kit.make_run("r1", steps, shards)))


def test_requests_across_the_windows_edges_count_the_chunks_they_kept_inside(kit):
    t0 = kit.T0
    # window [t0+100, t0+110), as scheduled (10 s). Each request: 10 chunks over 10 s of decode.
    early = kit.record("a", phase="warmup", t_start=t0 + 94.5, ttft=0.5, decode=10.0, tokens=30)
    late = kit.record("b", t_start=t0 + 107.0, ttft=1.0, decode=10.0, tokens=30)
    other = kit.record("c", step=1, phase="warmup", t_start=t0 + 107.0, ttft=1.0, decode=10.0, tokens=30)
    # a slow start: of a's 10 chunks, 8 arrived inside the window (spread over its span would say half);
    # with the server's running counts, 20 of its 30 tokens
    early = early.model_copy(update={"content_chunks": 10, "window_chunks": 8, "window_tokens": 20})
    # b streamed no running counts: 3 of its 10 chunks inside, so 3/10 of its 30 tokens
    late = late.model_copy(update={"content_chunks": 10, "window_chunks": 3})
    # c belongs to another step: its counts are for that step's window, so it is spread (2 of 10 s inside)
    other = other.model_copy(update={"content_chunks": 10, "window_chunks": 9, "window_tokens": 29})
    shards = {"p0": [early, late, other]}
    steps = [kit.window(), kit.window(index=1, start=t0 + 120, end=t0 + 130)]
    step = run_figures(load_run(kit.make_run("r1", steps, shards))).steps[0]
    assert step.output_tokens == pytest.approx(20 + 9 + 6)
    assert step.edge_attribution == {"timeline": 0, "running_counts": 1, "chunks": 1, "span": 1}
    assert step.aggregate_tok_s.low <= step.aggregate_tok_s.value <= step.aggregate_tok_s.high


def test_a_window_closed_off_its_schedule_spreads_every_request(kit):
    t0 = kit.T0
    early = kit.record("a", phase="warmup", t_start=t0 + 94.5, ttft=0.5, decode=10.0, tokens=30)
    early = early.model_copy(update={"content_chunks": 10, "window_chunks": 8, "window_tokens": 20})
    # closed at 108 s of a 10 s window (a stop): a's counts were made for the scheduled window
    step = run_figures(load_run(kit.make_run("r1", [kit.window(end=t0 + 108)], {"p0": [early]}))).steps[0]
    assert step.output_tokens == pytest.approx(30 / 2)  # decode [95, 105): half its span inside
    assert step.edge_attribution["span"] == 1


def test_a_counter_over_replicas_is_their_sum_and_none_when_a_replica_was_not_read() -> None:
    counter = "llamacpp:tokens_predicted_total"

    def snapshot(replica: int, boundary: str, at: float, tokens: float, error: str | None = None) -> TelemetrySnapshot:
        return TelemetrySnapshot(taken_at=at, step=0, users=4, boundary=boundary, metrics={counter: tokens},
                                 replica=replica, error=error)

    both = [snapshot(0, "measure", 100, 0), snapshot(0, "end", 110, 500), snapshot(1, "measure", 100.1, 40),
            snapshot(1, "end", 110.1, 340)]
    assert counter_tok_s(both, 0) == pytest.approx(50 + 30)
    assert counter_rate(both, 0, counter, per_server=True) == pytest.approx(40)
    # replica 1's end snapshot failed: the rig's rate is unknown, not replica 0's alone
    broken = [*both[:3], snapshot(1, "end", 110.1, 340, error="timed out")]
    assert counter_tok_s(broken, 0) is None and decode_call_rates(broken, [0]) == {}


def test_a_step_whose_every_request_timed_out_has_no_figures_and_its_counts_and_warning_say_so(kit):
    """Issue 46: step 0 (2 users) streams well; at step 1 (4 users) the server streams every token and never sends
    [DONE]: each request, started in the warm-up, streamed its 300 tokens into the window and timed out after it.
    No one got those tokens: the step's aggregate (and $/Mtok) is absent, not a number and not 0; the glance's best
    step is the 2-user one; the step table counts the 4 timed-out requests running as the window opened; the
    warning names the timeouts, not a short window."""
    t0 = kit.T0
    healthy = [kit.record(f"a{user}-{n}", users=2, t_start=t0 + 98 + n * 2.6 + user * 0.1, tokens=21)
               for user in range(2) for n in range(5)]
    stalled = [kit.record(f"b{user}", step=1, users=4, phase="warmup", t_start=t0 + 196, ttft=1.0, decode=6.0,
                          tokens=300).model_copy(update={
                              "t_end": t0 + 213.0, "error_kind": "timeout", "completion_tokens": None, "timings": None,
                              "streamed_tokens": 300, "http_status": 200})
               for user in range(4)]
    load = LoadSettings(user_steps=[2, 4], warmup_seconds=4, measure_seconds=10, max_tokens=300,
                        read_timeout_seconds=10)
    steps = [kit.window(0, 2), kit.window(1, 4, start=t0 + 200, end=t0 + 210)]
    path = kit.make_run("r1", steps, {"p0": healthy + stalled}, load=load)
    figures = run_figures(load_run(path))
    two, four = figures.steps
    assert two.aggregate_tok_s.value > 0 and four.aggregate_tok_s.value is None
    assert (four.requests, four.errors, four.running_at_start) == (0, {}, {"timeout": 4})
    [warning] = [w for w in figures.warnings if w.startswith("step 1 (4 users)")]
    assert warning == ("step 1 (4 users): every request running in its 10.0 s window failed (timeout 4: streams "
                       "stalled past the read timeout (10 s, --read-timeout)), so the step has no aggregate, latency "
                       "or per-user figure; a longer window would not help")
    markdown = write_report([path], price_as=["g6.xlarge"]).read_text()
    glance = markdown.split("## At a glance\n\n", 1)[1].split("\n", 1)[0]
    assert glance.startswith(f"Best aggregate output {two.aggregate_tok_s.short()} tok/s at 2 users;")
    row = next(line for line in markdown.splitlines() if line.startswith("|       4 |") and "timeout" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")][1:6] == ["0", "0", "0", "4 (timeout 4)", "- (n=0)"]
    summary = json.loads((path / "summary.json").read_text())["runs"][0]
    assert all(cost["value"] is None for cost in summary["usd_per_mtok"][1].values())


def test_an_interval_never_reaches_below_zero(kit):
    """The aggregate's interval is its sub-windows' moved by what the edge requests' own counts changed: a request
    whose server counts put 1 of its 100 tokens inside the window (spread over its span: 50) moves it down past 0.
    A normal interval of a mean of values none of which is negative is cut at 0 too, a share's at 1."""
    t0 = kit.T0
    edge = kit.record("a", phase="warmup", t_start=t0 + 94.5, ttft=0.5, decode=10.0, tokens=100)
    edge = edge.model_copy(update={"content_chunks": 100, "window_chunks": 1, "window_tokens": 1})
    inside = [kit.record(f"b{n}", t_start=t0 + 106 + n * 0.3, ttft=0.1, decode=0.1, tokens=2) for n in range(4)]
    step = run_figures(load_run(kit.make_run("r1", [kit.window()], {"p0": [edge, *inside]}))).steps[0]
    assert step.output_tokens == pytest.approx(1 + 8)
    assert step.aggregate_tok_s.low == 0.0 and step.aggregate_tok_s.method.endswith("cut at 0")
    skewed = intervals.mean([0.0] * 1999 + [1000.0])  # mean 0.5; a normal interval of +-1.4
    assert (skewed.low, skewed.method) == (0.0, "normal, cut at 0")
    accepted = intervals.ratio_of_sums([2.0] * 1999 + [0.0], [2.0] * 1999 + [50.0], share=True)  # accepted/drafted
    assert accepted.high <= 1.0
    # a $/Mtok whose throughput interval reaches 0 has no upper bound: written open, not as no interval at all
    assert intervals.Estimate(277.8, 138.9, None, 10, "bootstrap").short() == "277.8 [138.9, ∞]"
