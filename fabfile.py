"""Fabric tasks: the provision steps for Fabric's own CLI, made from ``rigbench.provision_steps``.

From the repository root, after ``pulumi up``::

    fab -H ubuntu@HOST -i ~/.ssh/rigbench.pem up --profile gemma4-e2b
    fab -H ubuntu@HOST -i KEY toolkit build download serve --profile gemma4-e2b
    fab -H ubuntu@HOST -i KEY status
    fab --list

Fabric finds this file in the folder it runs from. Each task takes ``--work`` (the NVMe
folder, default /opt/dlami/nvme), ``--stack`` (whose known_hosts file pins the rig's host
key) and ``--strict``; a task that needs one takes ``--profile`` (a bundled name or a .toml
path, default ``$RIGBENCH_PROFILE`` or gemma4-e2b). ``rigbench provision STEP`` runs the same
steps with the host taken from ``pulumi stack output``. A failed step exits 2 with one line
naming the step. Tasks have no short flags, so none shadows one of Fabric's own (-H, -i, -r).
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from fabric import Connection, Task
from invoke import Collection
from invoke.exceptions import Exit

from core.errors import RigbenchError
from provision.connection import known_hosts_path, pin_host_keys
from provision.rig_paths import DEFAULT_WORK, RigPaths
from provision.stack import DEFAULT_STACK
from rigbench.provision_steps import (
    DEFAULT_PROFILE,
    PROFILE_HELP,
    STEPS,
    WORK_HELP,
    ProvisionStep,
    Rig,
    command_function,
)

STACK = os.environ.get("RIGBENCH_STACK", DEFAULT_STACK)
COMMON_HELP = {
    "profile": PROFILE_HELP,
    "work": WORK_HELP,
    "stack": f"Pulumi stack whose known_hosts file pins the rig's host key ($RIGBENCH_STACK or {DEFAULT_STACK})",
    "strict": "refuse a rig whose host key is not pinned yet",
}


def fabric_task(step: ProvisionStep) -> Task:
    def parameter(name: str, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default)

    common = [parameter("stack", STACK), parameter("strict", False)]
    if step.uses_work:
        common.insert(0, parameter("work", DEFAULT_WORK))
    if step.needs_profile:
        common.insert(0, parameter("profile", DEFAULT_PROFILE))
    first = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD), *common]

    def body(c: Any, stack: str, strict: bool, profile: str = DEFAULT_PROFILE, work: str = DEFAULT_WORK,
             **options: Any) -> None:
        if not isinstance(c, Connection):
            raise Exit(f"rigbench: error: {step.name}: no rig given; pass -H ubuntu@HOST (and -i KEY)", code=2)
        pin_host_keys(c, known_hosts_path(stack), strict=strict)
        try:
            step.execute(Rig(c, RigPaths(work), profile), **options)
        except RigbenchError as error:
            raise Exit(f"rigbench: error: {error}", code=error.exit_code) from None

    wanted = {"profile": step.needs_profile, "work": step.uses_work}
    helps = {name: text for name, text in COMMON_HELP.items() if wanted.get(name, True)}
    helps |= {option.name: option.help for option in step.options}
    signature = step.signature(first, lambda option: option.default)
    function = command_function(step.name, step.help, signature, body)
    return Task(function, name=step.name, help=helps, auto_shortflags=False)


ns = Collection(*(fabric_task(step) for step in STEPS))
