"""The load that ran, by Little's law: requests in flight over a window, and the share of the load named."""

from __future__ import annotations

import numpy as np
import pytest

from core.load_reached import (
    describe_shortfall,
    load_reached,
    mean_in_flight,
    sent_rate,
    session_users,
    user_held_until,
)


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


def test_a_session_users_request_holds_it_until_its_next_request_and_its_last_until_the_load_ends() -> None:
    # user 0: conversation 0 turns 1-2 (think 3 s between), then conversation 1 at once; user 1: thinking
    # past its only turn when the load ends at 40; and a one-shot request
    conversations = np.array(["p/u0/c1", None, "p/u0/c0", "p/u0/c0", "p/u1/c0"], dtype=object)
    users = session_users(conversations)
    assert users[1] == -1 and users[0] == users[2] == users[3] != users[4]
    starts = np.array([7.0, 0.0, 5.0, 0.0, 1.0])
    ends = np.array([8.0, 1.0, 6.0, 2.0, 3.0])
    held = user_held_until(users, starts, ends, load_end=40.0)
    assert held.tolist() == [40.0, 1.0, 7.0, 5.0, 40.0]
    assert mean_in_flight(starts, held, 0.0, 10.0) == pytest.approx((10 + 1 + 9) / 10)
    # no session records: every request at its end
    assert user_held_until(np.array([-1, -1]), np.array([0.0, 9.0]), np.array([1.0, 10.0]), 40.0).tolist() == [
        1.0, 10.0]
