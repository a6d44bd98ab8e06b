"""What a run's manifest says of a GGUF file served on this machine, whoever started the server.

Why one function: ``rigbench local`` describes the file it serves, and ``rigbench sweep`` describes the
file a server on this machine says it serves (llama-server's ``/props`` ``model_path``); a synthetic
model must be named so in both, or a hand-started server's random text and fixed reply lengths would
read as a real checkpoint's in the report.

Why remembered: the gguf package reads a header field by field in Python, and a large vocabulary makes
that slow (Gemma 3's 262k tokens: about ten seconds of a core), which every sweep of that file paid, twice.
The header is read once and what it says is kept beside the file's digest, while the file and the code
that reads it stay the same.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib.metadata import version
from pathlib import Path
from typing import Any

import llamacpp.decode_bytes
import llamacpp.synthetic_models
from core.digest import remembered, remembered_sha256
from core.errors import LlamaCppError
from core.rundir import DecodeBytes, ModelInfo
from llamacpp.decode_bytes import gguf_decode_bytes, gguf_reader
from llamacpp.synthetic_models import synthetic_label

HEADER_STORE = "gguf-headers.json"


def model_facts(path: Path, *, decode_bytes: bool = True) -> ModelInfo:
    """The file's name, sha256, size, synthetic label (from its header: rigbench's synthetic files say so)
    and, when asked, the bytes one decode step reads (the roofline). Provenance (repo, source, terms) is the
    caller's to add: the file does not know it."""
    header = remembered(path, HEADER_STORE, header_facts, version=reader_version())
    label = header["label"]
    recorded = header["decode_bytes"]
    return ModelInfo(
        name=path.name,
        sha256=remembered_sha256(path),
        size_bytes=path.stat().st_size,
        synthetic=label is not None,
        label=label,
        decode_bytes=DecodeBytes.model_validate(recorded) if decode_bytes and recorded is not None else None,
    )


def header_facts(path: Path) -> dict[str, Any]:
    """The synthetic label and the decode bytes, from one read of the header. No decode bytes where this gguf
    package cannot read the file's table (llama-server may still serve it; the report then says the roofline is
    left out); no label for a file that is no GGUF."""
    try:
        reader = gguf_reader(path)
    except LlamaCppError:
        return {"label": None, "decode_bytes": None}
    try:
        counted = gguf_decode_bytes(path, reader).model_dump(mode="json")
    except LlamaCppError:
        counted = None
    return {"label": synthetic_label(path, reader), "decode_bytes": counted}


@cache
def reader_version() -> str:
    """What a remembered header depends on besides the file: the gguf package's version and the code that reads
    the label and counts the bytes, so a change to either reads the file again."""
    code = hashlib.sha256()
    for module in (llamacpp.decode_bytes, llamacpp.synthetic_models):
        code.update(Path(module.__file__).read_bytes())
    return f"gguf {version('gguf')} code {code.hexdigest()[:16]}"
