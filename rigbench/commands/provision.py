"""``rigbench provision STEP``: the provision steps over SSH, with the rig taken from the Pulumi stack.

Without ``--host`` the rig comes from ``pulumi stack output`` (``provision.stack``), so after
``pulumi up`` a user types only the step. The steps and their options are the table in
``rigbench.provision_steps`` (the Fabric tasks are made from the same table).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import typer
from pydantic import TypeAdapter

from core.whole_files import write_whole
from provision.stack import RigTarget, resolve_target
from provision.sweep import RigSweepInterrupted
from rigbench.provision_steps import (
    DEFAULT_PROFILE,
    PROFILE_HELP,
    STEPS,
    ProvisionStep,
    Rig,
    StepOption,
    command_function,
)


def typer_option(option: StepOption) -> Any:
    return typer.Option(option.default, *filter(None, [option.flag, option.short]), help=option.help)


def step_command(step: ProvisionStep, rig_of: Any) -> Any:
    context = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    signature = step.signature([context], typer_option)

    def body(ctx: typer.Context, **options: Any) -> None:
        try:
            result = step.execute(rig_of(ctx), **options)
        except RigSweepInterrupted as error:  # the runs a spot notice stopped came home: a caller resumes them
            if ctx.obj.get("result") is not None:
                write_result(ctx.obj["result"], error.copied)
            raise
        if ctx.obj.get("result") is not None:
            write_result(ctx.obj["result"], result)

    return command_function(step.name, step.help, signature, body)


def write_result(path: Path, result: Any) -> None:
    """The step's result as JSON (a build manifest, the runs copied, a bench summary), for a caller that
    composes steps (the cloud loop) and should not parse progress lines."""
    payload = TypeAdapter(Any).dump_python(result, mode="json")
    write_whole(path, json.dumps(payload, indent=2) + "\n")


app = typer.Typer(
    epilog="Exit codes: 0 the step is done; 1 a spot notice stopped the rig's sweep (its runs are home, "
    "interrupted, and --result names them: `resume --run` finishes them); 2 the step failed or was refused (one "
    "line names the step and the host; a remote sweep's runs are copied first).",
    help="Provision the rig over SSH (Fabric): toolkit, build, download, serve, ...", no_args_is_help=True
)

@app.callback()
def options(
    ctx: typer.Context,
    host: str = typer.Option(None, "--host", help="rig address (default: the stack's publicIp)"),
    user: str = typer.Option(None, "--user", help="SSH user (default: the stack's sshUser, else ubuntu)"),
    port: int = typer.Option(22, "--port", help="SSH port"),
    key: str = typer.Option(None, "--key", "-i", help="private key file (default: agent and ~/.ssh keys)"),
    stack: str = typer.Option(None, "--stack", help="Pulumi stack (default: the selected one)"),
    work: str = typer.Option(None, "--work", help="NVMe work folder (default: the stack's nvmePath)"),
    profile: str = typer.Option(DEFAULT_PROFILE, "--profile", "-p", help=PROFILE_HELP),
    strict: bool = typer.Option(False, "--strict", help="refuse a host key that is not pinned yet"),
    result: Path = typer.Option(None, "--result", help="also write the step's result as JSON to this file"),
) -> None:
    # Resolved on first use, so `rigbench provision STEP --help` needs no stack.
    ctx.obj = {"target": dict(host=host, user=user, port=port, key=key, stack=stack, work=work, strict=strict),
               "profile": profile, "result": result}

def rig_of(ctx: typer.Context) -> Rig:

    target = ctx.obj["target"]
    if not isinstance(target, RigTarget):
        target = ctx.obj["target"] = resolve_target(**target)
    return Rig(target.connection(), target.paths(), ctx.obj["profile"], target.outputs)

for step in STEPS:
    app.command(step.name)(step_command(step, rig_of))
