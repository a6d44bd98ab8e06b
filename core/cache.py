"""The one cache root: builds, sources, models, prices and the load generator's ceiling live under it.

``RIGBENCH_CACHE`` wins, then ``$XDG_CACHE_HOME/rigbench``, then ``~/.cache/rigbench``. The
standalone build script (``llamacpp/build_script.py``) is always handed its folder explicitly,
so this is the only place the rule is written.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    configured = os.environ.get("RIGBENCH_CACHE")
    if configured:
        return Path(configured)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "rigbench"
