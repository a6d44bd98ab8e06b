"""SSH to the rig: host keys pinned per stack file, and each bad input a clear ProvisionError."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from core.errors import ProvisionError
from core.network import free_port
from provision.connection import connect, run
from provision.toolkit import ensure_build_tools, toolkit

pytestmark = pytest.mark.integration


def test_first_contact_pins_the_host_key_then_checks_it(sshd, tmp_path: Path) -> None:
    known_hosts = tmp_path / "stacks" / "dev"
    c = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key), known_hosts=known_hosts)
    toolkit(c)
    c.close()
    assert known_hosts.read_text().split() == [f"[{sshd.host}]:{sshd.port}", *sshd.host_key_line.split()]
    again = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key), known_hosts=known_hosts,
                    strict_host_key=True)
    assert run(again, "echo pinned").stdout.strip() == "pinned"
    again.close()


def test_unknown_host_key_in_strict_mode_is_refused(sshd, tmp_path: Path) -> None:
    c = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key),
                known_hosts=tmp_path / "empty", strict_host_key=True)
    with pytest.raises(ProvisionError, match=r"toolkit: host key of .* is not in .*empty"):
        toolkit(c)


def test_wrong_host_key_is_refused_with_the_file_to_fix(sshd, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = " ".join((tmp_path / "other.pub").read_text().split()[:2])
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{sshd.host}]:{sshd.port} {other}\n")
    c = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(sshd.key), known_hosts=known_hosts)
    with pytest.raises(ProvisionError, match=r"toolkit: host key of root@127.0.0.1:\d+ does not match .*ssh-keygen -R"):
        toolkit(c)
    assert known_hosts.read_text().count("\n") == 1, "a mismatching key must not be added"


def test_refused_key_names_the_key(sshd, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "stranger")], check=True)
    c = connect(sshd.host, user=sshd.user, port=sshd.port, key_filename=str(tmp_path / "stranger"),
                known_hosts=sshd.known_hosts(tmp_path / "known_hosts"), strict_host_key=True)
    with pytest.raises(ProvisionError, match=r"toolkit: root@127.0.0.1:\d+ refused the SSH key .*stranger"):
        toolkit(c)


def test_unreachable_host_names_host_and_port(sshd, tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    c = connect("127.0.0.1", user="root", port=port, key_filename=str(sshd.key), known_hosts=tmp_path / "kh",
                connect_timeout=3)
    with pytest.raises(ProvisionError, match=rf"toolkit: cannot reach root@127.0.0.1:{port} over SSH"):
        toolkit(c)


def test_toolkit_without_gpu_says_so_and_takes_the_cpu_path(rig, capsys) -> None:
    first = toolkit(rig)
    second = toolkit(rig)
    assert first.gpu is None and second == first
    assert "no NVIDIA GPU" in first.message and "for the CPU" in first.message
    assert "no NVIDIA GPU" in capsys.readouterr().out
    assert ensure_build_tools(rig) == [], "cmake, g++, ninja and curl are here: nothing to install"
    with pytest.raises(ProvisionError, match="toolkit: no NVIDIA GPU.*expected a GPU instance"):
        toolkit(rig, require_gpu=True)
