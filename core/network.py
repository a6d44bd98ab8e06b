"""Loopback ports: a free one (or a run of them, for replicas) for servers and tunnels this process starts,
whether a given one can still be bound, whether a URL names this machine, and a server's URL made again from its
parts."""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse


def server_url(scheme: str, host: str, port: int) -> str:
    """``scheme://host:port``, an IPv6 address in brackets as a URL writes it (``http://[::1]:8080``): the one
    way a URL is made again from the host and port a manifest or a server keeps."""
    bracketed = f"[{host}]" if ":" in host and not host.startswith("[") else host
    return f"{scheme}://{bracketed}:{port}"


def _family(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(_family(host)) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def free_ports(count: int, host: str = "127.0.0.1") -> int:
    """A base port with ``count`` ports from it that a server could bind now: replicas listen on consecutive
    ports, and a free base says nothing of the ports after it."""
    for _ in range(50):
        base = free_port(host)
        if base + count <= 65536 and all(bind_error(host, base + i) is None for i in range(1, count)):
            return base
    raise OSError(f"no {count} consecutive free ports on {host}")


def bind_error(host: str, port: int) -> OSError | None:
    """What binding ``host:port`` meets now (``EADDRINUSE`` when a server listens there), or None
    when the port is free. SO_REUSEADDR, as servers set it: a port whose last connections are in
    TIME_WAIT is free to them, and so it is here."""
    with socket.socket(_family(host)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as error:
            return error
    return None


def is_loopback_url(url: str) -> bool:
    """Whether ``url``'s host is this machine's loopback (``localhost``, ``127.x.x.x``, ``::1``)."""
    host = urllib.parse.urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
