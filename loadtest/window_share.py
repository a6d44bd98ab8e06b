"""How much of one request arrived inside its step's measured window, counted per chunk.

Why: a request streaming across a window's edge (a warm-up request still decoding when the
window opens, a measured one still decoding when it closes) puts only part of its tokens in the
window. Spread evenly over its span, that part is wrong whenever the stream is uneven (a slow
first token, a pause, chunks of several tokens), and the error does not average out: every
edge request errs the same way. Each chunk's arrival time is known when the record is made, so
the chunks on each side of the edges are counted then, and with them the server's running token
count where it streams one. A record keeps these counts only when an edge falls inside its
stream; analysis then takes them in place of the spread.
"""

from __future__ import annotations

from bisect import bisect_left


def window_share(
    chunk_times: list[float], chunk_counts: list[int | None], total_tokens: int | None, start: float, end: float
) -> tuple[int | None, int | None]:
    """(content chunks that arrived in ``[start, end)``, output tokens among them), or (None, None)
    when no edge falls inside the stream (all of it on one side of each edge: the span says it
    exactly). The tokens are None unless the server's running count is known at each edge."""
    chunks = len(chunk_times)
    before_start = bisect_left(chunk_times, start)
    before_end = bisect_left(chunk_times, end)
    if not (0 < before_start < chunks or 0 < before_end < chunks):
        return None, None
    return before_end - before_start, _tokens_between(chunk_counts, total_tokens, before_start, before_end)


def _tokens_between(counts: list[int | None], total: int | None, first: int, stop: int) -> int | None:
    """Tokens of chunks ``first..stop-1`` from the running counts (each chunk's count includes it)."""
    if len(counts) == 0:
        return None

    def through(index: int) -> int | None:  # tokens of the first ``index`` chunks
        if index == 0:
            return 0
        if index == len(counts) and total is not None:
            return total
        return counts[index - 1]

    low, high = through(first), through(stop)
    if low is None or high is None or high < low:
        return None
    return high - low
