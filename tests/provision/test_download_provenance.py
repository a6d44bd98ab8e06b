"""A hub download's source and terms, recorded on the rig beside its digest and carried into the manifests
of the runs that served it; the stand-in hub on 127.0.0.1 (HF_ENDPOINT) answers the model info too."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from core.profile import RigProfile
from core.rundir import RunDir
from provision.download import download, model_paths
from provision.run_metadata import annotate_runs, model_info
from provision.toolkit import read_gpu

pytestmark = pytest.mark.integration

PAYLOAD = os.urandom(200_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
COMMIT = "0123456789abcdef0123456789abcdef01234567"
FILE_PATH = "/acme/model-gguf/resolve/main/model.gguf"


def profile() -> RigProfile:
    return RigProfile.model_validate(
        {"name": "hubtest", "model": {"repo": "acme/model-gguf", "file": "model.gguf", "sha256": "unknown"}})


def answer_model_info(hub, monkeypatch, card: dict | None = None, tags: list[str] | None = None,
                      sha256: str = DIGEST) -> None:
    """Have the stand-in hub answer ``/api/models/acme/model-gguf?blobs=true`` as the hub does: the commit,
    the card, the tags and each file's LFS sha256."""
    info = {"id": "acme/model-gguf", "sha": COMMIT, "tags": tags or ["gguf"],
            "siblings": [{"rfilename": "README.md"},
                         {"rfilename": "model.gguf", "lfs": {"sha256": sha256, "size": len(PAYLOAD)}}]}
    if card is not None:
        info["cardData"] = card
    monkeypatch.setattr(hub, "model_info", lambda repo: info if repo == "acme/model-gguf" else None)


def manifest_model(rig, rig_paths, kit):
    """The model entry of a run's manifest once the rig's facts are written into it (as after a sweep)."""
    digests = json.loads(Path(rig_paths.known_digests).read_text())
    spec = profile()
    facts = {"build": None, "gpu": read_gpu(rig),
             "model": model_info(rig, spec.model, model_paths(spec, rig_paths)[0], digests)}
    run = kit.make_run("hub-run", [kit.window()], {})
    annotate_runs([run], facts)
    return RunDir(run).read_manifest().model


def test_a_sweep_of_a_hub_model_names_its_commit_file_and_licence(rig, rig_paths, fake_hub, kit, monkeypatch) -> None:
    fake_hub.files[FILE_PATH] = PAYLOAD
    answer_model_info(fake_hub, monkeypatch, {"license": "gemma"}, tags=["gguf", "license:gemma"])
    outcome = download(rig, profile(), rig_paths)["model"]
    assert outcome["source"] == f"hf:acme/model-gguf@{COMMIT}/model.gguf" and outcome["terms"] == "gemma"
    model = manifest_model(rig, rig_paths, kit)
    assert (model.sha256, model.repo) == (DIGEST, "acme/model-gguf")
    assert model.source == f"hf:acme/model-gguf@{COMMIT}/model.gguf" and model.terms == "gemma"
    asked = (len(fake_hub.requests), len(fake_hub.info_requests))
    assert asked[1] >= 1, "the source and terms came from the hub's model info"
    download(rig, profile(), rig_paths)
    again = (len(fake_hub.requests), len(fake_hub.info_requests))
    assert again == asked, "bytes whose source is recorded are neither fetched nor looked up"


def test_a_hub_that_names_no_licence_leaves_the_terms_unsaid(rig, rig_paths, fake_hub, kit, monkeypatch) -> None:
    fake_hub.files[FILE_PATH] = PAYLOAD
    answer_model_info(fake_hub, monkeypatch)
    download(rig, profile(), rig_paths)
    model = manifest_model(rig, rig_paths, kit)
    assert model.source == f"hf:acme/model-gguf@{COMMIT}/model.gguf" and model.terms is None


def test_a_hub_without_model_info_records_nothing_until_it_answers(rig, rig_paths, fake_hub, kit, capsys,
                                                                 monkeypatch) -> None:
    fake_hub.files[FILE_PATH] = PAYLOAD
    monkeypatch.setattr(fake_hub, "model_info", lambda repo: None)  # 404: no such model
    download(rig, profile(), rig_paths)
    model = manifest_model(rig, rig_paths, kit)
    assert model.sha256 == DIGEST and model.source is None and model.terms is None
    assert "no source or terms recorded" in capsys.readouterr().err
    answer_model_info(fake_hub, monkeypatch, {"license": "apache-2.0"})
    again = download(rig, profile(), rig_paths)["model"]
    assert not again["downloaded"] and again["terms"] == "apache-2.0"


def test_a_commit_that_lists_other_bytes_is_not_named(rig, rig_paths, fake_hub, kit, monkeypatch) -> None:
    fake_hub.files[FILE_PATH] = PAYLOAD
    answer_model_info(fake_hub, monkeypatch, {"license": "apache-2.0"}, sha256="f" * 64)  # main moved on
    assert "source" not in download(rig, profile(), rig_paths)["model"]
    model = manifest_model(rig, rig_paths, kit)
    assert model.source is None and model.terms is None
