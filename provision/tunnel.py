"""Step ``tunnel``: a local port forwarded to the rig's llama-server over SSH.

llama-server listens on the rig's 127.0.0.1; the tunnel is how a laptop reaches it without
opening a port in the security group (Fabric's ``Connection.forward_local``). A profile served as
several replicas gets one forward per replica, the local ports in the same order (local port + i,
or a free port each), since a client here spreads its load over them as the rig's sweep does.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import paramiko
from fabric import Connection
from invoke.exceptions import CommandTimedOut, UnexpectedExit

from core.network import free_port
from provision.connection import ensure_pinned, translate_error
from provision.rig_paths import RigPaths
from provision.serve import DEFAULT_PORT, read_state


@contextlib.contextmanager
def open_tunnel(c: Connection, local_port: int = 0, remote_port: int = DEFAULT_PORT) -> Iterator[int]:
    """Forward ``127.0.0.1:local_port`` here to ``127.0.0.1:remote_port`` on the rig; yield the local port.

    ``local_port`` 0 picks a free port.
    """
    ensure_pinned(c)
    if local_port == 0:
        local_port = free_port()
    try:
        forward = c.forward_local(local_port, remote_port=remote_port, remote_host="127.0.0.1",
                                  local_host="127.0.0.1")
        forward.__enter__()
    except Exception as error:  # noqa: BLE001 (translated: SSH errors and a busy local port)
        raise translate_error("tunnel", c, error) from None
    try:
        yield local_port
    finally:
        forward.__exit__(None, None, None)


def served_ports(c: Connection, paths: RigPaths | None, remote_port: int) -> list[int]:
    """The rig ports to forward: every replica's when the rig serves replicas from ``remote_port``, else that one."""
    if paths is None:
        return [remote_port]
    ensure_pinned(c)
    try:
        state = read_state(c, paths)
    except (paramiko.SSHException, OSError, EOFError, CommandTimedOut, UnexpectedExit) as error:
        raise translate_error("tunnel", c, error) from None
    if state is None or not state.replicas or state.port != remote_port:
        return [remote_port]
    return [replica.port for replica in state.replicas]


def hold_tunnel(c: Connection, local_port: int, remote_port: int = DEFAULT_PORT, paths: RigPaths | None = None) -> None:
    """Keep the tunnel open until Ctrl-C (the ``tunnel`` task); with ``paths``, one per replica the rig serves."""
    remote_ports = served_ports(c, paths, remote_port)
    with contextlib.ExitStack() as stack:
        for index, remote in enumerate(remote_ports):
            port = stack.enter_context(open_tunnel(c, local_port + index if local_port else 0, remote))
            said = f" (replica {index})" if len(remote_ports) > 1 else ""
            print(f"[tunnel] http://127.0.0.1:{port} -> rig 127.0.0.1:{remote}{said}"
                  + ("; Ctrl-C to close" if index == len(remote_ports) - 1 else ""), flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("[tunnel] closed", flush=True)
