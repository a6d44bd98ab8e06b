"""The per-process ceiling: the highest tok/s one load process followed faithfully on this machine.

``rigbench selftest`` measures it against the ground-truth server and saves it here, under the
cache root; a sweep reads it and warns when a step asked more of a load process than that
(its figures would then measure the load generator, not the server).
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from core.cache import cache_root
from core.rundir import utc_now

CEILING_FILE_NAME = "selftest.json"


def ceiling_path() -> Path:
    return cache_root() / CEILING_FILE_NAME


def save_ceiling(ceiling_tok_s: float, processes: int, path: Path | None = None) -> dict:
    """Remember this machine's ceiling (all processes together, and per process)."""
    entry = {
        "host": socket.gethostname(),
        "processes": processes,
        "ceiling_tok_s": ceiling_tok_s,
        "per_process_tok_s": ceiling_tok_s / max(1, processes),
        "measured_at": utc_now(),
    }
    path = path or ceiling_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(entry, indent=2) + "\n")
    return entry


def load_ceiling(path: Path | None = None) -> float | None:
    """Per-process ceiling from the last selftest on this machine, if any."""
    try:
        data = json.loads((path or ceiling_path()).read_text())
    except (OSError, ValueError):
        return None
    if data.get("host") != socket.gethostname():
        return None
    value = data.get("per_process_tok_s")
    return float(value) if value else None
