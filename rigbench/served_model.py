"""The model a server on this machine serves, described in a sweep's manifest as ``rigbench local``
describes its own: a synthetic file rigbench wrote is marked so, whoever started the server.

Why: ``rigbench serve`` or a hand-started llama-server with a synthetic GGUF is swept by URL, and without
this its random text and fixed reply lengths read as a real checkpoint's in the report. Only a server on
this machine (a loopback URL) names a file that can be read here; another host's model stays unnamed.
"""

from __future__ import annotations

import functools
from pathlib import Path

from core.network import is_loopback_url
from core.rundir import ModelInfo
from llamacpp.model_facts import model_facts
from loadtest.server_description import served_model_path


def served_model(url: str) -> ModelInfo | None:
    """The served file's name, sha256, size, synthetic label and decode bytes; None when the server is on
    another machine, names no file (not llama-server), or names one that is not here."""
    if not is_loopback_url(url):
        return None
    path = served_model_path(url)
    if path is None or not Path(path).is_file():
        return None
    found = Path(path).stat()
    return file_facts(path, found.st_size, found.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def file_facts(path: str, size: int, modified_ns: int) -> ModelInfo:
    """One read of a file however many arms serve it (a sweep's arms often share the model: hashing a
    3 GB file once per arm would cost seconds each); a changed file is read again."""
    return model_facts(Path(path))
