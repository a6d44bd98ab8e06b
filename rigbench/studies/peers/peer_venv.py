"""Each peer installed once in its own virtualenv under the rigbench cache (``<cache>/peers/<name>-<version>``).

Why its own: a peer's dependencies (guidellm pulls torch) never meet rigbench's, and a peer
runs with its own interpreter and none of this process's Python settings.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from core.errors import StudyError
from core.whole_files import write_whole


@dataclass(frozen=True)
class Peer:
    name: str
    version: str

    @property
    def folder(self) -> str:
        return f"{self.name}-{self.version}"


PEERS = {"servebench": Peer("servebench", "1.1.3"), "guidellm": Peer("guidellm", "0.8.1")}
INSTALLED_MARK = ".rigbench-installed"


def ensure_peer(peer: Peer, cache: Path, log: Callable[[str], None], timeout: float = 3600) -> Path:
    """The peer's virtualenv (``bin/`` has its command), made once and reused when marked whole."""
    venv = cache / peer.folder
    if (venv / INSTALLED_MARK).exists() and (venv / "bin" / "python").exists():
        return venv
    if venv.exists():
        shutil.rmtree(venv)  # a half-made install from an earlier, interrupted attempt
    venv.parent.mkdir(parents=True, exist_ok=True)
    log(f"installing {peer.name}=={peer.version} into {venv} (once; guidellm pulls torch, minutes)")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check", "-q",
         f"{peer.name}=={peer.version}"],
        capture_output=True, text=True, timeout=timeout, check=False,
    )
    if done.returncode != 0:
        lines = [line for line in (done.stderr or done.stdout).splitlines() if not line.startswith("WARNING:")]
        raise StudyError(f"pip install {peer.name}=={peer.version} failed: " + " ".join(lines[-3:])[-400:])
    write_whole(venv / INSTALLED_MARK, f"{peer.name}=={peer.version}\n")
    return venv


def installed_version(python: Path, package: str) -> str | None:
    done = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    return done.stdout.strip() or None


def peer_env(venv: Path) -> dict[str, str]:
    # the peer's own interpreter: none of this process's venv or Python search settings leak into it
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV" and not k.startswith("PYTHON")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["HF_HUB_OFFLINE"] = "1"  # nothing in these runs needs the Hub; never wait on it
    return env
