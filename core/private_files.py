"""Every file rigbench writes is private to the user: 0600 files, 0700 folders.

Why one rule for all of them: run folders hold prompts, replies and server logs, reports and their CSVs
repeat them, and a folder copied off a rig (or packed into a tarball) keeps its files' modes, so a
private folder around readable files is not enough. The umask is process-wide and children inherit it
(Locust, llama-server, the build), so it is set once per command (``rigbench.cli``), not per file.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

PRIVATE_UMASK = 0o077


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """Inside, every file and folder this process or a child it starts creates is private to the user
    (0600 / 0700). Wrap a whole command, not a library call: the umask is the process's."""
    previous = os.umask(PRIVATE_UMASK)
    try:
        yield
    finally:
        os.umask(previous)
