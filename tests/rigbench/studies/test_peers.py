"""The load-generator comparison (``rigbench study peers``): its pure parts, the load syntax, the
truth-log arithmetic, the peers' command lines and result files, and the table; no tools run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigbench.fidelity import TruthEntry, read_truth, tokens_sent
from rigbench.studies.peers.cells import Cell, busy_span, compare_cell, truth_ttft_ms
from rigbench.studies.peers.cpu_trace import CpuTrace
from rigbench.studies.peers.loads import Durations, Load, parse_loads, truth_config
from rigbench.studies.peers.report import side_by_side
from rigbench.studies.peers.tools import (
    GuidellmTool,
    ServebenchTool,
    ToolReport,
    ToolRun,
    guidellm_command,
    parse_guidellm,
    parse_servebench,
    rigbench_command,
    servebench_command,
)


def test_loads_parse_users_rate_chunk_size_and_jitter() -> None:
    assert parse_loads("64x100, 64x100:k3:j0.5,256x200") == [
        Load(64, 100.0), Load(64, 100.0, 3, 0.5), Load(256, 200.0)]
    assert Load(64, 100.0, 3, 0.5).name == "64 x 100 tok/s K=3 jitter ±0.5"
    for bad in ("64", "64x100:q2", "0x100", "8x100:j1", "32x100:p0", "32x100:p3", ""):
        with pytest.raises(ValueError):
            parse_loads(bad)


def test_an_open_loop_load_offers_its_share_of_a_queueing_servers_capacity(tmp_path: Path) -> None:
    """32 slots, a reply of 50 ms + 127 x 10 ms = 1.32 s: 24.24 replies/s; 80% of it is 19.39 req/s,
    given to every tool as a Poisson rate, against a truth server that queues past 32 replies."""
    load = parse_loads("32x100:p0.8")[0]
    assert load.rate == 19.39 and load.name == "Poisson 19.39 req/s (80% of 32 slots x 100 tok/s K=1)"
    durations = Durations(warmup=3.0, measure=15.0)
    assert durations.seconds == 18.0
    rigbench = rigbench_command("http://h", load, durations, tmp_path)
    assert rigbench[rigbench.index("--rates") + 1] == "19.39" and "--steps" not in rigbench
    assert rigbench[rigbench.index("--arrival") + 1] == "poisson"
    servebench = servebench_command(tmp_path, "http://h", load, durations, tmp_path / "o.json")
    assert servebench[servebench.index("--rate") + 1] == "19.39" and "--concurrency" not in servebench
    guidellm = guidellm_command(tmp_path, "http://h", load, durations, tmp_path / "d", tmp_path / "o")
    assert "kind=poisson,rate=19.39,warmup=3" in guidellm
    config = truth_config(load)
    assert (config.queue, config.slots) == (True, 32) and truth_config(Load(32, 100.0)).queue is False


def test_a_log_without_token_counts_is_one_token_a_send(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    log.write_text(
        json.dumps({"request_id": "a", "t_received": 1.0, "sends": [1.05, 1.08], "fault": "none"}) + "\n"
        + json.dumps({"request_id": "b", "t_received": 2.0, "sends": [2.07], "tokens": [3], "fault": "client_gone"})
        + "\n\n")
    entries = read_truth(log)
    assert [e.tokens for e in entries] == [[1, 1], [3]]
    assert entries[1].fault == "client_gone"
    assert read_truth(tmp_path / "missing.jsonl") == []


def entry(request_id: str, received: float, sends: list[float], tokens: list[int], fault: str) -> TruthEntry:
    return TruthEntry(request_id=request_id, t_received=received, sends=sends, tokens=tokens, fault=fault)


def entries() -> list[TruthEntry]:
    return [
        entry("preflight", 0.0, [0.05, 0.06], [1, 1], "none"),  # a check well before the load
        entry("a", 10.0, [10.07, 10.10, 10.13], [3, 3, 2], "none"),
        entry("b", 10.5, [10.58, 10.61], [3, 3], "client_gone"),
        entry("c", 11.0, [], [], "client_gone"),  # cut before its first chunk
    ]


def test_busy_span_starts_at_the_load_when_the_tool_says_where_it_began() -> None:
    assert busy_span(entries()) == (0.0, 10.61)
    assert busy_span(entries(), after=5.0) == (10.0, 10.61)
    assert busy_span(entries(), after=20.0) is None


def test_tokens_and_chunks_in_a_window_count_each_chunk_at_its_send_time() -> None:
    assert tokens_sent(entries(), 10.0, 10.6) == (11, 4)  # a's three chunks and b's first
    assert tokens_sent(entries(), 0.0, 100.0) == (16, 7)
    # TTFT of requests received in the window that got a chunk; c got none
    assert truth_ttft_ms(entries(), 10.0, 12.0) == pytest.approx([70.0, 80.0])


def test_cpu_between_two_times_is_linear_between_samples_and_clamped_outside() -> None:
    trace = CpuTrace([(0.0, 1.0), (1.0, 1.5), (3.0, 3.5)])
    assert trace.at(0.5) == pytest.approx(1.25)
    assert trace.at(-1.0) == 1.0 and trace.at(9.0) == 3.5
    assert trace.between(1.0, 2.0) == pytest.approx(1.0)
    assert CpuTrace().between(0.0, 1.0) == 0.0


def test_a_cell_sets_each_figure_against_the_truth_over_the_tools_window() -> None:
    load = Load(2, 100.0, k=3)
    report = ToolReport(ttft_p50_ms=80.0, tok_s=10.0, itl_p50_ms=30.0, itl_unit="chunk", tpot_p50_ms=10.0,
                        window=(10.0, 11.0), load_start=5.0)
    cpu = CpuTrace([(10.0, 0.0), (10.61, 0.061)])
    cell = compare_cell("tool", load, report, entries(), cpu)
    assert cell.ok
    assert cell.truth["tok_s"] == pytest.approx(14.0)  # 14 tokens sent in [10, 11)
    assert cell.tok_s_error_pct == pytest.approx((10.0 - 14.0) / 14.0 * 100)
    assert cell.ttft_p50_error_ms == pytest.approx(80.0 - 75.0)
    assert cell.truth["itl_ms_per_chunk"] == pytest.approx(30.0)
    # CPU over the busy span from the load's start (the pre-flight left out): 61 ms over 0.61 s, 5 chunks
    assert cell.cpu_pct == pytest.approx(10.0)
    assert cell.cpu_ms_per_1k_chunks == pytest.approx(61.0 / 5 * 1000)
    nothing = compare_cell("tool", load, report, [], cpu)
    assert not nothing.ok and "no chunks" in nothing.error


def test_servebench_and_guidellm_result_files_give_their_own_figures() -> None:
    servebench = {"levels": [{"duration": 18.2, "summary": {
        "ttft": {"p50": 0.0551}, "tpot": {"p50": 0.01001}, "itl": {"p50": 0.0101},
        "output_throughput": 6100.0, "completed": 900, "failed": 1}}]}
    report = parse_servebench(servebench)
    assert (report.ttft_p50_ms, report.itl_p50_ms, report.itl_unit) == pytest.approx((55.1, 10.1, "chunk"))
    assert report.tok_s == 6100.0 and report.window is None and report.requests_failed == 1

    guidellm = {"benchmarks": [{
        "scheduler_metrics": {"start_time": 100.0, "measure_start_time": 103.0, "measure_end_time": 118.0},
        "metrics": {
            "request_totals": {"successful": 800, "errored": 0},
            "time_to_first_token_ms": {"successful": {"median": 74.0}},
            "inter_token_latency_ms": {"successful": {"median": None, "percentiles": {"p50": 9.9}}},
            "time_per_output_token_ms": {"successful": {"median": 10.4}},
            "output_tokens_per_second": {"successful": {"mean": 590.0}, "total": {"mean": 762.0}},
        }}]}
    report = parse_guidellm(guidellm)
    assert (report.ttft_p50_ms, report.itl_p50_ms, report.tpot_p50_ms, report.tok_s) == (74.0, 9.9, 10.4, 762.0)
    assert report.window == (103.0, 118.0) and report.load_start == 100.0 and report.itl_unit == "token"


def test_the_table_shows_a_failed_tool_in_its_cells_and_the_truth_in_the_first_column() -> None:
    load = Load(2, 100.0, k=3)
    report = ToolReport(80.0, 10.0, 30.0, "chunk", 10.0, window=(10.0, 11.0))
    good = compare_cell("rigbench", load, report, entries(), CpuTrace())
    bad = Cell("guidellm", load.name, ok=False, error="install failed: no network")
    table = side_by_side([load], {("rigbench", load.slug): good, ("guidellm", load.slug): bad},
                         ["rigbench", "servebench", "guidellm"])
    lines = table.splitlines()
    header = [c.strip() for c in lines[0].split("|")[1:-1]]
    assert header == ["load (truth server)", "rigbench", "servebench", "guidellm"]
    assert len(lines) == 2 + 7
    assert "truth 75.0 ms" in lines[2] and "+5.0" in lines[2]
    tpot_error = next(line for line in lines if "TPOT p50 error" in line)
    # the send log's per-token times: a (10.13 - 10.07) / 5 = 12 ms, b 0.03 / 3 = 10 ms; median 11
    assert "against each run's send log, median 11.00" in tpot_error and "-1.00" in tpot_error
    assert "30.00 per chunk" in table and "error: install failed: no network" in lines[2]
    assert lines[3].rstrip("| ").endswith("-")  # the error once a load, a dash below it
    assert "error: not run" in table  # servebench had no cell


def test_each_peers_adapter_runs_from_its_folder_with_its_own_interpreter_and_reads_its_own_file(
        tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/somewhere/else")
    venv, folder = tmp_path / "venv", tmp_path / "cell"
    folder.mkdir()
    run = ToolRun("http://h", Load(8, 100.0), Durations(warmup=1.0, measure=4.0), folder)
    servebench = ServebenchTool(venv)
    assert servebench.command(run)[0] == str(venv / "bin" / "servebench") and servebench.cwd(run) == folder
    env = servebench.env()
    assert env["PATH"].startswith(str(venv / "bin")) and "PYTHONPATH" not in env and env["HF_HUB_OFFLINE"] == "1"
    (folder / "run.json").write_text(json.dumps({"levels": [{"summary": {
        "ttft": {"p50": 0.05}, "tpot": {"p50": 0.01}, "itl": {"p50": 0.01}, "output_throughput": 800.0}}]}))
    assert servebench.read(run).tok_s == 800.0

    guidellm = GuidellmTool(venv)
    command = guidellm.command(run)
    assert "kind=concurrent,streams=8,warmup=1" in command
    prompts = [json.loads(line) for line in (folder / "prompts.jsonl").read_text().splitlines()]
    assert len(prompts) == 1000 and {p["output_tokens_count"] for p in prompts} == {128}  # rows never run out


def test_a_truth_log_line_with_a_count_missing_for_a_send_is_refused(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    log.write_text(json.dumps({"request_id": "a", "t_received": 1.0, "sends": [1.05, 1.08], "tokens": [2]}) + "\n")
    with pytest.raises(ValueError, match="2 sends but 1 token counts"):
        read_truth(log)
    one = entry("a", 1.0, [1.05, 1.08, 1.14], [1, 2, 2], "none")
    assert (one.ttft_s, one.mean_gap_s, one.tpot_s) == pytest.approx((0.05, 0.045, 0.09 / 4))
    assert entry("c", 1.0, [], [], "client_gone").ttft_s is None and entry("d", 1.0, [1.1], [1], "none").tpot_s is None
