"""A run's JSONL files read in either form they are kept in: plain while the run appends to them, gzipped
(``<name>.gz``) once ``rigbench compact`` has packed the ended run for committing.

Why one module: records shards, telemetry and the hardware shards are all opened here, so a packed file reads
back line for line as its plain original did, and a reader that finds both forms does the same for each kind of
file. It imports no model, so ``core.rundir.hardware`` (which the models import) can use it too.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

# What reading a damaged or cut-short gzip stream raises (a plain file never does).
GZIP_ERRORS: tuple[type[Exception], ...] = (EOFError, zlib.error, gzip.BadGzipFile)


def packed(path: Path) -> Path:
    """The gzipped form of ``path``: the same name with ``.gz`` added."""
    return path.with_name(path.name + ".gz")


def forms(path: Path) -> list[Path]:
    """The forms of the JSONL file ``path`` (its plain name) that exist: ``<name>.gz``, then ``<name>``.

    Where both exist both are read, as a records shard's ``.jsonl`` and ``.jsonl.gz`` both are, so that nothing on
    disk is skipped unseen; the packed one first, since lines appended after packing are the later ones."""
    return [form for form in (packed(path), path) if form.is_file()]


def open_text(path: Path) -> IO[str]:
    """``path`` for reading as UTF-8 text, through gzip where its name ends in ``.gz``."""
    if path.name.endswith(".gz"):
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")  # noqa: SIM115


def iter_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, is_last) of a plain or gzipped JSONL file: ``is_last`` lets a reader forgive a last
    line cut short by a writer that was killed mid-line, and nothing else."""
    with open_text(path) as handle:
        previous: tuple[int, str] | None = None
        for number, line in enumerate(handle, 1):
            if previous is not None:
                yield previous[0], previous[1], False
            previous = (number, line)
        if previous is not None:
            yield previous[0], previous[1], True
