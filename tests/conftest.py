"""Shared fixtures: the real llama-server (cached CPU build) serving the tiny synthetic model."""

from __future__ import annotations

from pathlib import Path

import pytest

from provision.llamacpp_build import build
from provision.local_server import LocalServer
from provision.synthetic_models import write_synthetic_model
from rigbench.profile import load_profile


@pytest.fixture(scope="session")
def llama_build() -> dict:
    """The CPU build manifest of the pinned llama.cpp (built once, then cached)."""
    return build(backend="cpu")


@pytest.fixture(scope="session")
def llama_server_binary(llama_build: dict) -> Path:
    return Path(llama_build["binaries"]["llama-server"])


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_synthetic_model(tmp_path_factory.mktemp("models") / "tiny.gguf", preset="tiny")


@pytest.fixture(scope="session")
def llama_server(llama_server_binary: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A running llama-server with the tiny profile's arguments on a free loopback port."""
    profile = load_profile("tiny")
    args = ["-m", str(tiny_model), *profile.server.args]
    log = tmp_path_factory.mktemp("server") / "llama-server.log"
    with LocalServer(llama_server_binary, args, log_path=log) as server:
        yield server
