"""rigbench compact: the committed form of a run reads back to the same figures."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from analysis.figures import run_figures
from analysis.load import load_run
from core.errors import RunDirError
from core.rundir import RunDir
from core.rundir.compact import compact_run
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
    assert result.exit_code == 0 and "0 file(s) gzipped" in result.output
