"""Options shared by the commands: one vocabulary, each name with one meaning.

Every command says the same thing the same way: ``--steps`` (user counts), ``--warmup``,
``--measure``, ``--runs-dir``, ``--context-tokens``, ``--model-file`` (a GGUF to serve),
``--model-name`` (the name sent in requests), ``--url`` (a running server, ``NAME=URL`` when there
are several) and ``NAME=FLAGS`` for a served configuration (``--arm`` of an eval, ``--trial`` of
autotune), read by :func:`parse_named_flags`.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import typer

from core.errors import UsageError

RUNS_DIR_HELP = "folder the run directories go in"


def folder_to_write(path: Path | str | None, flag: str) -> Path | None:
    """A folder a command will create things in: refused, before anything is made, when it or the
    nearest part of it that exists is a file, or cannot be written."""
    if path is None:
        return None
    path = Path(path)
    for existing in (path, *path.parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            named = "" if existing == path else f" ({existing} is a file)"
            raise UsageError(f"{flag} {path}: not a folder{named}; give a folder (created if missing)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {path}: {existing} cannot be written by this user")
        break
    return path


def folder_option(default: Any, flag: str, help: str) -> Any:  # noqa: A002 - typer's own keyword
    """``--runs-dir`` or a folder ``--out``, checked by :func:`folder_to_write` as it is parsed."""
    return typer.Option(default, flag, help=help, callback=lambda value: folder_to_write(value, flag))


def runs_dir_option(default: Path | str = Path("runs"), help: str = RUNS_DIR_HELP) -> Any:  # noqa: A002
    return folder_option(Path(default), "--runs-dir", help)


def parse_named_flags(items: list[str], option: str) -> list[tuple[str, list[str]]]:
    """``NAME=FLAGS`` items, in order: a served configuration's name and its llama-server flags
    (shell-quoted; empty for the profile as it is). Names must differ: each names a run."""
    parsed: list[tuple[str, list[str]]] = []
    for item in items:
        name, equals, flags = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise UsageError(f"{option}: cannot read {item!r}; expected NAME=SERVER FLAGS, "
                             "e.g. 'drafter=--model-draft d.gguf'")
        try:
            parsed.append((name, shlex.split(flags)))
        except ValueError as error:
            raise UsageError(f"{option} {item!r}: cannot read the flags: {error}") from None
    names = [name for name, _ in parsed]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"{option}: {repeated[0]!r} is given twice; name each configuration once")
    return parsed


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


def mps_option() -> Any:
    return typer.Option(
        None, "--mps", metavar="auto|on|off", help="CUDA's Multi-Process Service for the replicas: auto (on when two "
        "or more share a GPU and nvidia-cuda-mps-control is found), on (refused where it is missing) or off "
        "(default: the profile's [server] mps)")


def server_overrides(items: list[str]) -> list[str]:
    """``--server-arg`` values, each shell-split (one item may hold a flag and its value)."""
    return [token for item in items for token in shlex.split(item)]
