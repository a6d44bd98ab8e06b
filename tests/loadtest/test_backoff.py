"""A closed-loop user's wait after a refusal: doubling, capped, jittered, never under Retry-After."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from loadtest.backoff import (
    CAP_S,
    CONNECT_CAP_S,
    FIRST_S,
    REFUSAL_KINDS,
    RETRY_AFTER_CAP_S,
    Backoff,
    retry_after_seconds,
)


@pytest.mark.parametrize("kind", sorted(REFUSAL_KINDS))
def test_each_refusal_doubles_the_bound_up_to_the_cap_and_a_success_resets_it(kind: str) -> None:
    backoff = Backoff(rng=random.Random(1))
    bounds, waits = [], []
    for _ in range(10):
        waits.append(backoff.after(kind))
        bounds.append(backoff.ceiling_s)
    # a refused connection costs the server nothing: its users look again within a second of its return
    cap = CONNECT_CAP_S if kind == "connect" else CAP_S
    assert bounds[:4] == [FIRST_S, 2 * FIRST_S, 4 * FIRST_S, 8 * FIRST_S] and bounds[-1] == cap
    assert all(FIRST_S <= wait <= bound for wait, bound in zip(waits, bounds, strict=True))
    assert len({round(wait, 6) for wait in waits[4:]}) > 1, "jittered: users refused together do not return together"
    assert backoff.after(None) == 0.0 and backoff.ceiling_s == 0.0
    assert backoff.after(kind) <= FIRST_S, "after a success the doubling starts over"


@pytest.mark.parametrize("kind", ["http_500", "timeout", "disconnect", "server_error", "bad_model", "http_404"])
def test_answers_that_are_not_refusals_do_not_back_off(kind: str) -> None:
    assert Backoff().after(kind) == 0.0


def test_retry_after_is_honoured_and_bounded() -> None:
    backoff = Backoff(rng=random.Random(2))
    assert backoff.after("http_503", retry_after_s=2.0) == 2.0
    assert backoff.after("http_429", retry_after_s=3600.0) == RETRY_AFTER_CAP_S
    assert backoff.after("http_503", retry_after_s=0.0) >= FIRST_S, "a zero Retry-After still backs off"


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC).timestamp()
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(" 120 ") == 120.0
    later = format_datetime(datetime(2026, 12, 2, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert retry_after_seconds(later, now=now) == pytest.approx(30.0)
    earlier = format_datetime(datetime(2026, 12, 2, 11, 0, 0, tzinfo=UTC), usegmt=True)
    assert retry_after_seconds(earlier, now=now) == 0.0
    for unreadable in (None, "", "soon", "-5", "1.5", "Wed, 99 Foo 2026 12:00:00"):
        assert retry_after_seconds(unreadable) is None, unreadable
