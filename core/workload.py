"""The workload options' text, read into the run's settings in one place for every command.

``rigbench sweep``, ``rigbench local`` and a hand-run Locust take the same spellings:

    --prompt-length / --output-length   256 | fixed:256 | uniform:64-512
                                        | normal:mean=256,sd=64,max=1024[,min=16]
                                        | lognormal:median=256,sigma=0.6,max=4096[,min=16]
    --turns                             3 | 2-6            (turns per conversation, uniform)
    --think                             constant:2 | exponential:5   (seconds between turns)
    --slo                               ttft_p90=0.5,tpot_p90=50ms,e2e_p99=20

Each mistake is refused with one line naming the option and what was expected.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import ValidationError

from core.errors import UsageError
from core.lists import DECIMAL
from core.rundir.models import LengthDistribution, LoadSettings, slo_keys

LENGTH_EXAMPLE = "256, uniform:64-512, normal:mean=256,sd=64,max=1024 or lognormal:median=256,sigma=0.6,max=4096"
_RANGE = re.compile(r"\s*([0-9]+)\s*-\s*([0-9]+)\s*")
_WHOLE = re.compile(r"\s*[0-9]+\s*")
_SECONDS = re.compile(rf"\s*({DECIMAL})\s*(ms|s)?\s*")
_LENGTH_KEYS = {"fixed": (), "uniform": (), "normal": ("mean", "sd"), "lognormal": ("median", "sigma")}


def parse_length(text: str, option: str) -> LengthDistribution:
    """A length distribution from its text (module docstring); the bounds clip every draw."""
    kind, _, rest = text.strip().partition(":")
    if _WHOLE.fullmatch(kind) and not rest:
        kind, rest = "fixed", kind
    if kind not in _LENGTH_KEYS:
        raise UsageError(f"{option}: cannot read {text!r}: expected {LENGTH_EXAMPLE}")
    fields: dict[str, float | int] = {}
    if kind == "fixed":
        if not _WHOLE.fullmatch(rest):
            raise UsageError(f"{option}: cannot read {text!r}: a fixed length is a whole number of tokens, e.g. 256")
        fields = {"value": int(rest), "minimum": int(rest), "maximum": int(rest)}
    elif kind == "uniform":
        match = _RANGE.fullmatch(rest)
        if match is None:
            raise UsageError(f"{option}: cannot read {text!r}: a uniform length is a range of tokens, e.g. "
                             "uniform:64-512")
        fields = {"minimum": int(match[1]), "maximum": int(match[2])}
    else:
        fields = _keyed_numbers(rest, option, text, allowed=(*_LENGTH_KEYS[kind], "min", "max"))
        if "max" not in fields:
            raise UsageError(f"{option}: {text!r} has no max=: a {kind} length is clipped to a stated bound, e.g. "
                             f"{kind}:{'mean=256,sd=64' if kind == 'normal' else 'median=256,sigma=0.6'},max=1024")
        fields["minimum"] = int(fields.pop("min", 1))
        fields["maximum"] = int(fields.pop("max"))
    try:
        return LengthDistribution(kind=kind, **fields)  # type: ignore[arg-type]
    except ValidationError as error:
        reason = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise UsageError(f"{option}: {text!r}: {reason}") from None


def _keyed_numbers(rest: str, option: str, text: str, *, allowed: tuple[str, ...]) -> dict[str, float | int]:
    fields: dict[str, float | int] = {}
    for piece in rest.split(","):
        key, equals, value = piece.partition("=")
        key = key.strip()
        if not equals or key not in allowed:
            raise UsageError(f"{option}: cannot read {piece.strip()!r} in {text!r}: expected "
                             f"{', '.join(name + '=' for name in allowed)}")
        try:
            number = float(value)
        except ValueError:
            raise UsageError(f"{option}: {key}={value.strip()!r} in {text!r} is not a number") from None
        if key in ("min", "max") and number != int(number):
            raise UsageError(f"{option}: {key}={value.strip()} in {text!r}: bounds are whole tokens")
        fields[key] = number
    return fields


def parse_turns(text: str, option: str = "--turns") -> tuple[int, int]:
    """``3`` -> (3, 3); ``2-6`` -> (2, 6): each conversation's turns, drawn uniformly."""
    match = _RANGE.fullmatch(text)
    if match is not None:
        low, high = int(match[1]), int(match[2])
    elif _WHOLE.fullmatch(text):
        low = high = int(text)
    else:
        raise UsageError(f"{option}: cannot read {text!r}: expected a number of turns (3) or a range (2-6)")
    if low < 1 or low > high:
        raise UsageError(f"{option}: {text!r}: expected 1 <= first <= last turns")
    return low, high


def parse_think(text: str, option: str = "--think") -> tuple[str, float]:
    """``exponential:5`` -> ("exponential", 5.0); ``constant:2`` or a bare ``2`` -> ("constant", 2.0)."""
    kind, _, seconds = text.strip().partition(":")
    if not seconds:
        kind, seconds = "constant", kind
    if kind not in ("constant", "exponential"):
        raise UsageError(f"{option}: cannot read {text!r}: expected constant:SECONDS or exponential:MEAN_SECONDS")
    return kind, parse_duration(seconds, option, text)


def parse_duration(value: str, option: str, text: str) -> float:
    """Seconds, or milliseconds with ``ms`` (``0.5``, ``500ms``, ``2s``)."""
    match = _SECONDS.fullmatch(value)
    if match is None:
        raise UsageError(f"{option}: cannot read {value.strip()!r} in {text!r}: expected seconds (0.5, 2s) or "
                         "milliseconds (500ms)")
    return float(match[1]) / (1000.0 if match[2] == "ms" else 1.0)


def parse_slo(text: str, option: str = "--slo") -> dict[str, float]:
    """``ttft_p90=0.5,tpot_p90=50ms`` -> {"ttft_p90": 0.5, "tpot_p90": 0.05}: targets in seconds."""
    targets: dict[str, float] = {}
    if not text.strip():
        raise UsageError(f"{option}: no target given; expected e.g. ttft_p90=0.5,tpot_p90=50ms")
    for piece in text.split(","):
        key, equals, value = piece.partition("=")
        key = key.strip()
        if not equals:
            raise UsageError(f"{option}: cannot read {piece.strip()!r}: expected FIGURE_PERCENTILE=SECONDS, e.g. "
                             "ttft_p90=0.5")
        if key not in slo_keys():
            raise UsageError(f"{option}: unknown figure {key!r}; expected one of {', '.join(slo_keys())}")
        if key in targets:
            raise UsageError(f"{option}: {key} is given twice in {text!r}")
        seconds = parse_duration(value, option, text)
        if seconds <= 0:
            raise UsageError(f"{option}: {key}={value.strip()}: a target is above zero")
        targets[key] = seconds
    return targets


def format_length(length: LengthDistribution) -> str:
    """The text ``parse_length`` reads back to the same distribution (a sweep's Locust command line)."""
    if length.kind == "fixed":
        return str(length.value)
    if length.kind == "uniform":
        return f"uniform:{length.minimum}-{length.maximum}"
    first, second = ("mean", "sd") if length.kind == "normal" else ("median", "sigma")
    return (f"{length.kind}:{first}={getattr(length, first):g},{second}={getattr(length, second):g},"
            f"min={length.minimum},max={length.maximum}")


def format_slo(targets: dict[str, float]) -> str:
    """The text ``parse_slo`` reads back to the same targets."""
    return ",".join(f"{key}={seconds!r}" for key, seconds in targets.items())


def describe_arrivals(load: LoadSettings) -> str:
    """How a run's requests arrived, in words that tell two workloads apart: ``closed loop``,
    ``poisson (seed 0)``, ``gamma:0.25 (seed 0)``, ``constant`` or the replayed trace (file, digest, speed)."""
    if load.trace is not None:
        trace = load.trace
        return f"trace {Path(trace.path).name} ({trace.sha256[:12]}, {trace.rows} rows, speed {trace.speed:g})"
    if not load.open_loop:
        return "closed loop"
    kind = f"gamma:{load.arrival_shape:g}" if load.arrival == "gamma" and load.arrival_shape else load.arrival
    return kind if kind == "constant" else f"{kind} (seed {load.arrival_seed})"


def describe_lengths(load: LoadSettings) -> tuple[str, str]:
    """(the prompts, the replies' length) a run sent: its prompt set and max_tokens, or drawn, or the trace's."""
    if load.trace is not None:
        return "the trace's prompt lengths", "the trace's output lengths"
    seed = f" (workload seed {load.workload_seed})"
    prompts = load.prompts if load.prompt_length is None else f"drawn {format_length(load.prompt_length)}{seed}"
    replies = (str(load.max_tokens) if load.output_length is None
               else f"drawn {format_length(load.output_length)}{seed}")
    return prompts, replies


def describe_conversations(load: LoadSettings) -> str:
    """Whether a run's users held conversations, and how (turns, think time, system prompt, seed), beside
    whether the server's prompt cache was asked to reuse prompts: both change what each request costs."""
    cache = "prompt cache on" if load.cache_prompt else "prompt cache off"
    if load.sessions is None:
        return f"one-shot prompts, {cache}"
    sessions = load.sessions
    return (f"conversations of {sessions.turns_min}-{sessions.turns_max} turns, thinking {sessions.think} "
            f"{sessions.think_seconds:g} s, a {sessions.system_prompt_tokens}-token system prompt (workload seed "
            f"{load.workload_seed}), {cache}")
