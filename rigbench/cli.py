"""The ``rigbench`` console script: thin glue over the stages.

Commands live in ``rigbench/commands/<name>.py`` and are discovered at start-up. Every
``RigbenchError`` becomes one line on stderr, without a traceback, and the error's exit code:
2 for input refused before anything was created, 1 for a run that was made but did not complete.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from core.errors import RigbenchError
from rigbench import __version__, commands

app = typer.Typer(
    name="rigbench",
    help="Which GPU, which model, which settings, at what cost per token.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=True,
    epilog=(
        "Exit codes: 0 done; 1 a run was made but did not complete (failed or interrupted; its records are "
        "kept); 2 the input was refused before anything was created. A command's --help says what it adds."
    ),
)


def show_version(asked: bool) -> None:
    if asked:
        typer.echo(f"rigbench {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=show_version, is_eager=True, help="print rigbench's version and exit"
    ),
) -> None:
    """Which GPU, which model, which settings, at what cost per token."""


def register_commands() -> None:
    for module_info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{module_info.name}")
        register = getattr(module, "register", None)
        if register is not None:
            register(app)


register_commands()


def main() -> None:
    try:
        app()
    except RigbenchError as error:
        print(f"rigbench: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
