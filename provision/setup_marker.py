"""Step ``setup``: wait until a new rig's own set-up (the stack's user data) has finished.

A rig that ``pulumi up`` just made is not ready when the command returns: sshd comes up a
minute later, and the user data (NVMe mount, work folders, TTL guard, spot watcher) writes
its marker file only at the end. Provisioning before that races the set-up, so this step
retries the SSH link until it answers and then waits for the marker; a rig that refuses the
key or shows another host key fails at once, since waiting will not change that.
"""

from __future__ import annotations

import json
import shlex
import socket
import time

import paramiko
from fabric import Connection

from core.errors import ProvisionError
from core.rig_setup import SETUP_LOG, SETUP_MARKER
from provision.connection import describe_host, ensure_pinned, run, translate_error

DEFAULT_SETUP_MARKER = SETUP_MARKER
# Link errors that a booting instance gives before its sshd listens.
NOT_YET = (paramiko.ssh_exception.NoValidConnectionsError, ConnectionError, socket.timeout, TimeoutError, EOFError,
           paramiko.SSHException, OSError)
FATAL = (paramiko.AuthenticationException, paramiko.BadHostKeyException)


def wait_for_setup(c: Connection, marker: str = DEFAULT_SETUP_MARKER, timeout: float = 900,
                   poll: float = 2.0) -> dict:
    """The rig's set-up marker (its JSON), once SSH answers and the marker exists."""
    ensure_pinned(c)
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            result = run(c, f"cat {shlex.quote(marker)}", warn=True, timeout=30)
            if result.ok:
                return parse_marker(result.stdout, marker)
            last = f"SSH answers, no {marker} yet"
        except FATAL as error:
            raise translate_error("setup", c, error) from None
        except NOT_YET as error:
            last = f"{type(error).__name__}: {error}"
            c.close()
        if time.monotonic() >= deadline:
            raise ProvisionError(
                f"setup: {describe_host(c)} did not finish its set-up within {timeout:g} s ({last}); "
                f"see {SETUP_LOG} on the rig, or the instance's console output"
            )
        time.sleep(poll)


def parse_marker(text: str, marker: str) -> dict:
    try:
        payload = json.loads(text)
    except ValueError:
        raise ProvisionError(f"setup: {marker} on the rig is not JSON: {text[:200]!r}") from None
    if not isinstance(payload, dict):
        raise ProvisionError(f"setup: {marker} on the rig is not a JSON object: {text[:200]!r}")
    return payload
