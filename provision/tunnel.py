"""Step ``tunnel``: a local port forwarded to the rig's llama-server over SSH.

llama-server listens on the rig's 127.0.0.1; the tunnel is how a laptop reaches it without
opening a port in the security group (Fabric's ``Connection.forward_local``).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from fabric import Connection

from core.network import free_port
from provision.connection import ensure_pinned, translate_error
from provision.serve import DEFAULT_PORT


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


def hold_tunnel(c: Connection, local_port: int, remote_port: int = DEFAULT_PORT) -> None:
    """Keep the tunnel open until Ctrl-C (the ``tunnel`` task)."""
    with open_tunnel(c, local_port, remote_port) as port:
        print(f"[tunnel] http://127.0.0.1:{port} -> rig 127.0.0.1:{remote_port}; Ctrl-C to close", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            print("[tunnel] closed", flush=True)
