"""A large file's sha256 is read once and remembered while the file is the same; a rewrite is read again."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from core import digest
from core.digest import remembered_sha256


def test_a_digest_is_remembered_until_the_file_changes(tmp_path: Path, monkeypatch) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"weights" * 1000)
    reads = []
    real = digest.file_sha256
    monkeypatch.setattr(digest, "file_sha256", lambda path: reads.append(path) or real(path))
    first = remembered_sha256(model, tmp_path / "cache")
    assert first == hashlib.sha256(b"weights" * 1000).hexdigest()
    assert remembered_sha256(model, tmp_path / "cache") == first and len(reads) == 1
    model.write_bytes(b"other weights")
    os.utime(model, ns=(1, 2))  # a rewrite moves the modification time
    assert remembered_sha256(model, tmp_path / "cache") == hashlib.sha256(b"other weights").hexdigest()
    assert len(reads) == 2
    assert len((tmp_path / "cache" / "digests.json").read_text().strip().splitlines()) <= 3, "one entry per path"
