"""``rigbench models download`` records a hub file's source and terms beside its digest, as a rig does, so a
run served here from that file can name them (``hub_provenance``); a stand-in hub on 127.0.0.1 answers."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from core.profile import RigProfile
from rigbench.model_downloads import download_profile, hub_provenance

PAYLOAD = os.urandom(60_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
COMMIT = "00112233445566778899aabbccddeeff00112233"


def profile() -> RigProfile:
    return RigProfile.model_validate(
        {"name": "hubtest", "model": {"repo": "acme/model-gguf", "file": "model.gguf", "sha256": DIGEST}})


def test_a_download_here_names_its_commit_and_licence_for_the_runs_that_serve_it(fake_hub, monkeypatch,
                                                                                 tmp_path: Path) -> None:
    fake_hub.add("acme/model-gguf", "model.gguf", PAYLOAD)
    answer = {"id": "acme/model-gguf", "sha": COMMIT, "cardData": {"license": "gemma"},
              "siblings": [{"rfilename": "model.gguf", "lfs": {"sha256": DIGEST}}]}
    monkeypatch.setattr(fake_hub, "model_info", lambda repo: answer if repo == "acme/model-gguf" else None)
    said: list[str] = []
    [path] = download_profile(profile(), tmp_path, said.append)
    assert hub_provenance(path, DIGEST) == {"source": f"hf:acme/model-gguf@{COMMIT}/model.gguf", "terms": "gemma"}
    assert said[-1].endswith(f"verified; hf:acme/model-gguf@{COMMIT}/model.gguf under gemma")
    assert hub_provenance(path, "0" * 64) == {}, "other bytes under that name are another model"


def test_a_hub_that_names_no_licence_or_no_model_says_nothing_false(fake_hub, monkeypatch, tmp_path: Path) -> None:
    fake_hub.add("acme/model-gguf", "model.gguf", PAYLOAD)
    monkeypatch.setattr(fake_hub, "model_info", lambda repo: None)  # 404
    said: list[str] = []
    [path] = download_profile(profile(), tmp_path, said.append)
    assert hub_provenance(path, DIGEST) == {}
    assert any("no source or terms recorded" in line for line in said)
    monkeypatch.setattr(fake_hub, "model_info", lambda repo: {"id": repo, "sha": COMMIT, "tags": ["gguf"]})
    download_profile(profile(), tmp_path, said.append)  # present: looked up again, as nothing was recorded
    assert hub_provenance(path, DIGEST) == {"source": f"hf:acme/model-gguf@{COMMIT}/model.gguf", "terms": None}
    assert said[-1].endswith("under terms the hub does not name")
