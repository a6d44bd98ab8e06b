"""A run of free ports for replicas: a free base whose next port a server holds is passed over (real sockets)."""

from __future__ import annotations

import socket

from core import network
from core.network import bind_error, free_ports


def test_a_base_whose_next_port_is_held_is_passed_over(monkeypatch) -> None:
    with socket.socket() as held, socket.socket() as other:
        held.bind(("127.0.0.1", 0))
        held.listen()
        taken = held.getsockname()[1]
        other.bind(("127.0.0.1", 0))
        spare = other.getsockname()[1]
        other.close()  # free again: the second base offered
        while bind_error("127.0.0.1", spare + 1) is not None:  # (its next port free too)
            spare = network.free_port()
        offered = iter([taken - 1, spare])
        monkeypatch.setattr(network, "free_port", lambda host="127.0.0.1": next(offered))
        base = free_ports(2)
    assert base == spare, "the first base's next port is in use: replicas there would not all start"


def test_the_ports_given_can_be_bound() -> None:
    base = free_ports(3)
    assert all(bind_error("127.0.0.1", base + offset) is None for offset in range(3))
