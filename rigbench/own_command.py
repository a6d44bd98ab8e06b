"""This rigbench as a command line for child processes, so a child runs the same code as its parent.

The console script beside this interpreter (its virtualenv) when there is one, else this
interpreter running the CLI's entry point (``rigbench.cli`` has no ``__main__`` block, so
``python -m rigbench.cli`` would run nothing).
"""

from __future__ import annotations

import sys
from pathlib import Path


def rigbench_program() -> list[str]:
    beside = Path(sys.executable).with_name("rigbench")
    if beside.exists():
        return [str(beside)]
    return [sys.executable, "-c", "from rigbench.cli import main; main()"]
