"""The strict parser of every list option: user steps, measured windows, context depths.

Why strict: a list that is read loosely changes the load without a word — ``"1 2 4"`` read as
124 users, ``"1,1,2"`` running a step twice — and the run still ends ``complete``. So a list
is comma-separated values only (spaces beside a comma are allowed, nothing else), every
value is checked, and a bad one stops the command, naming the option, before anything runs.

A sweep's steps are either user counts (``--steps``, a closed loop) or arrival rates
(``--rates``, an open loop); :func:`parse_load_steps` reads the pair and refuses both at once.
"""

from __future__ import annotations

import re

from core.errors import UsageError
from core.wording import counted

DEFAULT_USER_STEPS = "1,2,4,8,16,32,64"
# a sweep's defaults wherever one is started (rigbench sweep, plain Locust, the cloud loop's rigs)
SWEEP_WARMUP_SECONDS = 10.0
SWEEP_MEASURE = "30"
SWEEP_READ_TIMEOUT_S = 60.0
SWEEP_MAX_ERROR_RATE = 0.5
# After the last measured window no request starts and those in flight run to their end, for at most this
# long (enough for a full reply at a few tok/s), so the last window's tokens are the server's counts.
SWEEP_DRAIN_SECONDS = 60.0
DRAIN_HELP = ("after the last measured window, seconds requests in flight may take to finish before the "
              "sweep stops them (0: cut at once)")
STEPS_HELP = (
    f"user counts, one step each (a closed loop: each user sends back to back), e.g. 1,2,4,8; "
    f"default {DEFAULT_USER_STEPS}"
)
RATES_HELP = (
    "arrival rates in requests per second, one step each (an open loop: requests arrive on a seeded schedule "
    "whatever the server's state), e.g. 1,2,4,8; instead of --steps"
)
ARRIVALS = ("poisson", "constant", "gamma")
ARRIVAL_HELP = ("open-loop arrivals: poisson (exponential gaps), constant (evenly spaced) or gamma:SHAPE (gamma gaps; "
                "shape below 1 is burstier than poisson, e.g. gamma:0.25)")
ARRIVAL_SEED_HELP = "seed of the poisson arrival schedule (the same seed gives the same arrival times)"
MEASURE_HELP = "measured seconds: one number for every step, or one per step (e.g. 8,8,10,12,15,20,25)"
WHOLE_NUMBER = re.compile(r"[0-9]+")
# A decimal number >= 0 as a user types it or Python writes it back (repr, :g): 0.5, .5, 2, 1e-05, 1e+06. The
# exponent matters where rigbench forwards a value it read to a process of its own (Locust's options); two
# digits of it hold every value from 1e-99 to below 1e100, and no infinity.
DECIMAL = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,2})?"
NUMBER = re.compile(DECIMAL)


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


def parse_rates(text: str, option: str = "--rates", *, example: str = "1,2,4,8") -> list[float]:
    """``"0.5,1,2"`` -> [0.5, 1.0, 2.0]: requests per second, each above 0 and given once."""
    pieces = _pieces(text, option, example)
    bad = [piece for piece in pieces if not NUMBER.fullmatch(piece)]
    if bad:
        raise UsageError(
            f"{option}: cannot read {text!r}: {bad[0]!r} is not a number of requests per second; "
            f"expected numbers separated by commas, e.g. {example}"
        )
    values = [float(piece) for piece in pieces]
    if any(value <= 0 for value in values):
        raise UsageError(f"{option}: every rate must be above 0 requests per second, found {text!r}; e.g. {example}")
    repeated = sorted({value for value in values if values.count(value) > 1})
    if repeated:
        raise UsageError(f"{option}: {repeated[0]:g} is given twice in {text!r}; give each value once")
    return values


def parse_load_steps(steps: str | None, rates: str | None,
                     default_steps: str = DEFAULT_USER_STEPS) -> tuple[list[int], list[float]]:
    """(user steps, rate steps) from ``--steps`` and ``--rates``: exactly one list is non-empty.

    Neither given means the default user steps; both given is refused, since a step cannot be
    both N users sending back to back and a fixed arrival rate."""
    if steps and rates:
        raise UsageError(
            "--steps and --rates cannot be given together: --steps runs a closed loop of N users, --rates an open "
            "loop of arrivals per second; give one of them"
        )
    if rates is not None and rates != "":
        return [], parse_rates(rates, "--rates")
    if rates == "" and not steps:
        parse_rates(rates, "--rates")  # an empty --rates is refused, not taken for the default steps
    return parse_counts(steps or default_steps, "--steps"), []


def parse_choices(text: str, option: str, choices: tuple[str, ...], *, example: str) -> list[str]:
    """``"md,html"`` -> ["md", "html"]: names from ``choices``, each given once."""
    pieces = _pieces(text, option, example)
    unknown = [piece for piece in pieces if piece not in choices]
    if unknown:
        raise UsageError(
            f"{option}: cannot read {text!r}: {unknown[0]!r} is not one of {', '.join(choices)}; e.g. {example}"
        )
    repeated = sorted({piece for piece in pieces if pieces.count(piece) > 1})
    if repeated:
        raise UsageError(f"{option}: {repeated[0]} is given twice in {text!r}; give each value once")
    return pieces


def parse_arrival(text: str, option: str = "--arrival") -> str:
    """``poisson``, ``constant`` or ``gamma:SHAPE``: how an open-loop step's arrivals are spaced
    (the kind; ``parse_arrival_shape`` reads gamma's shape)."""
    kind = text.partition(":")[0]
    if kind not in ARRIVALS or (kind == "gamma") != (":" in text):
        raise UsageError(f"{option}: expected poisson, constant or gamma:SHAPE (e.g. gamma:0.25), found {text!r}")
    parse_arrival_shape(text, option)
    return kind


def parse_arrival_shape(text: str, option: str = "--arrival") -> float | None:
    """Gamma arrivals' shape k from ``gamma:K`` (gaps with a coefficient of variation 1/sqrt(k)); None
    for the other kinds."""
    kind, _, shape = text.partition(":")
    if kind != "gamma":
        return None
    if not NUMBER.fullmatch(shape.strip()) or float(shape) <= 0:
        raise UsageError(f"{option}: gamma's shape must be a number above 0, e.g. gamma:0.25; found {text!r}")
    return float(shape)


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


def seconds_per_step(values: float | list[float], steps: int, option: str = "--measure",
                     kind: str = "user") -> list[float]:
    """One window per step: a single value for every step, or exactly one per step
    (``kind`` names the steps in the message: user or rate)."""
    if not isinstance(values, list):
        return [float(values)] * steps
    if len(values) != steps:
        raise UsageError(
            f"{option}: {counted(len(values), 'measured window')} for {counted(steps, f'{kind} step')}; "
            "give one number, or one per step"
        )
    return [float(value) for value in values]


def parse_windows(text: str, steps: list[int] | list[float], option: str = "--measure",
                  kind: str = "user") -> float | list[float]:
    """``--measure`` read and held against the steps (user or rate): one value for every step, or one per step."""
    windows = parse_seconds(text, option)
    seconds_per_step(windows, len(steps), option, kind)
    return windows


def check_pin_slots(pin_slots: bool, open_loop: bool, processes: int) -> None:
    """``--pin-slots`` numbers users within one load process; an open loop has no users to number."""
    if pin_slots and (open_loop or processes != 1):
        raise UsageError("--pin-slots: users are numbered within one load process; give --steps and --processes 1")
