"""Conversations as pure bookkeeping: seeded plans, the history each turn sends, a user's conversations in turn."""

from __future__ import annotations

import statistics

import pytest

from core.rundir.models import SessionSettings
from loadtest.prompts import Prompt
from loadtest.sessions import Conversation, SessionUser, conversation_id, conversation_plan

SETTINGS = SessionSettings(turns_min=2, turns_max=5, think="exponential", think_seconds=2.0)


def prompt(text: str, category: str = "chat") -> Prompt:
    return Prompt(category, ({"role": "user", "content": text},))


def test_a_plan_is_a_function_of_the_seed_the_user_and_the_conversation() -> None:
    plan = conversation_plan(SETTINGS, seed=7, user=3, number=2)
    assert conversation_plan(SETTINGS, seed=7, user=3, number=2) == plan
    assert len(plan.think_s) == plan.turns - 1 and all(think > 0 for think in plan.think_s)
    others = {conversation_plan(SETTINGS, seed, user, number)
              for seed, user, number in ((8, 3, 2), (7, 4, 2), (7, 3, 3))}
    assert plan not in others and len(others) == 3, "another seed, user or conversation draws anew"


def test_turns_are_uniform_over_the_range_and_think_times_have_the_mean_asked() -> None:
    plans = [conversation_plan(SETTINGS, 0, user, number) for user in range(40) for number in range(50)]
    turns = [plan.turns for plan in plans]
    assert set(turns) == {2, 3, 4, 5}
    assert all(abs(turns.count(n) / len(turns) - 0.25) < 0.03 for n in (2, 3, 4, 5))
    thinks = [think for plan in plans for think in plan.think_s]
    assert statistics.mean(thinks) == pytest.approx(2.0, rel=0.05)
    assert statistics.pstdev(thinks) == pytest.approx(2.0, rel=0.1), "exponential: the spread is the mean"
    constant = SessionSettings(turns_min=3, turns_max=3, think="constant", think_seconds=1.5)
    assert conversation_plan(constant, 0, 0, 0).think_s == (1.5, 1.5)


def test_each_turn_sends_the_system_prompt_and_every_earlier_turn_with_its_reply() -> None:
    plan = conversation_plan(SessionSettings(turns_min=3, turns_max=3, think="constant", think_seconds=0.5), 0, 0, 0)
    conversation = Conversation("p/u0/c0", plan, system_prompt="be brief")
    first = conversation.ask(prompt("one", "code"))
    assert (first.number, first.category, first.conversation) == (1, "code", "p/u0/c0")
    assert first.messages == ({"role": "system", "content": "be brief"}, {"role": "user", "content": "one"})
    assert conversation.answer("reply one") == 0.5
    second = conversation.ask(prompt("two"))
    assert second.messages == (*first.messages, {"role": "assistant", "content": "reply one"},
                               {"role": "user", "content": "two"})
    assert second.prompt == Prompt("chat", second.messages)
    conversation.answer("reply two")
    third = conversation.ask(prompt("three"))
    assert third.number == 3 and third.messages[:len(second.messages)] == second.messages
    assert conversation.answer("reply three") == 0.0 and conversation.over
    with pytest.raises(ValueError, match="has had its 3 turns"):
        conversation.ask(prompt("four"))


def test_a_user_starts_a_new_conversation_after_the_last_turn_or_a_failed_one() -> None:
    settings = SessionSettings(turns_min=2, turns_max=2, think="constant", think_seconds=1.0)
    user = SessionUser(settings, seed=0, user=5, shard="host-1", system_prompt="sys", context="DOC")
    sent = []
    for reply in ("a", "b", None, "c", "d"):
        sent.append(user.next_turn(prompt(f"q{len(sent)}")))
        user.turn_ended(reply)
    assert [(turn.conversation, turn.number) for turn in sent] == [
        ("host-1/u5/c0", 1), ("host-1/u5/c0", 2), ("host-1/u5/c1", 1), ("host-1/u5/c2", 1), ("host-1/u5/c2", 2)]
    # the run's document goes ahead of each conversation's first prompt only: later turns hold it in their history
    assert sent[0].messages[1]["content"] == "DOC\n\nq0" and sent[1].messages[-1]["content"] == "q1"
    assert sent[3].messages == ({"role": "system", "content": "sys"}, {"role": "user", "content": "DOC\n\nq3"})
    assert conversation_id("host-1", 5, 2) == "host-1/u5/c2"


def test_think_times_come_back_from_the_plan_between_turns_and_none_before_a_new_conversation() -> None:
    user = SessionUser(SETTINGS, seed=3, user=1, shard="s")
    plan = conversation_plan(SETTINGS, 3, 1, 0)
    thinks = []
    for _ in range(plan.turns):
        user.next_turn(prompt("q"))
        thinks.append(user.turn_ended("r"))
    assert thinks == [*plan.think_s, 0.0]
    assert user.next_turn(prompt("q")).conversation == "s/u1/c1"
