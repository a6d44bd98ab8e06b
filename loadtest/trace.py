"""A request trace to replay: one JSON object per line, in arrival order.

    {"offset_s": 0.00, "prompt_tokens": 812, "output_tokens": 143}
    {"offset_s": 0.35, "prompt_tokens": 95, "output_tokens": 310, "conversation": "c7", "turn": 2}

``offset_s`` is the arrival time in seconds after the trace's start (not decreasing from one line
to the next); ``prompt_tokens`` and ``output_tokens`` are whole numbers >= 1; ``conversation``
and ``turn`` (from 1) are optional and travel to the records. Blank lines are skipped; any other
key, a missing one, or a value of the wrong kind is refused with ``file:line``. The replay is an
open loop: each row is sent at its offset (divided by ``--trace-speed``) whatever the server's
state, asking for ``output_tokens`` with ``ignore_eos`` behind a prompt of ``prompt_tokens``
(``loadtest.lengths``).

A replay is one open-loop step at the trace's mean rate (rows / span). The first row arrives at
the step's start and row i ``(offset_s[i] - offset_s[0]) / speed`` seconds after it. A step
(warm-up and measured window) longer than the trace replays it again, each pass one span later,
so the whole window is loaded at the trace's rate: a pass's first row arrives with the last row
of the pass before, and a conversation of a later pass is named apart (``c7``, then ``c7#2``).
Rows past the step's end are not sent. Arrival n is row ``n mod rows`` of pass ``n // rows``,
and ``--processes`` share the arrivals as poisson ones (``loadtest.arrivals``).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import ConfigDict, Field, ValidationError

from core.digest import file_sha256
from core.errors import LoadTestError
from core.rundir.models import TraceSource
from core.strict import Strict
from core.validation import describe_validation_error


class TraceRow(Strict):
    """One line of a trace."""

    model_config = ConfigDict(frozen=True)

    offset_s: float = Field(ge=0)
    prompt_tokens: int = Field(ge=1)
    output_tokens: int = Field(ge=1)
    conversation: str | None = None
    turn: int | None = Field(None, ge=1)


@lru_cache(maxsize=4)
def _read(path: str, sha256: str) -> tuple[TraceRow, ...]:
    rows: list[TraceRow] = []
    with open(path, encoding="utf-8", errors="replace") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                row = TraceRow.model_validate(json.loads(line))
            except json.JSONDecodeError as error:
                raise LoadTestError(f"{where}: not JSON ({error.msg}); a trace holds one JSON object per line "
                                    "(offset_s, prompt_tokens, output_tokens)") from None
            except ValidationError as error:
                raise LoadTestError(f"{describe_validation_error(error, where)}; expected offset_s, prompt_tokens "
                                    "and output_tokens (conversation and turn optional)") from None
            if rows and row.offset_s < rows[-1].offset_s:
                raise LoadTestError(f"{where}: offset_s {row.offset_s:g} is before the line above's "
                                    f"({rows[-1].offset_s:g}); a trace is in arrival order")
            rows.append(row)
    if not rows:
        raise LoadTestError(f"{path}: the trace holds no rows; expected one JSON object per line "
                            "(offset_s, prompt_tokens, output_tokens)")
    return tuple(rows)


def trace_source(path: Path | str, speed: float = 1.0, option: str = "--trace") -> TraceSource:
    """The trace as the run's settings name it (path, sha256, rows, speed), read and checked whole."""
    path = Path(path)
    if not path.is_file():
        raise LoadTestError(f"{option} {path}: no such file; expected a JSONL trace (offset_s, prompt_tokens, "
                            "output_tokens per line)")
    if speed <= 0:
        raise LoadTestError(f"--trace-speed: expected a number above 0, found {speed:g}")
    sha256 = file_sha256(path)
    rows = _read(str(path.resolve()), sha256)
    return TraceSource(path=str(path.resolve()), sha256=sha256, rows=len(rows), speed=speed)


def trace_rows(source: TraceSource) -> tuple[TraceRow, ...]:
    """The rows of the run's trace, checked against the digest the run recorded."""
    path = Path(source.path)
    if not path.is_file():
        raise LoadTestError(f"trace {path}: no longer there; the run recorded sha256 {source.sha256[:12]}…")
    sha256 = file_sha256(path)
    if sha256 != source.sha256:
        raise LoadTestError(f"trace {path}: changed since the run began (sha256 {sha256[:12]}…, the run recorded "
                            f"{source.sha256[:12]}…)")
    return _read(str(path), sha256)


def trace_rate(source: TraceSource) -> float:
    """The trace's mean arrival rate at the replay's speed (requests per second): its one step's rate."""
    rows = trace_rows(source)
    span = rows[-1].offset_s - rows[0].offset_s
    if span <= 0:
        raise LoadTestError(f"trace {source.path}: every row arrives at offset {rows[0].offset_s:g}; a replay "
                            "needs arrivals spread over time")
    return len(rows) / span * source.speed


def trace_arrivals(source: TraceSource, duration: float) -> np.ndarray:
    """A replay's arrival offsets in ``[0, duration)`` seconds from its step's start, in arrival
    order: the rows at their offsets over ``speed``, then the trace again for as long as the step
    lasts (module docstring)."""
    rows = trace_rows(source)
    offsets = np.array([row.offset_s for row in rows]) - rows[0].offset_s
    span = float(offsets[-1])
    if duration <= 0:
        return offsets[:0]
    if span <= 0:  # every row at one instant (trace_rate refuses such a trace for a sweep): sent once
        return offsets
    passes = int(np.ceil(duration * source.speed / span)) + 1
    times = (offsets[None, :] + span * np.arange(passes)[:, None]).ravel() / source.speed
    return times[times < duration]
