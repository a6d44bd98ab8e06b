"""File sha256, read in 1 MiB blocks (model files are gigabytes), and what is read from a large file remembered
for files read again."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.cache import cache_root
from core.whole_files import write_whole

BLOCK = 1 << 20


def file_sha256(path: Path | str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def remembered(path: Path | str, store: str, compute: Callable[[Path], Any], *, version: str = "",
               cache: Path | None = None) -> Any:
    """``compute(path)`` (a JSON value) for a large file read again and again: computed once, then taken from
    ``<cache>/<store>`` while the file's path, size, modification time and inode, and ``version`` (what computed
    it), are the same. A file rewritten in place changes its modification time, so it is read again."""
    path = Path(path).resolve()
    status = path.stat()
    key = f"{path}|{status.st_size}|{status.st_mtime_ns}|{status.st_ino}" + (f"|{version}" if version else "")
    file = (cache or cache_root()) / store
    try:
        known = json.loads(file.read_text())
    except (OSError, ValueError):
        known = {}
    if key in known:
        return known[key]
    value = compute(path)
    known = {k: v for k, v in known.items() if not k.startswith(f"{path}|")} | {key: value}
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        write_whole(file, json.dumps(known, indent=0))
    except OSError:
        pass  # a read-only cache only costs the next reader the same read
    return value


def remembered_sha256(path: Path | str, cache: Path | None = None) -> str:
    """The sha256 of a large file read again and again (the model a sweep describes at its start), remembered in
    ``<cache>/digests.json``."""
    return remembered(path, "digests.json", file_sha256, cache=cache)
