"""The simulated user: streams chat completions back to back, each kept by its session.

That is the closed loop (``--steps``); the open loop (``--rates``) sends on an arrival schedule
from ``loadtest.open_loop``. Both send through a ``loadtest.chat_session.ChatSession``, which
writes every record to the process's shard, tallies it and reports it to Locust.
"""

from __future__ import annotations

from locust import User, task

from loadtest.chat_session import ChatSession
from loadtest.prompts import rotation

# After a refused connection a user waits before its next request, doubling up to the cap, so a
# server that is gone is asked a few times a second, not thousands (the error-rate rule then stops it).
BACKOFF_FIRST_S = 0.05
BACKOFF_CAP_S = 5.0


class StreamingChatUser(User):
    """One user = one connection sending requests back to back; after a refused connection it
    backs off (doubling, capped) instead of spinning."""

    backoff = 0.0

    def wait_time(self) -> float:
        return self.backoff

    def on_start(self) -> None:
        self.session = ChatSession(self.environment, self.host)
        context = self.session.context
        self.prompts = rotation(context.prompts, offset=next(context.user_counter))
        self.slot: int | None = None
        if context.options.pin_slots:
            # the lowest slot no live user holds: N users hold slots 0..N-1 at every step
            self.slot = min(set(range(len(context.pinned) + 1)) - context.pinned)
            context.pinned.add(self.slot)

    def on_stop(self) -> None:
        self.session.close()
        if self.slot is not None:
            self.session.context.pinned.discard(self.slot)

    @task
    def chat(self) -> None:
        record = self.session.chat(next(self.prompts), slot=self.slot)
        refused = record.error_kind == "connect"
        self.backoff = min(BACKOFF_CAP_S, max(BACKOFF_FIRST_S, self.backoff * 2)) if refused else 0.0
