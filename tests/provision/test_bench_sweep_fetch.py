"""bench, sweep (on the rig, against its 127.0.0.1) and fetch over SSH."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from core.digest import file_sha256
from core.errors import ProvisionError
from core.network import free_port
from core.rundir import RunDir
from core.rundir.capacity_search import read_search
from loadtest.trace import trace_source
from provision.llama_bench import bench
from provision.serve import serve, stop
from provision.sweep import fetch, runs_under, sweep, upload_load

pytestmark = pytest.mark.integration


def test_bench_saves_pp_and_tg_as_json_on_the_rig(built_rig) -> None:
    rig, paths, profile, _ = built_rig
    report, path = bench(rig, profile, paths, prompt_tokens=64, gen_tokens=16, repetitions=1)
    assert set(report.summary) == {"pp64", "tg16"} and all(v > 0 for v in report.summary.values())
    saved = json.loads(Path(path).read_text())
    assert saved["summary"] == report.summary and saved["command"][-2:] == ["-o", "json"]
    assert saved["profile"] == "tiny" and saved["backend"] == "cpu" and saved["build_key"]
    threads = profile.server.args[profile.server.args.index("-t"):profile.server.args.index("-t") + 2]
    assert saved["command"][saved["command"].index("-t"):saved["command"].index("-t") + 2] == threads, \
        "llama-bench runs with the profile's threads"


def test_sweep_runs_on_the_rig_and_fetch_copies_it_home(built_rig, tmp_path: Path) -> None:
    pytest.importorskip("loadtest.sweep", reason="loadtest.sweep.run_sweep is not in this checkout yet")
    rig, paths, profile, _ = built_rig
    local_runs = tmp_path / "runs"
    with pytest.raises(ProvisionError, match="sweep: nothing is served on the rig; run the serve step first"):
        sweep(rig, profile, {"user_steps": [1]}, paths, rigbench=str(Path(sys.executable).parent / "rigbench"),
              local_runs=local_runs)
    serve(rig, profile, paths, port=free_port(), health_timeout=120)
    try:
        copied = sweep(rig, profile, {"user_steps": [1, 2], "warmup_seconds": 0.5, "measure_seconds": 2.0}, paths,
                       local_runs=local_runs, rigbench=str(Path(sys.executable).parent / "rigbench"))
    finally:
        stop(rig, paths)
    assert len(copied) == 1 and copied[0].parent == local_runs
    manifest = RunDir(copied[0]).read_manifest()
    assert manifest.status == "complete" and manifest.server.host == "127.0.0.1"
    assert manifest.build.key == built_rig[3].key and manifest.build.backend == "cpu"
    model_file = Path(paths.models, profile.model.local_name)
    assert manifest.model.sha256 == file_sha256(model_file) and manifest.model.synthetic
    assert manifest.model.size_bytes == model_file.stat().st_size and manifest.rig.kind == "local"
    # the hardware sampler ran on the rig around its sweep (the server is on its 127.0.0.1): no GPU or RAPL
    # there, each said once in the manifest, and the sampler's own cost measured
    hardware = manifest.hardware
    assert hardware is not None and hardware.gpu_source is None and hardware.cpu_source is None, hardware
    assert any("nvidia-smi" in line for line in hardware.missing), hardware.missing
    assert not any("another machine" in line for line in hardware.missing), hardware.missing
    assert hardware.started_at is not None and hardware.cpu_share is not None and hardware.cpu_share < 0.01
    remote_files = sorted(p.relative_to(paths.runs) for p in Path(paths.runs).rglob("*") if p.is_file())
    local_files = sorted(p.relative_to(local_runs) for p in local_runs.rglob("*") if p.is_file())
    assert remote_files == local_files
    records = sorted(Path(paths.runs).rglob("*.jsonl"))
    assert records and all(
        (local_runs / r.relative_to(paths.runs)).read_bytes() == r.read_bytes() for r in records)
    # fetch again: everything is already here, nothing copied, same runs.
    assert fetch(rig, paths, local_runs) == copied
    with pytest.raises(ProvisionError, match="fetch: no run nope in .* runs there: "):
        fetch(rig, paths, local_runs, ["nope"])


def test_a_trace_goes_to_the_rig_and_a_capacity_search_comes_home_with_its_probes(built_rig, tmp_path: Path) -> None:
    """The trace read here is the one the rig's sweep replays (copied there, named by its digest, the option
    rewritten to the copy); a search's folder is fetched whole, each probe's run annotated like a sweep's, and a
    second fetch keeps the annotations."""
    rig, paths, profile, _ = built_rig
    local_runs, rigbench = tmp_path / "runs", str(Path(sys.executable).parent / "rigbench")
    trace = shutil.copyfile(Path(__file__).parents[1] / "loadtest" / "data" / "short_trace.jsonl",
                            tmp_path / "chat.jsonl")
    source = trace_source(trace, 2.0)
    remote = Path(upload_load(rig, {"trace": source, "max_tokens": 8}, paths))
    sent = json.loads(remote.read_text())
    copy = Path(sent["trace"]["path"])
    assert sent["max_tokens"] == 8 and sent["trace"]["sha256"] == source.sha256 and sent["trace"]["speed"] == 2.0
    assert copy.parent == Path(paths.root) / "traces" and copy.name == f"{file_sha256(trace)[:16]}-chat.jsonl"
    assert copy.read_bytes() == trace.read_bytes()
    serve(rig, profile, paths, port=free_port(), health_timeout=120)
    try:
        load = {"warmup_seconds": 0.5, "measure_seconds": 1.0, "slo": {"ttft_p90": 0.00001}, "max_tokens": 4,
                "drain_seconds": 1.0}
        (searched,) = sweep(rig, profile, load, paths, local_runs=local_runs, rigbench=rigbench,
                            search=["--find-max", "users:2", "--max-load", "4"])
    finally:
        stop(rig, paths)
    search = read_search(searched)
    probes = runs_under(searched)
    # a target no server meets: the first probe misses and ends the search, whatever the rig's speed
    assert search.result is not None and search.result.reason == "first_missed", search
    assert [probe.load for probe in search.probes] == [2] and len(probes) == 1
    model_file = Path(paths.models, profile.model.local_name)
    for probe in probes:
        probe_manifest = RunDir(probe).read_manifest()
        assert probe_manifest.build is not None and probe_manifest.model.sha256 == file_sha256(model_file)
    assert fetch(rig, paths, local_runs) == [searched]
    assert all(RunDir(probe).read_manifest().build is not None for probe in probes), "a re-fetch keeps them"
