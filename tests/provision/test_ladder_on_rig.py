"""The ladder step over real SSH: ``rigbench quality ladder`` runs on the rig, its folder comes home."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.errors import ProvisionError
from core.quality_settings import QualityLadderSettings
from core.rundir.quality_files import LadderDir, write_question_file
from provision.quality import ladder
from quality.generator import generate_questions

pytestmark = pytest.mark.integration
RIGBENCH = str(Path(sys.executable).parent / "rigbench")


def test_the_ladder_runs_on_the_rig_and_is_copied_home(rig, rig_paths, build_cache, tmp_path: Path) -> None:
    questions = tmp_path / "three.jsonl"
    write_question_file(questions, generate_questions(3, seed=5), "test: three generated questions")
    local_runs = tmp_path / "runs"
    with pytest.raises(ProvisionError, match="ladder: no rigbench at /nowhere/rigbench on the rig; run the project"):
        ladder(rig, rig_paths, questions, "smollm2", "Q8_0", "x", rigbench="/nowhere/rigbench", local_runs=local_runs)
    # one server thread: over SSH the rig's llama-server gets no OMP_WAIT_POLICY=PASSIVE, and beside make test's
    # other workers a two-thread one spins at every barrier (ten times this test's time alone)
    quick = QualityLadderSettings(bench=False, max_tokens=16, server_args=["-t", "1"])
    folder = ladder(rig, rig_paths, questions, "smollm2", "Q8_0,Q4_0", "ladder-test", local_runs=local_runs,
                    settings=quick, rigbench=RIGBENCH, cache=build_cache)
    assert folder == local_runs / "ladder-test"
    manifest = LadderDir(folder).read_manifest()
    assert manifest.status == "complete" and [r.name for r in manifest.rungs] == ["Q8_0", "Q4_0"]
    assert manifest.questions.source == "test: three generated questions"  # the sidecar went to the rig too
    remote = Path(rig_paths.runs) / "ladder-test"
    remote_files = sorted(p.relative_to(remote) for p in remote.rglob("*") if p.is_file())
    assert remote_files == sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())
    assert (folder / "report.md").exists() and (folder / "rungs" / "Q4_0" / "answers.jsonl").exists()
