"""The simulated user: streams chat completions back to back, each kept by its session.

That is the closed loop (``--steps``); the open loop (``--rates``) sends on an arrival schedule
from ``loadtest.open_loop``. Both send through a ``loadtest.chat_session.ChatSession``, which
writes every record to the process's shard, tallies it and reports it to Locust. With
``--sessions`` a user runs conversations instead (``loadtest.sessions`` says which turn is next and
what it sends), thinking between turns: its think time is a wait that ends, at the latest, when
the last measured window closes, so a thinking user never starts a turn in the drain.
"""

from __future__ import annotations

import time

from locust import User, task

from core.replicas import user_replica
from loadtest.backoff import Backoff
from loadtest.chat_session import ChatSession
from loadtest.load_process import load_process
from loadtest.open_loop import run_user_number
from loadtest.prompts import rotation
from loadtest.sessions import SessionUser

DRAIN_POLL_S = 0.25  # how often a user that may send no more looks again (the shape stops it)


class StreamingChatUser(User):
    """One user = one connection sending requests back to back; after a refusal (a refused
    connection, 429, 502, 503, 504) it backs off (``loadtest.backoff``) instead of spinning."""

    def wait_time(self) -> float:
        now = time.time()
        context = self.session.context
        if context.sweep_over(now):
            return DRAIN_POLL_S
        return min(max(self.backoff.wait_s, self.think_s), context.seconds_left(now))

    def on_start(self) -> None:
        self.backoff = Backoff()
        context = load_process(self.environment).context(self.environment)
        # the run's user number, whichever load process plays it (loadtest.open_loop.run_user_number)
        user = run_user_number(self.environment, next(context.user_counter))
        host, replica = self.host, None
        if context.replicas:
            replica = user_replica(user, len(context.replicas))
            host = context.replicas[replica]
        self.session = ChatSession(self.environment, host, replica)
        self.prompts = rotation(context.prompts, offset=user)  # so --processes sends the same prompts
        self.lengths = context.lengths.for_user(user)  # loadtest.lengths
        self.think_s = 0.0  # before the next turn of a conversation
        self.conversations: SessionUser | None = None
        if context.settings.sessions is not None:
            self.conversations = SessionUser(context.settings.sessions, seed=context.settings.workload_seed,
                                             user=user, shard=context.shard,
                                             system_prompt=context.system_prompt, context=context.context_text)
        self.slot: int | None = None
        if context.settings.pin_slots:
            # the lowest slot no live user holds: N users hold slots 0..N-1 at every step
            self.slot = min(set(range(len(context.pinned) + 1)) - context.pinned)
            context.pinned.add(self.slot)

    def on_stop(self) -> None:
        self.session.close()
        if self.slot is not None:
            self.session.context.pinned.discard(self.slot)

    @task
    def chat(self) -> None:
        if self.session.context.sweep_over(time.time()):
            return  # the last window has closed: send nothing more, the shape ends the drain
        if self.conversations is None:
            result = self.session.chat(next(self.prompts), slot=self.slot, lengths=next(self.lengths))
        else:
            lengths = next(self.lengths)
            prompt = next(self.prompts)
            if lengths is not None:  # the new message cut to its drawn length; the reply drawn too (chat)
                prompt = self.session.context.lengths.cut_prompt(prompt, lengths)
            turn = self.conversations.next_turn(prompt)
            result = self.session.chat(turn.prompt, slot=self.slot, conversation=turn.conversation, turn=turn.number,
                                       lengths=lengths)
            record = result.record
            self.think_s = self.conversations.turn_ended(
                result.reply_text if record.ok and not record.interrupted else None)
        self.backoff.after(result.record.error_kind, result.retry_after_s)
