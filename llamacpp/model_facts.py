"""What a run's manifest says of a GGUF file served on this machine, whoever started the server.

Why one function: ``rigbench local`` describes the file it serves, and ``rigbench sweep`` describes the
file a server on this machine says it serves (llama-server's ``/props`` ``model_path``); a synthetic
model must be named so in both, or a hand-started server's random text and fixed reply lengths would
read as a real checkpoint's in the report.
"""

from __future__ import annotations

from pathlib import Path

from core.digest import remembered_sha256
from core.errors import LlamaCppError
from core.rundir import DecodeBytes, ModelInfo
from llamacpp.decode_bytes import gguf_decode_bytes
from llamacpp.synthetic_models import synthetic_label


def model_facts(path: Path, *, decode_bytes: bool = True) -> ModelInfo:
    """The file's name, sha256, size, synthetic label (from its header: rigbench's synthetic files say so)
    and, when asked, the bytes one decode step reads (the roofline). Provenance (repo, source, terms) is the
    caller's to add: the file does not know it."""
    label = synthetic_label(path)
    return ModelInfo(
        name=path.name,
        sha256=remembered_sha256(path),
        size_bytes=path.stat().st_size,
        synthetic=label is not None,
        label=label,
        decode_bytes=recorded_decode_bytes(path) if decode_bytes else None,
    )


def recorded_decode_bytes(path: Path) -> DecodeBytes | None:
    """The model's decode bytes for the manifest (the roofline), or None when this gguf package cannot
    read its table: llama-server may still serve it, and the report then says the roofline is left out."""
    try:
        return gguf_decode_bytes(path)
    except LlamaCppError:
        return None
