"""The connection to a rig: pinned host keys, SSH errors that name the host, and named steps.

Every provisioning step is a plain function of a Fabric ``Connection``. This module gives
those functions three things:

* host keys pinned in one ``known_hosts`` file per Pulumi stack (never a blind accept): an
  unknown host is recorded on first contact (like OpenSSH's ``accept-new``) unless strict
  checking is asked for, and a changed key is refused;
* ``rig_step``: a decorator that turns SSH, timeout and command failures into one
  ``ProvisionError`` naming the step and the host;
* ``run``: run a command on the rig with a timeout, streaming its output, and fail with
  the step's name and the last lines of output.
"""

from __future__ import annotations

import functools
import io
import os
import shlex
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut, UnexpectedExit

from core import hub_download
from core.errors import ProvisionError
from provision.rig_paths import RigPaths

CONNECT_TIMEOUT_S = 15
RIG_AGENT = Path(__file__).resolve().parent / "rig_agent.py"
HUB_DOWNLOAD = Path(hub_download.__file__).resolve()  # the download rule, run alone on the rig

F = TypeVar("F", bound=Callable[..., Any])


# ---------------------------------------------------------------- host keys


def config_home() -> Path:
    return Path(os.environ.get("RIGBENCH_HOME") or Path.home() / ".config" / "rigbench")


def known_hosts_path(stack: str = "dev") -> Path:
    """The known_hosts file of one Pulumi stack: rigs of other stacks never vouch for it."""
    return config_home() / "known_hosts" / stack


class PinNewHostKey(paramiko.MissingHostKeyPolicy):
    """Record an unknown host's key in the stack's file, or refuse it when ``strict``.

    A host already in the file with another key never reaches this policy: paramiko raises
    ``BadHostKeyException`` first, which ``rig_step`` reports with the file to fix.
    """

    def __init__(self, path: Path, strict: bool) -> None:
        self.path = path
        self.strict = strict

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        fingerprint = key.fingerprint
        if self.strict:
            raise ProvisionError(
                f"host key of {hostname} ({key.get_name()} {fingerprint}) is not in {self.path}; "
                "strict host key checking is on: add the rig's key to that file, or connect once without --strict"
            )
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a") as handle:
            handle.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")
        print(f"[ssh] pinned host key of {hostname}: {key.get_name()} {fingerprint} in {self.path}",
              file=sys.stderr, flush=True)


def pin_host_keys(c: Connection, known_hosts: Path, strict: bool = False) -> Connection:
    """Make ``c`` check the rig's host key against ``known_hosts`` (call before the first command)."""
    known_hosts = Path(known_hosts)
    if known_hosts.exists():
        c.client.load_host_keys(str(known_hosts))
    c.client.set_missing_host_key_policy(PinNewHostKey(known_hosts, strict))
    c._rigbench_known_hosts = known_hosts  # type: ignore[attr-defined]
    return c


def connect(
    host: str,
    user: str = "ubuntu",
    port: int = 22,
    key_filename: str | None = None,
    known_hosts: Path | None = None,
    strict_host_key: bool = False,
    connect_timeout: int = CONNECT_TIMEOUT_S,
) -> Connection:
    """A Fabric connection to the rig with pinned host keys and only the given key."""
    connect_kwargs: dict[str, Any] = {"banner_timeout": connect_timeout, "auth_timeout": connect_timeout}
    if key_filename:
        connect_kwargs.update(key_filename=[str(Path(key_filename).expanduser())], look_for_keys=False,
                              allow_agent=False)
    c = Connection(host, user=user, port=port, connect_kwargs=connect_kwargs, connect_timeout=connect_timeout)
    return pin_host_keys(c, known_hosts or known_hosts_path(), strict_host_key)


def ensure_pinned(c: Connection) -> None:
    """Connections made by Fabric's own CLI get the default stack's file unless one was set."""
    if getattr(c, "_rigbench_known_hosts", None) is None:
        pin_host_keys(c, known_hosts_path(os.environ.get("RIGBENCH_STACK", "dev")))


def describe_host(c: Connection) -> str:
    return f"{c.user}@{c.host}:{c.port}"


# ---------------------------------------------------------------- errors


def link_alive(c: Connection, timeout: float = 5.0) -> bool:
    """Whether the SSH link still carries a new channel. ``Connection.is_connected`` stays True
    for a while after the far end died, so a failed file operation is told apart from a lost
    link by asking the transport for a fresh session."""
    if not c.is_connected:
        return False
    try:
        channel = c.transport.open_session(timeout=timeout)
    except Exception:  # noqa: BLE001 - any failure here means the link is gone
        return False
    channel.close()
    return True


def translate_error(step: str, c: Connection, error: BaseException) -> ProvisionError:
    """One ProvisionError that names the step, the host and what to do."""
    where = describe_host(c)
    if isinstance(error, ProvisionError):
        message = str(error)
        return error if message.startswith(f"{step}:") else ProvisionError(f"{step}: {message}")
    if isinstance(error, paramiko.BadHostKeyException):
        known = getattr(c, "_rigbench_known_hosts", "the known_hosts file")
        return ProvisionError(
            f"{step}: host key of {where} does not match the key pinned in {known} "
            f"(found {error.key.get_name()} {error.key.fingerprint}, expected {error.expected_key.fingerprint}); "
            f"if the rig was replaced, remove its line with `ssh-keygen -R '[{c.host}]:{c.port}' -f {known}`"
        )
    if isinstance(error, paramiko.AuthenticationException):
        keys = c.connect_kwargs.get("key_filename") or "the default keys"
        return ProvisionError(
            f"{step}: {where} refused the SSH key {keys} ({error}); expected the key pair the stack created: "
            "check --key / the stack's keyPath output and the user name"
        )
    link_errors = (paramiko.ssh_exception.NoValidConnectionsError, ConnectionError, socket.timeout, socket.gaierror,
                   TimeoutError, EOFError, paramiko.SSHException)
    if isinstance(error, OSError) and not isinstance(error, link_errors) and link_alive(c):
        return ProvisionError(f"{step}: on {where}: {error}")  # a file operation, not the link
    if isinstance(error, (*link_errors, OSError)) and c.transport is not None:
        return ProvisionError(
            f"{step}: lost the SSH link to {where} ({type(error).__name__}: {error}); what the step started on "
            "the rig goes on there: once the rig is reachable, `rigbench provision fetch` copies its results "
            "(or run the step again)"
        )
    if isinstance(error, (*link_errors, OSError)):
        return ProvisionError(
            f"{step}: cannot reach {where} over SSH ({type(error).__name__}: {error}); "
            "check that the instance is running, the host and port, and the security group's SSH rule"
        )
    if isinstance(error, CommandTimedOut):
        return ProvisionError(f"{step}: on {where} `{error.result.command}` ran past {error.timeout} s and was stopped")
    if isinstance(error, UnexpectedExit):
        result = error.result
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
        return ProvisionError(f"{step}: on {where} `{result.command}` exited {result.exited}; last lines:\n{tail}")
    return ProvisionError(f"{step}: {type(error).__name__}: {error}")


def rig_step(step: str) -> Callable[[F], F]:
    """Decorate a step function ``f(c, ...)`` so any failure is a ProvisionError naming ``step``."""

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(c: Connection, *args: Any, **kwargs: Any) -> Any:
            ensure_pinned(c)
            try:
                return function(c, *args, **kwargs)
            except (ProvisionError, paramiko.SSHException, OSError, EOFError, CommandTimedOut,
                    UnexpectedExit) as error:
                raise translate_error(step, c, error) from None

        return wrapper  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------- commands


def run(c: Connection, command: str, timeout: int | None = 120, hide: bool | str = True, stdin: str | None = None,
        warn: bool = False):
    """Run ``command`` on the rig; ``stdin`` is sent on the channel (secrets go here, never in argv).

    Invoke feeds stdin one byte per 10 ms, so only short secrets go this way; files go by SFTP.
    """
    kwargs: dict[str, Any] = {"hide": hide, "warn": warn, "timeout": timeout, "pty": False}
    if stdin is not None:
        kwargs["in_stream"] = io.StringIO(stdin)
    else:
        kwargs["in_stream"] = False
    return c.run(command, **kwargs)


def quote(*parts: object) -> str:
    return " ".join(shlex.quote(str(part)) for part in parts)


def remote_exists(c: Connection, path: str) -> bool:
    return run(c, f"test -e {shlex.quote(path)}", warn=True).ok


def is_root(c: Connection) -> bool:
    return run(c, "id -u").stdout.strip() == "0"


def privileged(c: Connection, command: str) -> str:
    """``command`` prefixed with non-interactive sudo unless already root."""
    return command if is_root(c) else f"sudo -n {command}"


def upload_text(c: Connection, text: str, remote_path: str, mode: int = 0o644) -> None:
    """Write ``text`` to ``remote_path`` over SFTP (mode set before content for secrets)."""
    run(c, f"mkdir -p {shlex.quote(os.path.dirname(remote_path))} && : > {shlex.quote(remote_path)} "
           f"&& chmod {mode:o} {shlex.quote(remote_path)}")
    c.put(io.BytesIO(text.encode()), remote=remote_path)


def upload_helper(c: Connection, paths: RigPaths, script: Path, name: str | None = None) -> str:
    """Copy a stdlib-only script to the rig's helper folder (cheap; keeps it in step with this
    checkout); returns its path there."""
    remote = paths.helper(name or script.name)
    run(c, f"mkdir -p {shlex.quote(paths.bin)}")
    c.put(str(script), remote=remote)
    return remote


def upload_helpers(c: Connection, paths: RigPaths) -> None:
    """The rig agent (health checks, port probes) and the hub download, which every step may ask."""
    upload_helper(c, paths, RIG_AGENT)
    upload_helper(c, paths, HUB_DOWNLOAD)


def agent(c: Connection, paths: RigPaths, arguments: str, timeout: int | None = 120, stdin: str | None = None,
          hide: bool | str = True, warn: bool = False):
    """Run ``rig_agent.py`` on the rig with the system python3."""
    return run(c, f"python3 {shlex.quote(paths.helper('rig_agent.py'))} {arguments}", timeout=timeout, hide=hide,
               stdin=stdin, warn=warn)
