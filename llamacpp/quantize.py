"""llama-quantize, run one way: a GGUF to another type, and the cached rungs of a ladder.

Every caller (the ladder, the synthetic Gemma 4 writer, the GPU study) goes through
``quantize_file``: it writes to a part file renamed only when llama-quantize succeeded, so a
killed or failed run never leaves a file that a later run would take as done, and a failure
says what llama-quantize printed last.

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

import gguf

from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.digest import file_sha256
from core.errors import LlamaCppError
from core.whole_files import write_whole

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


def quantize_file(
    binary: Path | str,
    source: Path,
    target: Path,
    type_name: str,
    *,
    allow_requantize: bool = False,
    threads: int | None = None,
    log_path: Path | None = None,
) -> float:
    """Quantize ``source`` to ``target`` as ``type_name``; the seconds it took.

    llama-quantize's own rules decide which tensors keep their type. Its output (stdout and
    stderr, in order) goes to ``log_path`` when one is given.
    """
    partial = target.with_name(f"{target.name}.{os.getpid()}.part")  # two processes may make one file
    command = [str(binary), *(["--allow-requantize"] if allow_requantize else []), str(source), str(partial), type_name]
    if threads:
        command.append(str(threads))
    started = time.monotonic()
    result = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, check=False)
    seconds = round(time.monotonic() - started, 2)
    if log_path is not None:
        write_whole(log_path, result.stdout)
    if result.returncode != 0 or not partial.exists():
        partial.unlink(missing_ok=True)
        tail = "\n".join(result.stdout.strip().splitlines()[-5:])
        raise LlamaCppError(f"llama-quantize {type_name} of {source.name} exited {result.returncode}:\n{tail}")
    partial.rename(target)
    return seconds


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
    seconds = quantize_file(build.binary("llama-quantize"), source, target, rung, allow_requantize=True,
                            threads=threads)
    digest = file_sha256(target)
    written = digest_file.with_name(f"{digest_file.name}.{os.getpid()}")
    write_whole(written, digest + "\n")
    written.rename(digest_file)  # the digest appears whole, after its file: a rung without one is made again
    return Rung(rung, target, target.stat().st_size, digest, seconds)


def file_type(path: Path) -> str | None:
    """The GGUF's ``general.file_type`` as llama-quantize names it (``Q4_1``), or None if unset."""
    field = gguf.GGUFReader(str(path)).fields.get("general.file_type")
    if field is None:
        return None
    name = gguf.LlamaFileType(field.contents()).name
    return name.removeprefix("MOSTLY_") if name != "ALL_F32" else "F32"
