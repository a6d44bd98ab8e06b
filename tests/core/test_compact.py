"""rigbench compact: the committed form of a run reads back to the same figures."""

from __future__ import annotations

import re

import pytest
from typer.testing import CliRunner

from analysis.figures import DECODE_COUNTER, TOKENS_COUNTER, run_figures
from analysis.load import load_run
from core.errors import RunDirError
from core.rundir import RunDir, TelemetrySnapshot
from core.rundir.check import check_run
from core.rundir.compact import compact_run
from core.rundir.hardware import (
    CPU_ENERGY_SAMPLES,
    GPU_SAMPLES,
    CpuEnergySample,
    GpuSample,
    append_samples,
    read_cpu_energy_samples,
    read_gpu_samples,
    shard,
)
from rigbench.cli import app


def test_compacted_run_has_the_same_records_and_figures(kit) -> None:
    records = [kit.record(f"r{i}", t_start=kit.T0 + 100 + i, tokens=20 + i) for i in range(5)]
    path = kit.make_run("c1", [kit.window()], {"p0": records[:3], "p1": records[3:]})
    (path / "llama-server.log").write_text("server says hello\n")
    (path / "llama-server-1.log").write_text("a replica says hello\n")
    (path / "mps").mkdir()
    (path / "mps" / "control.log").write_text("the MPS control daemon says hello\n")
    before = RunDir(path).read_records()
    figures_before = run_figures(load_run(path)).steps

    written = compact_run(path)

    assert sorted(p.name for p in written) == ["control.log.gz", "llama-server-1.log.gz", "llama-server.log.gz",
                                               "p0.jsonl.gz", "p1.jsonl.gz"]
    assert not list(path.glob("records/*.jsonl")) and not (path / ".space-reserve").exists()
    assert RunDir(path).read_records() == before
    assert run_figures(load_run(path)).steps == figures_before


def test_compact_refuses_a_running_run_and_a_non_run(kit, tmp_path) -> None:
    path = kit.make_run("c2", [kit.window()], {"p0": [kit.record("a", t_start=kit.T0 + 101)]}, status="running")
    with pytest.raises(RunDirError, match="running"):
        compact_run(path)
    assert list(path.glob("records/*.jsonl"))  # nothing touched
    result = CliRunner().invoke(app, ["compact", str(tmp_path)])
    assert result.exit_code != 0 and "manifest.json" in (result.output + str(result.exception))


def test_compact_never_overwrites_and_the_command_goes_on_to_the_next_run(kit) -> None:
    first = kit.make_run("c3", [kit.window()], {"p0": [kit.record("a", t_start=kit.T0 + 101)]})
    second = kit.make_run("c4", [kit.window()], {"p0": [kit.record("b", t_start=kit.T0 + 101)]})
    (first / "records" / "p0.jsonl.gz").write_bytes(b"an earlier session's records")
    with pytest.raises(RunDirError, match="p0.jsonl.gz already exist"):
        compact_run(first)
    assert (first / "records" / "p0.jsonl").exists()  # nothing touched
    assert (first / "records" / "p0.jsonl.gz").read_bytes() == b"an earlier session's records"

    result = CliRunner().invoke(app, ["compact", str(first), str(second)])
    assert result.exit_code == 1
    assert "not compacted" in result.output and (second / "records" / "p0.jsonl.gz").exists()


def test_a_ladder_is_compacted_rung_by_rung_and_grades_the_same(tmp_path) -> None:
    """A committed ladder, unpacked as a ladder leaves it (answers and server logs plain), packed again."""
    import gzip
    import shutil
    from pathlib import Path

    from analysis.quality_report import load_ladder

    committed = Path(__file__).resolve().parents[2] / "runs/quality-cpu-gemma3-2026-12-03/ladder"
    ladder = shutil.copytree(committed, tmp_path / "ladder")
    for packed in ladder.glob("rungs/*/answers.jsonl.gz"):
        packed.with_suffix("").write_bytes(gzip.decompress(packed.read_bytes()))
        packed.unlink()
        (packed.parent / "server.log").write_text("llama-server says hello\n")
    right_before = {rung.name: sum(a.right for a in rung.result.answers.values()) for rung in load_ladder(ladder)[1]}

    written = compact_run(ladder)

    assert len(written) == 2 * len(right_before) and all(path.name.endswith(".gz") for path in written)
    assert not list(ladder.glob("rungs/*/answers.jsonl")) and not list(ladder.glob("rungs/*/server.log"))
    assert {rung.name: sum(a.right for a in rung.result.answers.values())
            for rung in load_ladder(ladder)[1]} == right_before
    assert right_before["F16"] == 74
    result = CliRunner().invoke(app, ["compact", str(ladder)])  # packed already: nothing left to do
    assert result.exit_code == 0 and "0 files gzipped" in result.output


def sampled_run(kit, run_id: str):
    """A finished run with what a live run appends to beside its records: telemetry at the window's edges (the
    token and decode counters), GPU samples (power, energy counter, clocks) and RAPL counters through it."""
    records = [kit.record(f"r{i}", t_start=kit.T0 + 99 + i * 0.5, tokens=21) for i in range(20)]
    path = kit.make_run(run_id, [kit.window()], {"p0": records[:10], "p1": records[10:]})
    run = RunDir(path)
    for boundary, at, tokens, decodes in (("measure", kit.T0 + 100, 1_000.0, 400.0),
                                          ("end", kit.T0 + 110, 1_420.0, 700.0)):
        run.append_telemetry(TelemetrySnapshot(taken_at=at, step=0, users=1, boundary=boundary, slots_total=4,
                                               metrics={TOKENS_COUNTER: tokens, DECODE_COUNTER: decodes}))
    times = [kit.T0 + 90 + tenth / 10 for tenth in range(301)]
    append_samples(shard(path, GPU_SAMPLES), [
        GpuSample(t=t, gpu=0, power_w=250.0, energy_j=1_000.0 + 250.0 * (t - times[0]), sm_clock_mhz=1_980.0,
                  throttle_reasons=0x4 if n % 2 else 0) for n, t in enumerate(times)])
    append_samples(shard(path, CPU_ENERGY_SAMPLES), [
        CpuEnergySample(t=t, domain="package-0", energy_j=35.0 * (t - times[0])) for t in times])
    return path


def everything_read(path, out) -> dict[str, object]:
    """What each reader makes of the run: the telemetry and hardware readers, `rigbench check` and the files
    `rigbench report` writes."""
    checked = check_run(path)
    report = CliRunner().invoke(app, ["report", str(path), "--out", str(out)])
    assert report.exit_code == 0, report.output
    check = CliRunner().invoke(app, ["check", str(path)])
    return {
        "telemetry": RunDir(path).read_telemetry(),
        "gpu": read_gpu_samples(path),
        "cpu": read_cpu_energy_samples(path),
        "check": (check.exit_code, checked.summary(), checked.telemetry.good, checked.findings),
        "check lines": [line for line in check.output.splitlines() if not line.startswith("shard")],
        "report.md": (out / "report.md").read_text(),
        "summary.json": re.sub(r'"generated_at": "[^"]*"', "", (out / "summary.json").read_text()),
    }


def test_a_compacted_runs_telemetry_and_hardware_shards_read_report_and_check_the_same(kit, tmp_path) -> None:
    path = sampled_run(kit, "sampled")
    before = everything_read(path, tmp_path / "report")
    assert len(before["telemetry"]) == 2 and len(before["gpu"]) == 301 and len(before["cpu"]) == 301
    assert "telemetry  2 snapshots" in before["check lines"]
    # what the report takes from each: the counters' tok/s, the GPU's clocks and slowdowns, the energy
    assert '"server_counter_tok_s": 42.0' in before["summary.json"] and '"cpu_j_per_token"' in before["summary.json"]
    assert "sw_power_cap 50%" in before["report.md"]

    written = compact_run(path)

    assert sorted(p.relative_to(path).as_posix() for p in written) == [
        "hardware/cpu_energy.jsonl.gz", "hardware/gpu.jsonl.gz", "records/p0.jsonl.gz", "records/p1.jsonl.gz",
        "telemetry.jsonl.gz"]
    assert not (path / "telemetry.jsonl").exists() and not list(path.glob("hardware/*.jsonl"))
    (tmp_path / "report").rename(tmp_path / "report-plain")
    assert everything_read(path, tmp_path / "report") == before


def test_a_reader_finding_both_forms_reads_both_the_packed_one_first(kit) -> None:
    """Lines the writers append after packing land in a plain file beside the .gz; both are read, the packed
    lines first, none skipped."""
    path = sampled_run(kit, "both")
    compact_run(path)
    packed_telemetry, packed_gpu = RunDir(path).read_telemetry(), read_gpu_samples(path)
    later = TelemetrySnapshot(taken_at=kit.T0 + 200, step=0, users=1, boundary="end", error="appended later")
    RunDir(path).append_telemetry(later)
    append_samples(shard(path, GPU_SAMPLES), [GpuSample(t=kit.T0 + 200, gpu=0, power_w=1.0)])

    assert (path / "telemetry.jsonl").exists() and (path / "hardware" / "gpu.jsonl").exists()  # plain, as live
    assert RunDir(path).read_telemetry() == [*packed_telemetry, later]
    assert read_gpu_samples(path) == [*packed_gpu, GpuSample(t=kit.T0 + 200, gpu=0, power_w=1.0)]
    checked = check_run(path)
    assert checked.healthy and checked.telemetry.good == 3
    with pytest.raises(RunDirError, match="gpu.jsonl.gz, telemetry.jsonl.gz already exist"):  # nor packed over
        compact_run(path)


def test_a_damaged_packed_telemetry_or_hardware_shard_is_named_not_a_crash(kit) -> None:
    path = sampled_run(kit, "damaged")
    compact_run(path)
    for name in ("telemetry.jsonl.gz", "hardware/gpu.jsonl.gz"):
        whole = (path / name).read_bytes()
        (path / name).write_bytes(whole[: len(whole) // 2])  # cut short, as by a copy that stopped

    assert any(w.startswith("telemetry.jsonl.gz unreadable") for w in load_run(path).warnings)  # the form on disk
    checked = check_run(path)
    assert not checked.healthy and checked.damaged[0].where == "telemetry.jsonl.gz"
    with pytest.raises(RunDirError, match=r"gpu\.jsonl\.gz: the gzip stream is damaged or cut short"):
        read_gpu_samples(path)


def test_a_runs_timelines_and_token_counts_are_packed_and_read_back_the_same(kit) -> None:
    """The chunks' arrival times (--timeline) and the cut requests' /tokenize counts are packed too, read back as
    they were, and a later count replaces a packed one rather than sitting beside it."""
    import json

    import numpy as np

    from analysis.figures import add_request_metrics
    from analysis.load import read_token_counts
    from analysis.timelines import ChunkArrivals
    from core.rundir import TokenCount

    records = [kit.record(f"r{i}", t_start=kit.T0 + 99 + i, tokens=21) for i in range(4)]
    path = kit.make_run("timed", [kit.window()], {"p0": records})
    run = RunDir(path)
    (path / RunDir.TIMELINES).mkdir()
    (path / RunDir.TIMELINES / "p0.jsonl").write_text("".join(
        json.dumps({"request_id": record.request_id, "chunks": [record.t_first_token + n * 0.1 for n in range(21)]})
        + "\n" for record in records))
    run.write_token_counts([TokenCount(request_id="r0", streamed_tokens=7)])
    frame = add_request_metrics(load_run(path).records)
    before = (ChunkArrivals.from_runs([path], frame), run.read_token_counts(),
              read_token_counts(path / RunDir.TOKEN_COUNTS, []))

    written = compact_run(path)

    assert {"p0.jsonl.gz", "token_counts.jsonl.gz"} <= {p.name for p in written}
    assert not (path / RunDir.TOKEN_COUNTS).exists() and not (path / RunDir.TIMELINES / "p0.jsonl").exists()
    arrivals, counts, read = (ChunkArrivals.from_runs([path], frame), run.read_token_counts(),
                              read_token_counts(path / RunDir.TOKEN_COUNTS, []))
    assert np.array_equal(arrivals.times, before[0].times) and arrivals.request_ids == before[0].request_ids
    assert counts == before[1] and read == before[2] == {"r0": 7}
    run.write_token_counts([TokenCount(request_id="r0", streamed_tokens=8)])  # counted again after packing
    assert not (path / "token_counts.jsonl.gz").exists() and run.read_token_counts()["r0"].streamed_tokens == 8
