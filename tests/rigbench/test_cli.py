"""The command tree: one table of top-level commands, each module loaded only when it is asked for."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest
import typer.main
from typer.testing import CliRunner

from rigbench import commands
from rigbench.cli import COMMANDS, app, load_command

# modules of rigbench/commands that hold part of a group rather than a top-level command
PARTS = {"orphans": "cloud"}


def first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_listing_says_what_the_command_says_of_itself(name: str) -> None:
    command = load_command(name)
    assert COMMANDS[name].summary == first_paragraph(command.help), name


def test_every_command_module_is_in_the_table() -> None:
    modules = {info.name for info in pkgutil.iter_modules(commands.__path__)}
    listed = {entry.module for entry in COMMANDS.values()}
    assert modules == listed | set(PARTS)
    for part, group in PARTS.items():
        assert part in load_command(group).commands


def test_the_help_lists_every_command_without_importing_one() -> None:
    probe = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from rigbench.cli import app\n"
        "result = CliRunner().invoke(app, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "print(result.output)\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'analysis', 'loadtest', 'llamacpp', 'infra', 'provision', 'quality'} or m.startswith('rigbench.commands.'))\n"
        "print('LOADED', loaded)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert "LOADED []" in done.stdout, done.stdout
    for name in COMMANDS:
        assert f"  {name} " in done.stdout


def test_an_unknown_command_is_refused_with_the_usual_message() -> None:
    result = CliRunner().invoke(app, ["sweeep"])
    assert result.exit_code == 2
    assert "No such command 'sweeep'" in result.output


def test_each_group_and_command_is_a_module_level_app() -> None:
    for entry in {entry.module for entry in COMMANDS.values()}:
        module = importlib.import_module(f"rigbench.commands.{entry}")
        assert isinstance(module.app, typer.Typer), entry
        assert typer.main.get_command(module.app) is not None


@pytest.mark.parametrize("path", [["quality", "eval"], ["quality", "report"], ["quality", "compare"],
                                  ["quality", "questions", "gsm8k"], ["cloud", "orphans"], ["cloud", "run"],
                                  ["prices", "show"], ["report"]])
def test_grouped_commands_answer_help(path: list[str]) -> None:
    result = CliRunner().invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
