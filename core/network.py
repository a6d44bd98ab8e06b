"""Loopback ports: a free one for servers and tunnels this process starts, and whether a given
one can still be bound."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def bind_error(host: str, port: int) -> OSError | None:
    """What binding ``host:port`` meets now (``EADDRINUSE`` when a server listens there), or None
    when the port is free. SO_REUSEADDR, as servers set it: a port whose last connections are in
    TIME_WAIT is free to them, and so it is here."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error
    return None
