"""Exact token counts, ITL per chunk against TPOT per token, open-loop (rate) steps and the
server-side cross-checks, from hand-built run directories with every figure worked by hand."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from analysis import plots
from analysis.compare import compare_runs
from analysis.cost import PriceChoice
from analysis.figures import run_figures
from analysis.intervals import Estimate
from analysis.load import load_run
from analysis.plan import Targets, capacity, plan_for
from analysis.prices import PriceQuote
from analysis.report import write_report
from core.errors import AnalysisError, RunDirError
from core.rundir import LoadSettings, RunDir, StepWindow, TelemetrySnapshot, TokenCount
from rigbench.cli import app


def chunked(kit, request_id: str, *, t_start: float, tokens: int = 30, per_chunk: int = 3, **changes):
    """A finished request whose server packs ``per_chunk`` tokens into each content chunk,
    decoding at 10 ms a token: the first chunk at TTFT 0.5 s, the last (tokens - per_chunk) x 10 ms later."""
    decode = (tokens - per_chunk) * 0.010
    record = kit.record(request_id, t_start=t_start, ttft=0.5, decode=decode, tokens=tokens, server_tok_s=None)
    update = {"content_chunks": tokens // per_chunk, "first_chunk_tokens": per_chunk, **changes}
    return record.model_copy(update=update)


def cut(record, **changes):
    """The same request cut before its final usage (no completion_tokens, no timings)."""
    return record.model_copy(update={"completion_tokens": None, "timings": None, **changes})


def test_itl_is_per_chunk_and_tpot_per_token_with_three_tokens_a_chunk(kit):
    record = chunked(kit, "a", t_start=kit.T0 + 101)
    step = run_figures(load_run(kit.make_run("r1", [kit.window()], {"p0": [record]}))).steps[0]
    # 30 tokens in 10 chunks over 0.27 s: 9 gaps of 30 ms between chunks; 27 tokens after the first chunk, 10 ms each
    assert step.itl_s["p50"].value == pytest.approx(0.030)
    assert step.tpot_s["p50"].value == pytest.approx(0.010)
    assert step.client_tok_s.value == pytest.approx(100.0)


def test_one_token_a_chunk_keeps_itl_tpot_and_client_rate_as_before(kit):
    # 21 tokens in 21 chunks over 2 s, first_chunk_tokens not recorded (taken as 1): both 0.1 s, 10 tok/s
    record = kit.record("a", t_start=kit.T0 + 101, ttft=0.5, decode=2.0, tokens=21)
    step = run_figures(load_run(kit.make_run("r1", [kit.window()], {"p0": [record]}))).steps[0]
    assert step.itl_s["p50"].value == pytest.approx(0.1) == step.tpot_s["p50"].value
    assert step.client_tok_s.value == pytest.approx(10.0)
    assert step.ttft_s["p50"].value == pytest.approx(0.5)
    assert step.rate is None and step.start_lag_s == {} and step.sent_rate is None


def test_a_cut_request_counts_its_streamed_tokens_not_its_chunks(kit):
    t0 = kit.T0
    # both stopped by the harness with 7 chunks of 3 tokens streamed over [101.5, 101.68], inside the window
    counted = cut(chunked(kit, "a", t_start=t0 + 101, tokens=21), streamed_tokens=21, interrupted=True)
    uncounted = cut(chunked(kit, "b", t_start=t0 + 103, tokens=21), interrupted=True)
    run = kit.make_run("r1", [kit.window()], {"p0": [counted, uncounted]})
    figures = run_figures(load_run(run))
    step = figures.steps[0]
    assert step.output_tokens == pytest.approx(21 + 7)
    assert step.token_methods == {"usage": 0, "per_chunk": 1, "tokenize": 0, "chunks": 1}
    assert step.cut_counted_by_chunks == 1
    assert any("aggregate tok/s counts 1 cut request by its content chunks" in w for w in figures.warnings)


def test_token_counts_file_is_merged_and_each_method_counted(kit):
    t0 = kit.T0
    records = [
        kit.record("usage", t_start=t0 + 101),  # completion_tokens: usage
        cut(chunked(kit, "streamed", t_start=t0 + 102, tokens=21), streamed_tokens=21, error_kind="disconnect"),
        cut(chunked(kit, "tokenized", t_start=t0 + 103, tokens=21), partial_text="x" * 40, interrupted=True),
        cut(chunked(kit, "bare", t_start=t0 + 104, tokens=21), interrupted=True),
    ]
    path = kit.make_run("r1", [kit.window()], {"p0": records})
    lines = [
        TokenCount(request_id="tokenized", streamed_tokens=20),
        TokenCount(request_id="streamed", streamed_tokens=5),
    ]
    (path / "token_counts.jsonl").write_text("".join(line.model_dump_json() + "\n" for line in lines))
    run = load_run(path)
    by_id = run.records.set_index("request_id")
    assert by_id.loc["tokenized", "streamed_tokens"] == 20 and by_id.loc["tokenized", "tokens_counted_by"] == "tokenize"
    # a per-chunk count is more exact than /tokenize: kept, and said so
    assert by_id.loc["streamed", "streamed_tokens"] == 21 and by_id.loc["streamed", "tokens_counted_by"] == "per_chunk"
    assert by_id.loc["usage", "tokens_counted_by"] == "usage" and by_id.loc["bare", "tokens_counted_by"] == "chunks"
    assert any("1 count for records that carry the server's usage or per-chunk counts" in w for w in run.warnings)
    figures = run_figures(run)
    assert figures.token_methods == {"usage": 1, "per_chunk": 1, "tokenize": 1, "chunks": 1}
    assert figures.steps[0].output_tokens == pytest.approx(21 + 21 + 20 + 7)
    text = write_report([path]).read_text()
    assert "Output tokens counted by (requests): usage 1, per-chunk counts 1, /tokenize 1, content chunks 1." in text
    assert "aggregate tok/s counts 1 cut request by its content chunks" in text


def test_a_bad_token_counts_line_names_file_and_line(kit):
    path = kit.make_run("r1", [kit.window()], {"p0": [kit.record("a", t_start=kit.T0 + 101)]})
    good = TokenCount(request_id="a", streamed_tokens=3).model_dump_json()
    (path / "token_counts.jsonl").write_text(good + "\n" + '{"request_id": "b", "streamed_tokens": -1}\n')
    with pytest.raises(RunDirError, match=r"token_counts\.jsonl:2"):
        load_run(path)


def test_records_written_before_the_method_field_get_it_derived(kit):
    t0 = kit.T0
    no_usage = kit.record("b", t_start=t0 + 102).model_copy(update={"completion_tokens": None})  # timings only
    bare = cut(kit.record("c", t_start=t0 + 103), interrupted=True)
    run = load_run(kit.make_run("r1", [kit.window()], {"p0": [kit.record("a", t_start=t0 + 101), no_usage, bare]}))
    assert list(run.records["tokens_counted_by"]) == ["usage", "usage", "chunks"]


def rate_run(kit, run_id: str = "rate", rates=(1.0, 2.0), ttft: float = 0.5, lags=(0.0, 0.01, 0.02, 0.5)):
    """An open-loop run: per step, requests intended every 1/rate s in [100, 110) + 100 s per step,
    each sent ``lag`` after its intended start (cycling through ``lags``)."""
    t0, steps, records = kit.T0, [], []
    for index, rate in enumerate(rates):
        start = t0 + 100 + index * 100
        window = StepWindow(
            index=index, users=0, rate=rate, started_at=start - 5, measure_start=start, measure_end=start + 10
        )
        steps.append(window)
        count = int(10 * rate)
        for number in range(count):
            intended = start + number / rate
            lag = lags[number % len(lags)]
            record = kit.record(
                f"{index}-{number}", step=index, users=0, t_start=intended + lag, ttft=ttft, decode=0.2 * index + 0.2
            )
            records.append(record.model_copy(update={"t_intended": intended}))
    load = LoadSettings(rate_steps=list(rates), warmup_seconds=1, measure_seconds=10, max_tokens=21)
    return kit.make_run(run_id, steps, {"p0": records}, load=load)


def test_open_loop_latency_counts_from_the_intended_start(kit):
    figures = run_figures(load_run(rate_run(kit)))
    one, two = figures.steps
    assert figures.open_loop and (one.rate, two.rate) == (1.0, 2.0) and (one.load, two.load) == (1.0, 2.0)
    assert one.load_label == "1 req/s"
    # 10 requests lagging 0, 10, 20, 500, 0, 10, 20, 500, 0, 10 ms (sorted: 0 0 0 10 10 10 20 20 500 500):
    # TTFT from t_intended = 0.5 s + lag, so its median is 0.5 + 0.01 (timestamps near 1.8e9 keep ~1 µs)
    close = {"abs": 1e-5}
    assert one.ttft_s["p50"].value == pytest.approx(0.5 + 0.01, **close)
    assert one.e2e_s["p50"].value == pytest.approx(0.5 + 0.01 + 0.2 + 0.01, **close)
    assert one.start_lag_s["p50"] == pytest.approx(0.01, **close)
    assert one.start_lag_s["max"] == pytest.approx(0.5, **close)
    # p99 by linear interpolation: rank 0.99 * 9 = 8.91 between the 9th (0.5) and 10th (0.5) lag
    assert one.start_lag_s["p99"] == pytest.approx(0.5, **close)
    # sent = starts inside the window: at 2 req/s the last request, intended at 109.5 s, lags 500 ms past the end
    assert one.sent_rate == pytest.approx(1.0) and two.sent_rate == pytest.approx(1.9)
    assert not any("users" in w for w in figures.warnings)


def test_open_loop_report_labels_steps_by_rate_and_shows_the_lag(kit):
    path = rate_run(kit)
    text = write_report([path]).read_text()
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("|"))
    assert header.split("|")[1].strip() == "rate (req/s)"
    assert "### Open-loop arrivals" in text
    assert "offered rate (req/s)" in text and "start lag p50/p99/max ms" in text
    arrivals = lines[lines.index("### Open-loop arrivals") + 4]
    cells = [cell.strip() for cell in arrivals.split("|")[1:-1]]
    assert cells[0] == "1" and cells[1] == "1.00" and cells[3] == "10.0 / 500.0 / 500.0"
    assert "TPOT per token p50/p90/p99 ms" in text and "ITL per chunk p50/p90/p99 ms" in text
    summary = json.loads((path / "summary.json").read_text())
    step = summary["runs"][0]["steps"][0]
    assert step["rate"] == 1.0 and step["users"] == 0 and step["start_lag_s"]["max"] == pytest.approx(0.5)
    assert "tpot_s" in step and "itl_s" in step


def test_plan_gives_open_loop_capacity_in_requests_per_second(kit):
    # TTFT from t_intended is 0.5 s + lag at 1 req/s; at 2 req/s make it 1.5 s
    figures = run_figures(load_run(rate_run(kit, rates=(1.0, 2.0, 4.0), lags=(0.0,))))
    slow = figures.steps[1]
    slow.ttft_s = {**slow.ttft_s, "p90": type(slow.ttft_s["p90"])(1.5, 1.4, 1.6, 20, "x")}
    targets = Targets(users=1, min_tok_s=1.0, ttft_p90_s=1.0, rate=5.0)
    cap = capacity(figures.steps, targets)
    assert cap.unit == "requests/s" and cap.per_instance == 1.0
    assert "highest offered rate meeting the targets 1 req/s" in cap.basis and "targets missed at 2 req/s" in cap.basis

    quote = PriceQuote(
        instance_type="g6.xlarge", region="us-east-1", market="on-demand", usd_per_hour=1.0, source="t", as_of="2027"
    )
    plan = plan_for(figures, PriceChoice(quote, "hypothetical"), targets)
    assert plan.instances == 5 and plan.to_dict()["requests_per_second_per_instance"] == 1.0
    # without a rate to serve, users do not size an open-loop plan
    unsized = plan_for(figures, PriceChoice(quote, "hypothetical"), Targets(users=10, min_tok_s=1.0, ttft_p90_s=1.0))
    assert unsized.instances is None and "give the requests/s to serve" in unsized.capacity.basis


def test_a_rate_run_and_a_user_run_are_not_paired(kit):
    t0 = kit.T0
    users = run_figures(load_run(kit.make_run("users", [kit.window()], {"p0": [kit.record("a", t_start=t0 + 101)]})))
    rates = run_figures(load_run(rate_run(kit)))
    with pytest.raises(AnalysisError, match="is closed loop \\(users\\) and run rate is open loop"):
        compare_runs(users, rates)
    rows = compare_runs(rates, run_figures(load_run(rate_run(kit, "rate-b", rates=(2.0,)))))
    assert [row.rate for row in rows] == [2.0]


def test_a_mixed_report_keeps_separate_tables_and_plots(kit):
    t0 = kit.T0
    users = kit.make_run("users", [kit.window()], {"p0": [kit.record("a", t_start=t0 + 101)]})
    report = write_report([users, rate_run(kit)])
    text = report.read_text()
    assert "not compared with local users: run users is closed loop (users)" in text
    assert "## Comparison" not in text
    assert (report.parent / "plots" / "aggregate_tok_s.png").exists()
    assert (report.parent / "plots" / "aggregate_tok_s-by-rate.png").exists()


def test_server_counter_granularity_and_the_timings_cross_check(kit):
    t0 = kit.T0
    # two requests decoding 20 tokens in 2 s each by the server's timings, ending at 103 and 108.5 (client clock)
    records = []
    for request_id, start in (("a", 100.5), ("b", 106.0)):
        record = kit.record(request_id, t_start=t0 + start, ttft=0.5, decode=2.0, tokens=21)
        timings = record.timings.model_copy(update={"predicted_n": 20, "predicted_ms": 2000.0})
        records.append(record.model_copy(update={"timings": timings}))
    # a third, ending at 111, half its 2 s decode inside the window
    third = kit.record("c", t_start=t0 + 108.5, ttft=0.5, decode=2.0, tokens=21)
    records.append(third.model_copy(update={"timings": third.timings.model_copy(update={"predicted_ms": 2000.0})}))
    path = kit.make_run("r1", [kit.window()], {"p0": records})
    counter = "llamacpp:tokens_predicted_total"
    run_dir = RunDir(path)
    for boundary, taken_at, tokens in (("measure", t0 + 100, 0.0), ("end", t0 + 110, 41.0)):
        run_dir.append_telemetry(
            TelemetrySnapshot(taken_at=taken_at, step=0, users=1, boundary=boundary, metrics={counter: tokens})
        )
    step = run_figures(load_run(path)).steps[0]
    # counter granularity: median successful request 21 tokens / 10 s between the snapshots
    assert step.server_counter_granularity_tok_s == pytest.approx(2.1)
    # timings: 20 + 20 + 21 / 2 tokens inside [100, 110) over 10 s
    assert step.server_timings_tok_s == pytest.approx((20 + 20 + 10.5) / 10)
    text = write_report([path]).read_text()
    assert "4.1 ±2.1" in text and "server timings tok/s (per token)" in text


def test_plots_put_users_or_offered_rate_on_the_x_axis():
    point = [(0.5, Estimate(1.0, 0.9, 1.1, 3, "x")), (2.0, Estimate(2.0, 1.8, 2.2, 3, "x"))]
    labels = []
    for open_loop in (True, False):
        figure, axes = plots.plt.subplots()
        plots._draw_on(axes, plots.PLOTS["aggregate_tok_s"], [plots.Line(0, 0, point)], open_loop)
        labels.append(axes.get_xlabel())
        plots.plt.close(figure)
    assert labels == ["offered load (requests/s)", "concurrent users"]


def test_rigbench_plan_sizes_an_open_loop_run_by_rate(kit):
    path = str(rate_run(kit, rates=(1.0, 2.0), lags=(0.0,)))
    args = ["plan", "--min-tok-s", "1", "--ttft-p90", "1", "--price-as", "g6.xlarge", path]
    sized = CliRunner().invoke(app, [*args, "--rate", "5"])
    assert sized.exit_code == 0, sized.output
    assert sized.output.startswith("5 requests/s, each >= 1 tok/s") and "instances of 2 req/s" in sized.output
    by_users = CliRunner().invoke(app, [*args, "--users", "5"])
    assert by_users.exit_code == 3 and "give the requests/s to serve" in by_users.output
    neither = CliRunner().invoke(app, args)
    assert neither.exception.exit_code == 2 and "give --users N" in str(neither.exception)


def test_a_timeline_counts_each_chunk_where_it_arrived(kit):
    """A request straddling the window start that got 15 of its 21 tokens in a burst before the
    window: the spread puts half its tokens inside, the timeline the 6 that arrived there."""
    t0 = kit.T0
    record = kit.record("burst", t_start=t0 + 98.5, ttft=0.5, decode=2.0, tokens=21)  # decodes 99..101
    chunks = [t0 + 99 + k * 0.01 for k in range(15)] + [t0 + 100.5 + k * 0.1 for k in range(6)]
    path = kit.make_run("r1", [kit.window()], {"p0": [record]})
    spread = run_figures(load_run(path)).steps[0].output_tokens
    (path / RunDir.TIMELINES).mkdir()
    (path / RunDir.TIMELINES / "p0.jsonl").write_text(json.dumps({"request_id": "burst", "chunks": chunks}) + "\n")
    timed = run_figures(load_run(path)).steps[0].output_tokens
    assert spread == pytest.approx(10.5) and timed == pytest.approx(6.0)


def test_a_resumed_sweep_counts_by_the_timelines_of_the_run_it_was_cut_in(kit):
    """The straddling request above, measured in a run a spot notice cut after that step: the resumed run's
    report still places its chunks by the first run's timeline."""
    t0 = kit.T0
    record = kit.record("burst", t_start=t0 + 98.5, ttft=0.5, decode=2.0, tokens=21)
    chunks = [t0 + 99 + k * 0.01 for k in range(15)] + [t0 + 100.5 + k * 0.1 for k in range(6)]
    first = kit.make_run("cut", [kit.window()], {"p0": [record]}, status="interrupted", last_complete_step=0,
                         linked_runs=["resumed"])
    (first / RunDir.TIMELINES).mkdir()
    (first / RunDir.TIMELINES / "p0.jsonl").write_text(json.dumps({"request_id": "burst", "chunks": chunks}) + "\n")
    later = kit.record("later", users=2, t_start=t0 + 201, ttft=0.5, decode=2.0, tokens=21)
    resumed = kit.make_run("resumed", [kit.window(0, 2, start=t0 + 200, end=t0 + 210)], {"p0": [later]},
                           resumed_from="cut")
    steps = run_figures(load_run(resumed)).steps
    assert [step.users for step in steps] == [1, 2] and steps[0].output_tokens == pytest.approx(6.0)
