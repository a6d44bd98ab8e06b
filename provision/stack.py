"""The rig a Pulumi stack made: its address, SSH user, key and work folder, from the stack's outputs.

After ``pulumi up`` a user types only the step: without ``--host``, the host, SSH user and
NVMe folder come from ``pulumi stack output --json`` (outputs ``publicIp``/``publicDns``,
``sshUser``, ``nvmePath``, and ``sshKeyPath`` when the stack has one), and the rig's host key
is pinned in the stack's own known_hosts file (``~/.config/rigbench/known_hosts/STACK``).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

from fabric import Connection

from core.errors import ProvisionError
from core.pulumi_cli import pulumi_json as pulumi_json_of
from provision.connection import connect, known_hosts_path
from provision.rig_paths import DEFAULT_WORK, RigPaths

DEFAULT_USER = "ubuntu"
DEFAULT_STACK = "dev"


@dataclass
class RigTarget:
    """Where a rig is and how to reach it; ``outputs`` are the stack's, when it came from one."""

    host: str
    user: str
    port: int
    key: str | None
    stack: str
    work: str
    strict: bool
    outputs: dict | None = None

    def connection(self) -> Connection:
        return connect(
            self.host,
            user=self.user,
            port=self.port,
            key_filename=self.key,
            known_hosts=known_hosts_path(self.stack),
            strict_host_key=self.strict,
        )

    def paths(self) -> RigPaths:
        return RigPaths(self.work)


def pulumi_json(arguments: list[str]) -> object:
    return pulumi_json_of(
        arguments, ProvisionError,
        missing="no --host given and the pulumi CLI is not on PATH; pass --host HOST or install pulumi",
        hint="; run `pulumi up` first, or pass --host",
    )


def stack_name(stack: str | None) -> str:
    """The named stack, else the one Pulumi has selected, else ``dev``."""
    if stack:
        return stack
    result = (
        subprocess.run(["pulumi", "stack", "--show-name"], capture_output=True, text=True, timeout=60, check=False)
        if shutil.which("pulumi")
        else None
    )
    selected = result.stdout.strip() if result is not None and result.returncode == 0 else ""
    return selected or DEFAULT_STACK


def target_from_stack(stack: str | None) -> dict:
    """host, user, work and key from the stack's outputs."""
    arguments = ["stack", "output", "--json"] + (["--stack", stack] if stack else [])
    outputs = pulumi_json(arguments)
    if not isinstance(outputs, dict):
        raise ProvisionError("`pulumi stack output --json` did not print an object")
    host = outputs.get("publicIp") or outputs.get("publicDns")
    if not host:
        raise ProvisionError(
            f"the stack has no publicIp or publicDns output (found: {', '.join(sorted(outputs))}); "
            "is the instance up? run `pulumi up`, or pass --host"
        )
    return {
        "host": host,
        "user": outputs.get("sshUser"),
        "work": outputs.get("nvmePath"),
        "key": outputs.get("sshKeyPath"),
        "outputs": outputs,
    }


def resolve_target(
    host: str | None, user: str | None, port: int, key: str | None, stack: str | None, work: str | None, strict: bool
) -> RigTarget:
    """The command line's options, completed from the stack's outputs when no host is given."""
    found = {} if host else target_from_stack(stack)
    return RigTarget(
        host=host or found["host"],
        user=user or found.get("user") or DEFAULT_USER,
        port=port,
        key=key or found.get("key"),
        stack=stack_name(stack) if not host or stack else DEFAULT_STACK,
        work=work or found.get("work") or DEFAULT_WORK,
        strict=strict,
        outputs=found.get("outputs"),
    )
