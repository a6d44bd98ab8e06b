"""Options shared by the commands: one vocabulary, and the old spellings that still work.

Every command says the same thing the same way: ``--steps`` (user counts), ``--warmup``,
``--measure``, ``--runs-dir``, ``--context-tokens``, ``--model-file`` (a GGUF to serve) and
``--model-name`` (the name sent in requests). Where a command used another spelling, that
spelling is a hidden option that still works and says, in one line on stderr, what it is now.
"""

from __future__ import annotations

import shlex
from typing import Any, TypeVar

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


# The options of the commands that serve a profile here (local, serve, autotune), said once.
def profile_option(default: str = "tiny") -> Any:
    return typer.Option(default, "--profile", "-p", help="bundled profile name or .toml path")


def backend_option() -> Any:
    return typer.Option("auto", "--backend", help="auto, cpu or cuda")


def model_file_option() -> Any:
    return typer.Option(None, "--model-file", help="serve this GGUF instead of the profile's")


def drafter_option() -> Any:
    return typer.Option(None, "--drafter", help="drafter GGUF for speculative decoding")


def no_drafter_option() -> Any:
    return typer.Option(False, "--no-drafter", help="serve without the profile's drafter")


def server_arg_option() -> Any:
    return typer.Option(
        [], "--server-arg", help="llama-server flag(s) replacing the profile's, e.g. --server-arg='--parallel 64'"
    )


def server_overrides(items: list[str]) -> list[str]:
    """``--server-arg`` values, each shell-split (one item may hold a flag and its value)."""
    return [token for item in items for token in shlex.split(item)]

