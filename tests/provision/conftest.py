"""The private sshd that stands in for a rig, and a connection to it per test.

The sshd is the rehearsal's (``rigbench.studies.rehearsal.sshd``): this machine's OpenSSH server
(``make sshd`` installs it) on 127.0.0.1 on a free port with its own config, host key and
authorized key in a temp folder, for the whole session. Each test gets a connection whose
known_hosts file pins that host key (strict: an unknown key is an error), and its own remote work
folder standing in for /opt/dlami/nvme.
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from core.cache import cache_root
from core.network import free_ports
from provision.connection import connect
from provision.rig_paths import RigPaths
from rigbench.studies.rehearsal.sshd import SYSTEM_SSHD, PrivateSshd, private_sshd


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory):
    if not os.access(SYSTEM_SSHD, os.X_OK):
        pytest.fail(f"{SYSTEM_SSHD} is missing: run `make sshd` (apt-get install openssh-server)")
    with private_sshd(tmp_path_factory.mktemp("sshd"), binary=SYSTEM_SSHD) as server:
        yield server



@pytest.fixture()
def rig_paths(tmp_path: Path) -> RigPaths:
    """This test's own work folder on the rig (the rig is this machine, over SSH)."""
    return RigPaths(work=str(tmp_path / "nvme"))


@pytest.fixture()
def rig(sshd: PrivateSshd, tmp_path: Path):
    """A Fabric connection to the private sshd with its host key pinned (strict)."""
    c = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key),
                known_hosts=sshd.known_hosts(tmp_path / "known_hosts"), strict_host_key=True)
    yield c
    c.close()


@pytest.fixture(scope="session")
def build_cache() -> str:
    """The cache the shared CPU build lives in: the rig's build reuses it instead of rebuilding."""
    return str(cache_root())


@pytest.fixture()
def built_rig(rig, rig_paths, llama_build, build_cache, tmp_path):
    """A rig folder with the (cached) CPU build and the tiny model in place."""
    from core.profile import load_profile
    from llamacpp.build import BUILD_SCRIPT
    from provision.build import build
    from provision.download import download
    from rigbench.provision_steps import synthetic_files

    profile = load_profile("tiny")
    manifest = build(rig, profile, rig_paths, build_script=BUILD_SCRIPT, cache=build_cache)
    download(rig, profile, rig_paths, synthetic_files=synthetic_files(profile, tmp_path))
    return rig, rig_paths, profile, manifest


def server_on(port: int) -> psutil.Process | None:
    """The llama-server process serving ``port`` (not its supervisor)."""
    for process in psutil.process_iter(["name", "cmdline"]):
        command = process.info["cmdline"] or []
        if process.info["name"] == "llama-server" and "--port" in command and \
                command[command.index("--port") + 1] == str(port):
            return process
    return None


@pytest.fixture
def replica_ports() -> SimpleNamespace:
    """Ports for replicas and the llama-server on one (test modules cannot import conftest in importlib mode)."""
    return SimpleNamespace(free_ports=free_ports, server_on=server_on)
