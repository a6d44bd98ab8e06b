"""The Pulumi CLI as a subprocess: the one place that finds it, runs it and reads its JSON.

rigbench drives the user's own ``pulumi`` (their login, backend and secrets provider), so a
stack made by hand and a stack the cloud loop drives are the same stack, and every command
the loop runs is one the user can type. Both the provision stage (a stack's outputs) and the
app's cloud loop (up, destroy, config) go through here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from core.errors import RigbenchError

INSTALL_HINT = "install it with `curl -fsSL https://get.pulumi.com | sh` (https://www.pulumi.com/docs/install/)"
# Flags every non-interactive call carries: no prompts, no colour codes in logs.
QUIET_FLAGS = ("--non-interactive", "--color", "never")


def pulumi_executable(error: type[RigbenchError], missing: str = "") -> str:
    """The ``pulumi`` on PATH, or ``error`` with ``missing`` (or the install line)."""
    found = shutil.which("pulumi")
    if found is None:
        raise error(missing or f"the Pulumi CLI (`pulumi`) is not on PATH; {INSTALL_HINT}")
    return found


def pulumi_json(
    arguments: list[str],
    error: type[RigbenchError],
    cwd: Path | str | None = None,
    missing: str = "",
    hint: str = "",
    timeout: float = 120,
) -> object:
    """Run ``pulumi ARGUMENTS`` (a read-only command with ``--json``) and return what it printed."""
    executable = pulumi_executable(error, missing)
    command = f"pulumi {' '.join(arguments)}"
    try:
        result = subprocess.run([executable, *arguments], capture_output=True, text=True, timeout=timeout,
                                check=False, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise error(f"`{command}` did not answer within {timeout:g} s{hint}") from None
    if result.returncode != 0:
        raise error(f"`{command}` failed: {result.stderr.strip() or result.stdout.strip()}{hint}")
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise error(f"`{command}` printed no JSON: {result.stdout[:200]!r}") from None
