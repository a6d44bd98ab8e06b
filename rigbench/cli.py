"""The ``rigbench`` console script: thin glue over the stages.

Commands live in ``rigbench/commands/<name>.py`` and are discovered at start-up. Every
``RigbenchError`` becomes one line on stderr and exit code 2, without a traceback.
"""

from __future__ import annotations

import importlib
import pkgutil
import sys

import typer

from core.errors import RigbenchError
from rigbench import commands

app = typer.Typer(
    name="rigbench",
    help="Which GPU, which model, which settings, at what cost per token.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def root() -> None:
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
        sys.exit(2)
