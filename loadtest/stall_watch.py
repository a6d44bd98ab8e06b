"""The watchdog of one load process for the read timeout of every simulated user's client.

Why: a socket timeout makes gevent arm and cancel a timer on every wait for bytes, a few µs of
CPU per streamed chunk, paid by every user all the time for a stall that almost never happens.
Instead the clients wait without a timer and this greenlet looks at them a few times a second,
ending any wait that has outlasted the client's read timeout (the request then fails as
``timeout``, as before; up to ``CHECK_S`` later than the timeout itself). Locust side only:
it imports gevent. Each load process has one, in its state (``loadtest.load_process``).
"""

from __future__ import annotations

import time
import weakref

import gevent

from loadtest.sse_client import SSEClient

CHECK_S = 0.25


class StallWatch:
    def __init__(self) -> None:
        self.clients: weakref.WeakSet[SSEClient] = weakref.WeakSet()
        self.greenlet: gevent.Greenlet | None = None

    def watch(self, client: SSEClient) -> None:
        """Look after ``client``: it no longer sets a socket timeout of its own."""
        client.watched = True
        self.clients.add(client)
        if self.greenlet is None or self.greenlet.dead:
            self.greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        while True:
            gevent.sleep(CHECK_S)
            now = time.monotonic()
            for client in list(self.clients):
                client.abort_if_stalled(now)
