"""Every command line in the README and docs/ exists: its subcommands, its options, its module.

The docs show ``rigbench …``, ``fab …``, ``locust -f loadtest/locustfile.py …`` and
``python -m …`` lines; each is checked against the real command line (the click tree behind
``rigbench``, the tasks of ``fabfile.py``, Locust's own ``--help``, the module's ``--help``),
so a renamed command, a removed option or a moved script fails here instead of in a
reader's terminal.
"""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main
from typer.testing import CliRunner

from rigbench.cli import app

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\s*$")
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


# Programs that run another command line: the docs' line is checked as the command it wraps.
WRAPPERS = {"taskset": 2, "time": 0, "nice": 0}


def without_wrapper(words: list[str]) -> list[str]:
    """``taskset -c 0 python -m x`` is ``python -m x`` pinned to a core; the wrapped line is the one to check."""
    while words and Path(words[0]).name in WRAPPERS:
        words = words[1 + WRAPPERS[Path(words[0]).name]:]
    return words


def shell_lines(path: Path) -> list[tuple[str, int, list[str]]]:
    """(file, line number, words) of every command in a fenced shell block, continuations joined."""
    found = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence:
            inside = not inside and fence.group(1) in ("bash", "sh", "shell")
            continue
        if not inside:
            continue
        if not pending:
            start = number
        pending += line.rstrip("\\") + " "
        if line.endswith("\\"):
            continue
        words = shlex.split(pending, comments=True)
        pending = ""
        while words and ASSIGNMENT.match(words[0]):
            words.pop(0)
        words = without_wrapper(words)
        if words:
            found.append((path.name, start, words))
    return found


COMMANDS = [entry for path in DOCS for entry in shell_lines(path)]


def as_console_script(words: list[str]) -> list[str]:
    """``python -m rigbench …`` is the console script itself (on a machine where only the package is on the path)."""
    if Path(words[0]).name in ("python", "python3") and words[1:3] == ["-m", "rigbench"]:
        return ["rigbench", *words[3:]]
    return words


def command_of(words: list[str]) -> str:
    program = Path(words[0]).name
    if program in ("python", "python3") and len(words) > 2 and words[1] == "-m":
        return "module"
    return program


def cases(program: str) -> list:
    lines = [(name, line, as_console_script(words)) for name, line, words in COMMANDS]
    chosen = [(f"{name}:{line}", words) for name, line, words in lines if command_of(words) == program]
    return [pytest.param(words, id=where) for where, words in chosen]


def test_the_docs_show_each_kind_of_command() -> None:
    kinds = {command_of(words) for _, _, words in COMMANDS}
    assert {"rigbench", "fab", "locust", "module", "make", "pulumi"} <= kinds


# ---------------------------------------------------------------- rigbench


def option_names(command) -> set[str]:
    """The options a command shows (a hidden one is not for users: the docs must not teach it)."""
    return {
        name
        for param in command.params
        if not getattr(param, "hidden", False)
        for name in (*param.opts, *getattr(param, "secondary_opts", []))
    }


def used_options(words: list[str]) -> list[str]:
    return [word.split("=", 1)[0] for word in words if word.startswith("-") and not re.fullmatch(r"-\d.*", word)]


@pytest.mark.parametrize("words", cases("rigbench"))
def test_rigbench_line(words: list[str]) -> None:
    command = typer.main.get_command(app)  # typer's own click: a group has ``commands``
    rest = words[1:]
    path = ["rigbench"]
    context = command.make_context("rigbench", ["--help"], resilient_parsing=True)
    while hasattr(command, "commands"):
        known = option_names(command)
        # the group's own options come first: a flag, or a flag and its value
        while rest and rest[0].startswith("-"):
            flag = rest.pop(0).split("=", 1)[0]
            assert flag in known, f"`{' '.join(path)}` has no option {flag}; it has {sorted(known)}"
            param = next(p for p in command.params if flag in p.opts)
            if not getattr(param, "is_flag", False) and rest:
                rest.pop(0)
        assert rest, f"`{' '.join(path)}` needs a subcommand"
        name = rest.pop(0)
        sub = command.get_command(context, name)  # the root loads its commands when they are asked for
        known_names = command.list_commands(context)
        assert sub is not None, f"`{' '.join(path)}` has no subcommand {name!r}; it has {sorted(known_names)}"
        command, path = sub, [*path, name]
    known = option_names(command)
    while rest:
        word = rest.pop(0)
        if not word.startswith("-"):
            continue  # an argument (a run folder, a placeholder)
        flag = word.split("=", 1)[0]
        assert flag in known, f"`{' '.join(path)}` has no option {flag}; it has {sorted(known)}"
        param = next(p for p in command.params if flag in p.opts or flag in getattr(p, "secondary_opts", []))
        if not getattr(param, "is_flag", False) and "=" not in word and rest:
            rest.pop(0)  # its value, which may itself start with '-' (--server-arg '--parallel 64')
    helped = CliRunner().invoke(app, [*path[1:], "--help"])
    assert helped.exit_code == 0, helped.output


# ---------------------------------------------------------------- fab


@functools.cache
def fab_tasks() -> dict[str, set[str]]:
    """Task name -> its flags, read from fabfile.py's collection."""
    sys.path.insert(0, str(ROOT))  # Fabric itself loads fabfile.py from the folder it runs in
    try:
        import fabfile
    finally:
        sys.path.remove(str(ROOT))
    return {
        name: {flag for argument in task.get_arguments() for flag in (f"--{argument.name.replace('_', '-')}",)}
        for name, task in fabfile.ns.tasks.items()
    }


FAB_OPTIONS_WITH_VALUES = {"-H", "--hosts", "-i", "--identity", "-r", "--search-root", "-S", "--ssh-config"}
FAB_FLAGS = {"--list", "-l", "--help", "-h", "--prompt-for-login-password", "--complete"}


@pytest.mark.parametrize("words", cases("fab"))
def test_fab_line(words: list[str]) -> None:
    tasks = fab_tasks()
    rest = words[1:]
    task = None
    while rest:
        word = rest.pop(0)
        if task is None and word in FAB_OPTIONS_WITH_VALUES:
            rest.pop(0)
        elif task is None and word in FAB_FLAGS:
            if word in ("--help", "-h") and rest:
                assert rest.pop(0) in tasks
        elif word.startswith("-"):
            assert task is not None, f"fab option {word} is not one this test knows"
            flag = word.split("=", 1)[0]
            assert flag in tasks[task], f"fab task {task} has no option {flag}; it has {sorted(tasks[task])}"
            if "=" not in word and rest and not rest[0].startswith("-") and rest[0] not in tasks:
                rest.pop(0)
        else:
            assert word in tasks, f"fabfile.py has no task {word!r}; it has {sorted(tasks)}"
            task = word


# ---------------------------------------------------------------- locust and modules


# Locust prints --help before it loads a locustfile, so its own help lacks the project's options:
# ask Locust's parser after the locustfile has added them (in a child: importing locust patches sockets).
LOCUST_HELP = (
    "from locust import argument_parser; import loadtest.locustfile; print(argument_parser.get_parser().format_help())"
)


@functools.cache
def locust_help() -> str:
    done = subprocess.run([sys.executable, "-c", LOCUST_HELP], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=True)
    return done.stdout


@pytest.mark.parametrize("words", cases("locust"))
def test_locust_line(words: list[str]) -> None:
    assert words[1:3] == ["-f", "loadtest/locustfile.py"], "the docs run the project's locustfile"
    help_text = locust_help()
    missing = [flag for flag in used_options(words[3:]) if not re.search(rf"(^|[\s,]){re.escape(flag)}\b", help_text)]
    assert not missing, f"locust -f loadtest/locustfile.py has no option {missing}"


@pytest.mark.parametrize("words", cases("module"))
def test_python_module_line(words: list[str]) -> None:
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run([sys.executable, "-m", words[2], "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    missing = [flag for flag in used_options(words[3:]) if flag not in done.stdout]
    assert not missing, f"python -m {words[2]} has no option {missing}"


def test_scripts_named_in_the_docs_exist() -> None:
    scripts = {word for _, _, words in COMMANDS for word in words if word.endswith((".py", ".sh")) and "/" in word}
    assert scripts, "the docs name scripts by path"
    missing = sorted(script for script in scripts if not (ROOT / script.removeprefix(".venv/bin/")).exists())
    assert not missing, f"the docs name scripts that are not in the repository: {missing}"
