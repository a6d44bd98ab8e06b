"""The strict parser of every list option: user steps, measured windows, context depths.

Why strict: a list that is read loosely changes the load without a word — ``"1 2 4"`` read as
124 users, ``"1,1,2"`` running a step twice — and the run still ends ``complete``. So a list
is comma-separated values only (spaces beside a comma are allowed, nothing else), every
value is checked, and a bad one stops the command, naming the option, before anything runs.
"""

from __future__ import annotations

import re

from core.errors import UsageError

MEASURE_HELP = "measured seconds: one number for every step, or one per step (e.g. 8,8,10,12,15,20,25)"
WHOLE_NUMBER = re.compile(r"[0-9]+")
NUMBER = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")


def _pieces(text: str, option: str, example: str) -> list[str]:
    pieces = [piece.strip() for piece in text.split(",")]
    if not text.strip() or any(not piece for piece in pieces):
        raise UsageError(f"{option}: cannot read {text!r}: expected values separated by commas, e.g. {example}")
    return pieces


def parse_counts(text: str, option: str, *, minimum: int = 1, example: str = "1,2,4,8") -> list[int]:
    """``"1,2,4,8"`` -> [1, 2, 4, 8]: whole numbers >= ``minimum``, each given once."""
    pieces = _pieces(text, option, example)
    bad = [piece for piece in pieces if not WHOLE_NUMBER.fullmatch(piece)]
    if bad:
        raise UsageError(
            f"{option}: cannot read {text!r}: {bad[0]!r} is not a whole number; "
            f"expected whole numbers separated by commas, e.g. {example}"
        )
    values = [int(piece) for piece in pieces]
    small = [value for value in values if value < minimum]
    if small:
        raise UsageError(f"{option}: {small[0]} is below {minimum} in {text!r}; expected e.g. {example}")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise UsageError(f"{option}: {repeated[0]} is given twice in {text!r}; give each value once")
    return values


def parse_seconds(text: str, option: str, *, example: str = "30 or 8,8,10,20") -> float | list[float]:
    """``"30"`` -> 30.0 (every step); ``"8,8,10,20"`` -> one window per step; each > 0."""
    pieces = _pieces(text, option, example)
    bad = [piece for piece in pieces if not NUMBER.fullmatch(piece)]
    if bad:
        raise UsageError(
            f"{option}: cannot read {text!r}: {bad[0]!r} is not a number of seconds; expected e.g. {example}"
        )
    values = [float(piece) for piece in pieces]
    if any(value <= 0 for value in values):
        raise UsageError(f"{option}: every value must be above 0 seconds, found {text!r}; expected e.g. {example}")
    return values[0] if len(values) == 1 else values


def format_seconds(values: float | list[float]) -> str:
    """``30`` or ``8,8,10,20``: seconds as the options take them and reports show them
    (the inverse of :func:`parse_seconds`)."""
    items = values if isinstance(values, list) else [values]
    return ",".join(f"{value:g}" for value in items)


def seconds_per_step(values: float | list[float], steps: int, option: str = "--measure") -> list[float]:
    """One window per step: a single value for every step, or exactly one per step."""
    if not isinstance(values, list):
        return [float(values)] * steps
    if len(values) != steps:
        raise UsageError(
            f"{option}: {len(values)} measured windows for {steps} user steps; give one number, or one per step"
        )
    return [float(value) for value in values]


def parse_windows(text: str, steps: list[int], option: str = "--measure") -> float | list[float]:
    """``--measure`` read and held against the user steps: one value for every step, or one per step."""
    windows = parse_seconds(text, option)
    seconds_per_step(windows, len(steps), option)
    return windows
