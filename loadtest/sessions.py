"""Conversations, as a chat client holds them: the turns and think times of each, and what each turn sends.

Why: a chat service's users resend the whole conversation every turn, behind one system prompt that
every conversation shares, and pause to read and type between turns. Whether the server reuses the
history it already holds (its prompt cache, and the slot it picks for the next turn) then decides
how much of each prompt it processes again: one-shot prompts sent back to back never ask that.

Reproducible: conversation ``k`` of user ``u`` in a run of workload seed ``s`` has the same number of
turns and the same think times whatever happened before it (a failed turn, another load process, the
replies' lengths): its draws come from a generator of its own, seeded by ``(s, u, k)``. A user is
numbered across the run (``--processes`` workers each number their own, interleaved), so two
processes never run the same schedule.

What a user does, in order: turn 1 of a conversation (the shared system prompt, then the next prompt of
the rotation); after each reply, the think time its plan gives, then the next turn, which sends the
history so far (every earlier prompt and the reply's actual text) and the next prompt. After the last
turn a new conversation starts at once (in a closed loop a user who leaves is followed by one who
comes). A turn that did not end with a whole reply (an error, a refusal) ends its conversation: the
history it would resend is not the one a chat client would hold. No Locust import: the closed-loop
user (``loadtest.users``) drives it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from core.rundir.models import SessionSettings
from loadtest.prompts import Prompt


@dataclass(frozen=True)
class ConversationPlan:
    """How many turns a conversation has, and the think time (seconds) before each turn after the first."""

    turns: int
    think_s: tuple[float, ...]


def conversation_plan(settings: SessionSettings, seed: int, user: int, number: int) -> ConversationPlan:
    """Conversation ``number`` of ``user``: its turns, uniform over [turns_min, turns_max], then its think
    times, constant or exponential with that mean, all from the conversation's own generator."""
    # a str seed is hashed (sha512) alike in every process, whatever PYTHONHASHSEED
    rng = random.Random(f"rigbench-conversation:{seed}:{user}:{number}")
    turns = rng.randint(settings.turns_min, settings.turns_max)
    return ConversationPlan(turns, tuple(think_time(settings, rng) for _ in range(turns - 1)))


def think_time(settings: SessionSettings, rng: random.Random) -> float:
    if settings.think == "constant" or settings.think_seconds <= 0:
        return settings.think_seconds
    return rng.expovariate(1.0 / settings.think_seconds)


def conversation_id(shard: str, user: int, number: int) -> str:
    """Unique in the run: the load process's shard, the user's number in the run and its conversation's."""
    return f"{shard}/u{user}/c{number}"


@dataclass(frozen=True)
class Turn:
    """One request of a conversation: what it sends (the history and the new prompt), and where it stands."""

    conversation: str
    number: int  # from 1
    category: str  # the new prompt's
    messages: tuple[dict[str, str], ...]

    @property
    def prompt(self) -> Prompt:
        return Prompt(self.category, self.messages)


class Conversation:
    """One conversation's history as the client holds it: the system prompt, then each turn's prompt
    and the reply's text, in order."""

    def __init__(self, identity: str, plan: ConversationPlan, system_prompt: str = ""):
        self.identity = identity
        self.plan = plan
        self.history: list[dict[str, str]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.sent = 0  # turns sent
        self.asked: tuple[dict[str, str], ...] = ()  # the last turn's new messages, awaiting its reply

    @property
    def over(self) -> bool:
        return self.sent >= self.plan.turns

    def ask(self, prompt: Prompt) -> Turn:
        """The next turn: the history, then ``prompt``'s messages."""
        if self.over:
            raise ValueError(f"conversation {self.identity} has had its {self.plan.turns} turns")
        self.sent += 1
        self.asked = prompt.messages
        return Turn(self.identity, self.sent, prompt.category, (*self.history, *prompt.messages))

    def answer(self, reply: str) -> float:
        """The last turn's reply joins the history; returns the think time before the next turn (0 after the last)."""
        self.history += [*self.asked, {"role": "assistant", "content": reply}]
        self.asked = ()
        return 0.0 if self.over else self.plan.think_s[self.sent - 1]


class SessionUser:
    """One closed-loop user's conversations, one after another: which turn is next and what it sends.

    ``context`` (a long-context run's document) goes ahead of the first prompt of each conversation
    only: the later turns carry it in their history."""

    def __init__(self, settings: SessionSettings, *, seed: int, user: int, shard: str, system_prompt: str = "",
                 context: str = ""):
        self.settings = settings
        self.seed = seed
        self.user = user
        self.shard = shard
        self.system_prompt = system_prompt
        self.context = context
        self.started = 0  # conversations started
        self.current: Conversation | None = None

    def next_turn(self, prompt: Prompt) -> Turn:
        """The next request: the current conversation's next turn, or a new conversation's first."""
        if self.current is None or self.current.over:
            number = self.started
            self.started += 1
            plan = conversation_plan(self.settings, self.seed, self.user, number)
            self.current = Conversation(conversation_id(self.shard, self.user, number), plan, self.system_prompt)
            prompt = prompt.with_context(self.context)
        return self.current.ask(prompt)

    def turn_ended(self, reply: str | None) -> float:
        """After a turn: ``reply`` is its whole text, or None when it did not end with one (the conversation
        ends). Returns the seconds to think before the next request."""
        if self.current is None:
            return 0.0
        if reply is None:
            self.current = None
            return 0.0
        return self.current.answer(reply)
