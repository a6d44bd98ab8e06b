"""Options shared by the commands: one vocabulary, and the old spellings that still work.

Every command says the same thing the same way: ``--steps`` (user counts), ``--warmup``,
``--measure``, ``--runs-dir``, ``--context-tokens``, ``--model-file`` (a GGUF to serve) and
``--model-name`` (the name sent in requests). Where a command used another spelling, that
spelling is a hidden option that still works and says, in one line on stderr, what it is now.
"""

from __future__ import annotations

from typing import TypeVar

import typer

T = TypeVar("T")

STEPS_HELP = "user counts, one step each, e.g. 1,2,4,8"
RUNS_DIR_HELP = "folder the run directories go in"


def renamed(new: str, value: T, old: str, old_value: T | None) -> T:
    """``value`` of the option ``new``, or of its old spelling ``old`` when that was given."""
    if old_value is None:
        return value
    typer.echo(f"rigbench: warning: {old} is now {new}; the old spelling will go in a later release", err=True)
    return old_value


def old_spelling(name: str) -> object:
    """A hidden option for a renamed one: accepted, not shown in --help."""
    return typer.Option(None, name, hidden=True)
