"""The load that ran, by Little's law: requests in flight over a window, and the share of the load named."""

from __future__ import annotations

import numpy as np
import pytest

from core.load_reached import describe_shortfall, load_reached, mean_in_flight, sent_rate, user_held_until


def test_in_flight_counts_each_request_only_inside_the_window() -> None:
    starts = np.array([0.0, 5.0, 9.0, 12.0, np.nan])
    ends = np.array([20.0, 6.0, 11.0, 13.0, np.nan])  # [0,20] spans the window; [12,13] is after it
    # window [5, 10): 5 s + 1 s + 1 s over 5 s
    assert mean_in_flight(starts, ends, 5.0, 10.0) == pytest.approx(7 / 5)


def test_users_sending_back_to_back_hold_all_their_requests_in_flight() -> None:
    users, length = 8, 0.5
    starts = np.concatenate([np.arange(0.0, 10.0, length) for _ in range(users)])
    assert mean_in_flight(starts, starts + length, 2.0, 8.0) == pytest.approx(users)
    assert load_reached(users, None, mean_in_flight(starts, starts + length, 2.0, 8.0), None) == pytest.approx(1.0)


def test_an_open_loop_step_is_judged_by_the_rate_it_sent() -> None:
    starts = np.linspace(0.0, 9.9, 100)  # 10 req/s over [0, 10)
    assert sent_rate(starts, 0.0, 10.0) == pytest.approx(10.0)
    assert load_reached(0, 20.0, 3.0, sent_rate(starts, 0.0, 10.0)) == pytest.approx(0.5)
    assert load_reached(0, 20.0, 3.0, None) is None and load_reached(0, None, 0.0, None) is None


def test_the_shortfall_line_says_what_ran() -> None:
    assert describe_shortfall("step 1 (64 users)", 0.25, 16.0, None, None) == (
        "step 1 (64 users): the load that ran was 25% of the load named (16.0 requests in flight on average)")
    assert describe_shortfall("step 0 (8 req/s)", 0.5, 2.0, 4.0, 8.0) == (
        "step 0 (8 req/s): the load that ran was 50% of the load named (4 req/s sent)")


def test_a_conversation_turn_holds_its_user_through_the_think_time_to_its_next_turn() -> None:
    # user 0: conversation 0 turns 1-2 (think 3 s between), then conversation 1 turn 1; user 1: one-shot
    conversation = np.array([1, -1, 0, 0, 1])  # codes, listed out of order; -1: no conversation
    turn = np.array([1.0, np.nan, 2.0, 1.0, 2.0])
    starts = np.array([20.0, 0.0, 5.0, 0.0, 30.0])
    ends = np.array([21.0, 1.0, 6.0, 2.0, 31.0])
    held = user_held_until(conversation, turn, starts, ends)
    assert held.tolist() == [30.0, 1.0, 6.0, 5.0, 31.0]  # turn 1 until turn 2's start; last turns at their end
    assert mean_in_flight(starts, held, 0.0, 6.0) == pytest.approx((6 + 1) / 6)
    # a missing turn (the conversation ended early, or turn 2 was not recorded) holds nothing beyond its end
    gap = user_held_until(np.array([0, 0]), np.array([1.0, 3.0]), np.array([0.0, 9.0]), np.array([1.0, 10.0]))
    assert gap.tolist() == [1.0, 10.0]
