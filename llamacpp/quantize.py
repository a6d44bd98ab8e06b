"""Rungs of a quantization ladder made with the pinned llama-quantize, cached.

A rung is cached under ``<cache>/quantized/<source digest>/<llama.cpp source>/<rung>.gguf``:
the same source file, type and llama.cpp always give the same bytes, so a second ladder (or
a test) reuses it, and a ladder on another machine can be checked file by file by sha256.
The source may itself be quantized (the real model here ships as Q4_1), so requantizing is
allowed and the ladder's manifest says what the top rung is.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.digest import file_sha256
from core.errors import LlamaCppError

DEFAULT_RUNGS = "F16,Q8_0,Q6_K,Q5_K_M,Q4_K_M,Q4_0,Q3_K_M,Q2_K"  # widest first: the ladder of the article
TYPE_LINE = re.compile(r"^\s+\d+\s+or\s+([A-Z0-9_]+)\s+:", re.MULTILINE)


@dataclass(frozen=True)
class Rung:
    name: str
    path: Path
    size_bytes: int
    sha256: str
    seconds: float | None  # None: taken from the cache


def known_types(quantize: Path | str) -> list[str]:
    """The type names this llama-quantize accepts (from its ``--help``)."""
    result = subprocess.run([str(quantize), "--help"], capture_output=True, text=True, check=False)
    return TYPE_LINE.findall(result.stdout + result.stderr)


def check_rungs(rungs: list[str], quantize: Path | str) -> None:
    """Refuse a rung name llama-quantize does not know, before anything is quantized."""
    known = known_types(quantize)
    unknown = [rung for rung in rungs if rung not in known]
    if unknown:
        raise LlamaCppError(f"--rungs: llama-quantize knows no {', '.join(unknown)}; it knows {', '.join(known)}")


def rung_folder(source_sha256: str, build: BuildManifest, cache: Path | None = None) -> Path:
    source_id = build.source.replace(":", "-")[:24]
    return (cache or cache_root()) / "quantized" / source_sha256[:16] / source_id


def quantize_rung(
    source: Path,
    source_sha256: str,
    rung: str,
    build: BuildManifest,
    *,
    cache: Path | None = None,
    threads: int | None = None,
) -> Rung:
    """The rung's file, quantized from ``source`` the first time and reused after."""
    folder = rung_folder(source_sha256, build, cache)
    target = folder / f"{rung}.gguf"
    digest_file = target.with_suffix(".sha256")
    if target.exists() and digest_file.exists():
        return Rung(rung, target, target.stat().st_size, digest_file.read_text().strip(), None)
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")  # two processes may make one rung
    command = [build.binary("llama-quantize"), "--allow-requantize", str(source), str(partial), rung]
    if threads:
        command.append(str(threads))
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    seconds = round(time.monotonic() - started, 2)
    if result.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-5:])
        raise LlamaCppError(f"llama-quantize {rung} of {source.name} exited {result.returncode}:\n{tail}")
    digest = file_sha256(partial)
    digest_file.with_name(f"{digest_file.name}.{os.getpid()}").write_text(digest + "\n")
    partial.rename(target)
    digest_file.with_name(f"{digest_file.name}.{os.getpid()}").rename(digest_file)
    return Rung(rung, target, target.stat().st_size, digest, seconds)


def file_type(path: Path) -> str | None:
    """The GGUF's ``general.file_type`` as llama-quantize names it (``Q4_1``), or None if unset."""
    import gguf  # imported here: reading a model's metadata is rare, gguf's import is not free

    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    if field is None:
        return None
    name = gguf.LlamaFileType(field.contents()).name
    return name.removeprefix("MOSTLY_") if name != "ALL_F32" else "F32"
