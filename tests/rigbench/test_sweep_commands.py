"""``rigbench sweep`` (arms, processes) and ``rigbench selftest`` end to end on loopback."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from analysis.report import write_report
from core.rundir import RunDir
from core.sweep_result import SweepResult
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.telemetry import parse_metrics
from rigbench.cli import app

pytestmark = pytest.mark.integration


def test_sweep_two_arms_two_processes_make_linked_runs_with_a_shard_per_process(tmp_path: Path) -> None:
    """The load from a file with a flag over it; the runs made named in the --result file."""
    config = GroundTruthConfig(ttft_ms=5, itl_ms=5, model="default")
    load = tmp_path / "load.toml"
    load.write_text("user_steps = [2, 4]\nwarmup_seconds = 5\nmeasure_seconds = 1.5\nmax_tokens = 8\n")
    with GroundTruthServer(config, tmp_path / "a.jsonl") as a, GroundTruthServer(config, tmp_path / "b.jsonl") as b:
        result = CliRunner().invoke(app, [
            "sweep", "--url", f"off={a.base_url}", "--url", f"draft2={b.base_url}", "--load", str(load),
            "--warmup", "1", "--processes", "2", "--runs-dir", str(tmp_path / "runs"), "--no-progress",
            "--result", str(tmp_path / "made.json")])
    assert result.exit_code == 0, result.output
    runs = sorted((tmp_path / "runs").iterdir())
    manifests = [RunDir(path).read_manifest() for path in runs]
    assert [m.load.arm for m in manifests] == ["off", "draft2"]
    assert {(m.load.warmup_seconds, m.load.measure_seconds, m.load.max_tokens) for m in manifests} == {(1.0, 1.5, 8)}
    assert manifests[0].request_origins.max_tokens == "file"
    assert SweepResult.read(tmp_path / "made.json") == SweepResult(runs=[str(path) for path in runs])
    assert manifests[0].linked_runs == [runs[1].name] and manifests[1].linked_runs == [runs[0].name]
    for path, manifest in zip(runs, manifests, strict=True):
        assert manifest.status == "complete" and manifest.load.processes == 2
        assert len(RunDir(path).shard_paths()) == 2  # one shard per worker process
        assert (path / "locust_stats.csv").is_file() and not (path / "locust_failures.csv").exists(), (
            "Locust's tables are kept, its empty failure table is not")
        records = RunDir(path).read_records()
        assert {r.users for r in records if r.phase == "measure"} == {2, 4}
        # requests still streaming at the sweep's end are interrupted by the harness, without a count
        assert {r.completion_tokens for r in records if not r.interrupted} == {8}
        assert all(r.error_kind is None for r in records)
    # it ends with the headline their report opens with, and the command that writes that report
    report = write_report(runs, tmp_path / "report").read_text()
    headline = report.split("## At a glance\n\n", 1)[1].split("\n\n## ", 1)[0].strip()
    assert headline.startswith("Across 2 arms of ") and "\n\n- off: Best aggregate output " in headline
    assert result.output.endswith(
        f"At a glance:\n{headline}\n\nwrite the report: rigbench report {runs[0]} {runs[1]}\n"), result.output


def test_a_server_that_is_not_llama_server_gets_no_profile_and_no_guessed_slots(tmp_path: Path) -> None:
    # a server that takes only its own model name, lists it at /v1/models, and has no /slots or /metrics
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="served-7b", llama_endpoints=False)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        result = CliRunner().invoke(app, ["sweep", "--url", server.base_url, "--steps", "8", "--warmup", "0.5",
                                          "--measure", "1", "--runs-dir", str(tmp_path / "runs"), "--no-progress"])
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "runs").iterdir()
    manifest = RunDir(path).read_manifest()
    assert manifest.profile == "none" and path.name.split("-")[1] == "sweep"
    assert manifest.server.parallel_slots is None and manifest.server.slots_from is None
    assert (manifest.load.max_tokens, manifest.load.temperature, manifest.load.ignore_eos) == (256, 0.0, False)
    assert not [warning for warning in manifest.warnings if "parallel slots" in warning], manifest.warnings
    # the manifest names the model name sent, and says every request setting was rigbench's own but that one
    assert manifest.server.model_name == "served-7b"
    assert manifest.request_origins.model_dump() == {"model_name": "server", "max_tokens": "rigbench",
                                                     "temperature": "rigbench", "ignore_eos": "rigbench",
                                                     "cache_prompt": "rigbench"}
    assert manifest.server.description.described_by == []  # no /props, and /v1/models names no context
    records = RunDir(path).read_records()
    assert records and not [record for record in records if record.error_kind], "requests name the listed model"
    with GroundTruthServer(GroundTruthConfig(model="default", slots=3), tmp_path / "t2.jsonl") as server:
        result = CliRunner().invoke(app, ["sweep", "--url", server.base_url, "--steps", "1", "--warmup", "1",
                                          "--measure", "0.5", "--runs-dir", str(tmp_path / "with-slots"),
                                          "--no-progress", "--max-tokens", "4"])
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "with-slots").iterdir()
    server_info = RunDir(path).read_manifest().server
    assert (server_info.parallel_slots, server_info.slots_from) == (3, "server")


def test_a_sweep_asks_for_the_servers_model_list_once(tmp_path: Path) -> None:
    # /v1/models names the model to send, answers the health check of a server without /health and says
    # the context a request holds: one answer serves all three
    config = GroundTruthConfig(ttft_ms=2, itl_ms=1, model="served-7b", max_model_len=4096)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        result = CliRunner().invoke(app, ["sweep", "--url", server.base_url, "--steps", "1", "--warmup", "1",
                                          "--measure", "0.5", "--max-tokens", "4", "--no-progress",
                                          "--runs-dir", str(tmp_path / "runs")])
        asked = parse_metrics(httpx.get(f"{server.base_url}/metrics", timeout=10).text)
    assert result.exit_code == 0, result.output
    (path,) = (tmp_path / "runs").iterdir()
    server_info = RunDir(path).read_manifest().server
    assert server_info.model_name == "served-7b"
    assert server_info.description.model_dump() == {"described_by": ["/v1/models"], "context_tokens": 4096}
    assert asked["rigbench_truth_model_list_requests_total"] == 1


def test_sweep_without_a_server_is_one_clear_line() -> None:
    result = CliRunner().invoke(app, ["sweep", "--steps", "1"])
    assert result.exit_code != 0
    assert "pass --url" in str(result.exception)


def test_selftest_writes_its_table_and_capacity(tmp_path: Path) -> None:
    out = tmp_path / "selftest.md"
    ceiling_home = tmp_path / "home"
    result = CliRunner(env={"HOME": str(ceiling_home)}).invoke(
        app,
        [
            "selftest",
            "--steps",
            "1,4",
            "--warmup",
            "1",
            "--measure",
            "2",
            "--reply-tokens",
            "32",
            "--runs-dir",
            str(tmp_path / "runs"),
            "--output",
            str(out),
            "--no-progress",
            "--no-save",
        ],
    )
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "tok_s_error_pct" in text and "highest aggregate rate followed" in text
    assert "4 users x 100 tok/s" in text
    assert json.loads((next((tmp_path / "runs").iterdir()) / "manifest.json").read_text())["status"] == "complete"


def test_a_reply_longer_than_the_servers_context_is_refused_with_ignore_eos_and_warned_without(
    tmp_path: Path,
) -> None:
    config = GroundTruthConfig(ttft_ms=2, itl_ms=1, model="served-7b", llama_endpoints=False, max_model_len=512)
    common = ["--steps", "1", "--warmup", "1", "--measure", "0.5", "--no-progress", "--max-tokens", "600"]
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        refused = CliRunner().invoke(app, ["sweep", "--url", server.base_url, *common, "--ignore-eos",
                                           "--runs-dir", str(tmp_path / "refused")])
        warned = CliRunner().invoke(app, ["sweep", "--url", server.base_url, *common, "--model-name", "served-7b",
                                          "--runs-dir", str(tmp_path / "warned")])
    assert refused.exception.exit_code == 2  # the console script's exit, for a RigbenchError
    assert str(refused.exception) == (
        f"--max-tokens 600: {server.base_url} holds 512 tokens per request (its /v1/models max_model_len), prompt "
        "included; with --ignore-eos every reply would end at the context's edge, not at --max-tokens: ask for "
        "fewer tokens, or serve a longer context")
    assert not (tmp_path / "refused").exists()
    assert warned.exit_code == 0, warned.output
    (path,) = (tmp_path / "warned").iterdir()
    manifest = RunDir(path).read_manifest()
    assert manifest.server.description.model_dump() == {"described_by": ["/v1/models"], "context_tokens": 512}
    assert manifest.request_origins.model_name == "flag" and manifest.request_origins.max_tokens == "flag"
    assert any("ends at the context's edge" in warning for warning in manifest.warnings), manifest.warnings


def test_drawn_lengths_that_may_not_fit_the_servers_context_are_refused_before_any_run(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=2, itl_ms=1, model="served-7b", max_model_len=512)
    common = ["--steps", "1", "--warmup", "0", "--measure", "0.5", "--no-progress", "--runs-dir", str(tmp_path / "r")]
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        drawn = CliRunner().invoke(app, ["sweep", "--url", server.base_url, *common,
                                         "--prompt-length", "uniform:10-300", "--output-length", "uniform:8-300"])
        sessions = CliRunner().invoke(app, ["sweep", "--url", server.base_url, *common, "--sessions", "--turns", "2-3",
                                            "--prompt-length", "uniform:100-150", "--output-length", "uniform:80-100"])
    assert str(drawn.exception) == (
        f"--prompt-length and --output-length: the longest request may hold 300 prompt and 300 reply tokens, but "
        f"{server.base_url} holds 512 tokens per request (its /v1/models max_model_len): lower the bounds (max=), or "
        "serve a longer context")
    assert str(sessions.exception) == (
        "--sessions --turns 2-3 --prompt-length --output-length: the last turn of a 3-turn conversation holds 540 to "
        f"750 tokens (3 prompts of 100-150 tokens, 3 replies of 80-100), but {server.base_url} holds 512 tokens per "
        "request (its /v1/models max_model_len): every conversation that long would end at the context's edge; "
        "lower --turns or the lengths, or serve a longer context")
    assert not (tmp_path / "r").exists()
