"""Files written whole or not at all, and the one line that says why one could not be written.

A file is written under a hidden temporary name beside it (``.<name>.<pid>.partial``, same folder,
so same filesystem) and renamed over its own name only once every byte is out: a reader, or the
next command, sees the old file or the new one, never a cut one. When writing fails (a full disk:
``ENOSPC``), the temporary is removed, the file keeps what it held, and the ``OSError`` names the
file that could not be written (a failed ``write()`` names none of its own).

The same failures reaching the CLI from anywhere else become one line too (:func:`said_in_one_line`):
a full disk, a quota, a folder one may not write or a read-only filesystem are the machine's state,
not a bug, so they are said, not traced back; any other ``OSError`` keeps its traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def whole_file(path: Path | str, mode: str = "w", *, private: bool = False, sync: bool = False) -> Iterator[IO[Any]]:
    """A handle to write ``path`` through (``mode`` ``"w"`` or ``"wb"``); ``path`` is replaced when the block
    ends without an error and left as it was when it raises. ``private``: created 0600 whatever the
    umask; ``sync``: on disk (fsync) before the rename, for a file a crash must not lose."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o666)
        with open(descriptor, mode) as handle:
            yield handle
            handle.flush()
            if sync:
                os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as error:
        with contextlib.suppress(OSError):
            temporary.unlink()
        if isinstance(error, OSError) and error.filename in (None, str(temporary)):
            error.filename = str(path)  # the file the caller asked for, not the temporary
        raise


def write_whole(path: Path | str, data: str | bytes, **options: bool) -> None:
    """``data`` as the whole of ``path`` (:func:`whole_file`'s options)."""
    with whole_file(path, "wb" if isinstance(data, bytes) else "w", **options) as handle:
        handle.write(data)


# errno values that say the machine refused the file, with what to do about each
REFUSALS = {
    errno.ENOSPC: "free space there (or give another place) and run it again",
    errno.EDQUOT: "free space within your quota there (or give another place) and run it again",
    errno.EACCES: "give yourself access to it (or give another place) and run it again",
    errno.EROFS: "the filesystem is read-only: give a place on a writable one and run it again",
}


def said_in_one_line(error: OSError) -> str | None:
    """``PATH: No space left on device (ENOSPC); free space there ...`` for an ``OSError`` in
    :data:`REFUSALS`; ``None`` for any other, which is a bug to show whole."""
    advice = REFUSALS.get(error.errno or 0)
    if advice is None:
        return None
    code = errno.errorcode.get(error.errno or 0, str(error.errno))
    where = error.filename if error.filename is not None else "a file"
    return f"{where}: {error.strerror or error} ({code}); {advice}"


def cannot_write(error: OSError) -> str:
    """``cannot write PATH: No space left on device (ENOSPC)``: the file, the reason and its errno name."""
    code = errno.errorcode.get(error.errno or 0, str(error.errno))
    where = error.filename if error.filename is not None else "a file"
    return f"cannot write {where}: {error.strerror or error} ({code})"


@contextlib.contextmanager
def unwritten_said_as(error: type[Exception], advice: str) -> Iterator[None]:
    """Within it (a ``with`` block, or a function it decorates), an ``OSError`` ends as ``error`` in one line:
    :func:`cannot_write`, then ``advice`` (what to do)."""
    try:
        yield
    except OSError as failure:
        raise error(f"{cannot_write(failure)}; {advice}") from None
