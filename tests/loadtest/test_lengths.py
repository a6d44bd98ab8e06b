"""Drawn lengths (``loadtest.lengths``): bounds, seeds, the draws' centre, and prompts cut by tokens."""

from __future__ import annotations

import numpy as np
import pytest

from core.rundir.models import LengthDistribution
from core.workload import parse_length
from loadtest.lengths import (
    CLOSED_LOOP_KEY,
    OPEN_LOOP_KEY,
    draw_length,
    draw_lengths,
    row_lengths,
)
from loadtest.long_context import DocumentTokens
from loadtest.trace import TraceRow

DRAWS = 20_000


def many(distribution: LengthDistribution, seed: int = 0) -> np.ndarray:
    return np.array([draw_lengths(distribution, None, seed, (OPEN_LOOP_KEY, n)).prompt_tokens for n in range(DRAWS)])


def test_a_fixed_length_is_exact() -> None:
    assert set(many(parse_length("256", "--prompt-length")).tolist()) == {256}


@pytest.mark.parametrize("text", [
    "uniform:64-512",
    "normal:mean=100,sd=80,min=20,max=150",  # both bounds clip often
    "lognormal:median=256,sigma=1.5,min=16,max=1024",
])
def test_every_draw_keeps_to_its_bounds_and_reaches_them(text: str) -> None:
    distribution = parse_length(text, "--prompt-length")
    draws = many(distribution)
    assert draws.min() == distribution.minimum and draws.max() == distribution.maximum


def test_the_centre_of_many_draws() -> None:
    """20,000 draws, bounds far from the centre: the mean (uniform, normal) or median (lognormal) is within 1 %
    (the standard error is under 0.3 % of it in each case)."""
    uniform = many(parse_length("uniform:64-512", "--prompt-length"))
    assert uniform.mean() == pytest.approx((64 + 512) / 2, rel=0.01)
    normal = many(parse_length("normal:mean=300,sd=50,max=2000", "--prompt-length"))
    assert normal.mean() == pytest.approx(300, rel=0.01)
    assert normal.std() == pytest.approx(50, rel=0.03)
    lognormal = many(parse_length("lognormal:median=256,sigma=0.6,max=100000", "--prompt-length"))
    assert np.median(lognormal) == pytest.approx(256, rel=0.01)
    # lognormal = median x exp(sigma x N(0, 1)): the log's spread is sigma
    assert np.log(lognormal).std() == pytest.approx(0.6, rel=0.03)


def test_the_seed_and_the_request_key_reproduce_each_draw() -> None:
    prompt = parse_length("lognormal:median=256,sigma=0.6,max=4096", "--prompt-length")
    output = parse_length("uniform:16-256", "--output-length")

    def users(seed: int) -> list:
        return [draw_lengths(prompt, output, seed, (CLOSED_LOOP_KEY, user, sent)) for user in range(4)
                for sent in range(8)]

    first = users(7)
    assert first == users(7) and first != users(8)
    # a request's draw is its key's, whatever was drawn before it (another process may have drawn the others)
    assert draw_lengths(prompt, output, 7, (CLOSED_LOOP_KEY, 3, 5)) == first[3 * 8 + 5]
    # the closed and open loops never share a draw
    assert draw_lengths(prompt, output, 7, (OPEN_LOOP_KEY, 3)) != draw_lengths(prompt, output, 7, (CLOSED_LOOP_KEY, 3))
    assert all(0.0 <= lengths.at < 1.0 for lengths in first)


def test_without_an_output_distribution_the_run_s_max_tokens_stand() -> None:
    drawn = draw_lengths(parse_length("uniform:4-8", "--prompt-length"), None, 0, (OPEN_LOOP_KEY, 0))
    assert drawn.output_tokens is None and 4 <= (drawn.prompt_tokens or 0) <= 8
    assert draw_length(parse_length("normal:mean=5,sd=0,max=9", "--output-length"), np.random.default_rng(0)) == 5


def test_a_trace_row_s_lengths_and_its_conversation_across_passes() -> None:
    first = TraceRow(offset_s=0.25, prompt_tokens=12, output_tokens=16, conversation="a", turn=1)
    second = TraceRow(offset_s=1.0, prompt_tokens=30, output_tokens=12, conversation="a", turn=2)
    lone = TraceRow(offset_s=0.5, prompt_tokens=90, output_tokens=4)
    one, two = row_lengths(first, 0, 1, 0), row_lengths(second, 0, 3, 0)
    assert (one.prompt_tokens, one.output_tokens, one.conversation, one.turn) == (12, 16, "a", 1)
    assert one.at == two.at  # one conversation's turns are cut from one place: the later begins as the earlier
    again = row_lengths(first, 0, 5, 1)
    assert (again.conversation, again.turn) == ("a#2", 1) and again.at != one.at
    assert row_lengths(lone, 0, 2, 0).conversation is None
    assert row_lengths(lone, 0, 2, 0).at != row_lengths(lone, 0, 6, 1).at


def document(pieces: list[bytes]) -> DocumentTokens:
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(piece) for piece in pieces], out=starts[1:])
    return DocumentTokens(b"".join(pieces), starts)


def test_a_prompt_is_cut_by_token_count_from_its_place() -> None:
    words = document([f"w{k} ".encode() for k in range(100)])
    assert words.tokens == 100
    assert words.cut(3, 0.0) == "w0 w1 w2 "
    assert words.cut(3, 0.999999) == "w97 w98 w99 "
    assert words.cut(100, 0.5).split() == [f"w{k}" for k in range(100)]
    for tokens in (1, 7, 50):
        for at in np.linspace(0, 0.99, 11):
            assert len(words.cut(tokens, float(at)).split()) == tokens
    with pytest.raises(Exception, match="1 to 100"):
        words.cut(101, 0.0)


def test_a_piece_that_splits_a_character_is_dropped_at_the_edge() -> None:
    """llama-server gives a token that is not whole UTF-8 as its bytes: a cut through a character drops it."""
    euro = "€".encode()
    pieces = document([b"a", euro[:1], euro[1:], b"b"])
    assert pieces.cut(4, 0.0) == "a€b"
    assert pieces.cut(2, 0.5) == "€"
    assert pieces.cut(2, 0.0) == "a"  # "a" and half of "€"
