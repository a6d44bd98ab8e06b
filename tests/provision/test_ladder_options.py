"""A ladder's settings reach the rig as a file: the question file, its sidecar and the ``shots_from`` exemplar
file go up beside it, and the file the rig's command reads names the rig's copy of the exemplars."""

from __future__ import annotations

import io
import json
from pathlib import Path
from types import SimpleNamespace

from core.quality_settings import QualityLadderSettings
from provision.quality import put_question_files
from provision.rig_paths import RigPaths


class FakeRig:
    """The connection's two calls the upload makes: ``run`` (mkdir) and ``put`` (a path or an open file)."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    def run(self, command: str, **kwargs: object) -> SimpleNamespace:
        return SimpleNamespace(ok=True, stdout="", stderr="")

    def put(self, local: str | io.BytesIO, remote: str) -> None:
        self.files[remote] = local.getvalue() if isinstance(local, io.BytesIO) else Path(local).read_bytes()


def test_the_settings_go_up_as_a_file_naming_the_rigs_copy_of_the_exemplars(tmp_path: Path) -> None:
    for name in ("questions.jsonl", "questions.jsonl.source", "shots.jsonl"):
        (tmp_path / name).write_text(name)
    paths = RigPaths("/work")
    asked = QualityLadderSettings(mode="completion", shots=5, shots_from=tmp_path / "shots.jsonl", bench=False)
    rig = FakeRig()
    remote_questions, remote_settings = put_question_files(rig, paths, tmp_path / "questions.jsonl", asked,
                                                           "ladder-x")  # type: ignore[arg-type]
    exemplars = f"{paths.results}/questions/shots.jsonl"
    assert remote_questions == f"{paths.results}/questions/questions.jsonl"
    assert rig.files[exemplars] == b"shots.jsonl" and rig.files[remote_questions + ".source"]
    handed = json.loads(rig.files[remote_settings])
    assert remote_settings == f"{paths.results}/settings/ladder-x.json"
    assert QualityLadderSettings.model_validate(handed) == asked.model_copy(update={"shots_from": Path(exemplars)})
