"""A request's chunks and tokens inside its step's window, counted where they arrived."""

from __future__ import annotations

import pytest

from loadtest.window_share import window_share

TIMES = [1.0, 2.0, 3.0, 4.0, 5.0]  # five chunks


@pytest.mark.parametrize(
    ("counts", "total", "start", "end", "expected"),
    [
        # the window opens inside the stream: chunks at 3, 4, 5 are in [2.5, 10); running counts 2,5,6,9,12
        ([2, 5, 6, 9, 12], 12, 2.5, 10.0, (3, 7)),
        # the window closes inside it: chunks at 1, 2 in [0, 2.5)
        ([2, 5, 6, 9, 12], 12, 0.0, 2.5, (2, 5)),
        # both edges inside: chunks at 2, 3 in [1.5, 3.5)
        ([2, 5, 6, 9, 12], 12, 1.5, 3.5, (2, 4)),
        # a chunk exactly at the window's start is inside, one exactly at its end is not
        ([1, 2, 3, 4, 5], 5, 2.0, 4.0, (2, 2)),
        # the final usage counts tokens after the last content chunk's count: the last chunk takes them
        ([2, 5, 6, 9, 11], 12, 4.5, 10.0, (1, 3)),
        # no running counts (a server that is not llama-server): chunks only
        ([None] * 5, 12, 2.5, 10.0, (3, None)),
        # a count missing at an edge: chunks only
        ([2, None, 6, 9, 12], 12, 2.5, 10.0, (3, None)),
    ],
)
def test_chunks_and_tokens_inside_the_window(counts, total, start, end, expected):
    assert window_share(TIMES, counts, total, start, end) == expected


@pytest.mark.parametrize(("start", "end"), [(0.0, 10.0), (5.5, 10.0), (0.0, 0.5), (0.5, 1.0)])
def test_a_stream_wholly_on_one_side_of_each_edge_keeps_nothing(start, end):
    assert window_share(TIMES, [1, 2, 3, 4, 5], 5, start, end) == (None, None)


def test_a_cut_request_without_a_final_count_uses_its_last_running_count():
    assert window_share(TIMES, [2, 5, 6, 9, 12], None, 2.5, 10.0) == (3, 7)
