"""Options shared by the commands: one vocabulary, each name with one meaning.

Every command says the same thing the same way: ``--steps`` (user counts), ``--warmup``,
``--measure``, ``--runs-dir``, ``--context-tokens``, ``--model-file`` (a GGUF to serve),
``--model-name`` (the name sent in requests), ``--url`` (a running server, ``NAME=URL`` when there
are several) and ``NAME=FLAGS`` for a served configuration (``--arm`` of an eval, ``--trial`` of
autotune), read by :func:`parse_named_flags`.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

import typer

from core.errors import LoadTestError, UsageError
from core.lists import (
    ARRIVAL_HELP,
    ARRIVAL_SEED_HELP,
    DEFAULT_USER_STEPS,
    DRAIN_HELP,
    MEASURE_HELP,
    RATES_HELP,
    STEPS_HELP,
    SWEEP_DRAIN_SECONDS,
    parse_arrival,
    parse_arrival_shape,
)
from core.workload import LENGTH_EXAMPLE
from loadtest.locust_options import THINK_DEFAULT, TURNS_DEFAULT, load_steps, workload_fields
from rigbench.load_processes import PROCESSES_HELP

RUNS_DIR_HELP = "folder the run directories go in"


def folder_to_write(path: Path | str | None, flag: str) -> Path | None:
    """A folder a command will create things in: refused, before anything is made, when it or the
    nearest part of it that exists is a file, or cannot be written."""
    if path is None:
        return None
    path = Path(path)
    for existing in (path, *path.parents):
        if not existing.exists():
            continue
        if not existing.is_dir():
            named = "" if existing == path else f" ({existing} is a file)"
            raise UsageError(f"{flag} {path}: not a folder{named}; give a folder (created if missing)")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{flag} {path}: {existing} cannot be written by this user")
        break
    return path


def folder_option(default: Any, flag: str, help: str) -> Any:  # noqa: A002 - typer's own keyword
    """``--runs-dir`` or a folder ``--out``, checked by :func:`folder_to_write` as it is parsed."""
    return typer.Option(default, flag, help=help, callback=lambda value: folder_to_write(value, flag))


def runs_dir_option(default: Path | str = Path("runs"), help: str = RUNS_DIR_HELP) -> Any:  # noqa: A002
    return folder_option(Path(default), "--runs-dir", help)


def parse_named_flags(items: list[str], option: str) -> list[tuple[str, list[str]]]:
    """``NAME=FLAGS`` items, in order: a served configuration's name and its llama-server flags
    (shell-quoted; empty for the profile as it is). Names must differ: each names a run."""
    parsed: list[tuple[str, list[str]]] = []
    for item in items:
        name, equals, flags = item.partition("=")
        name = name.strip()
        if not equals or not name:
            raise UsageError(f"{option}: cannot read {item!r}; expected NAME=SERVER FLAGS, "
                             "e.g. 'drafter=--model-draft d.gguf'")
        try:
            parsed.append((name, shlex.split(flags)))
        except ValueError as error:
            raise UsageError(f"{option} {item!r}: cannot read the flags: {error}") from None
    names = [name for name, _ in parsed]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise UsageError(f"{option}: {repeated[0]!r} is given twice; name each configuration once")
    return parsed


# The options of the commands that serve a profile here (local, serve, autotune), said once.
def profile_option(default: str = "tiny") -> Any:
    return typer.Option(default, "--profile", "-p", help="bundled profile name or .toml path")


def backend_option() -> Any:
    return typer.Option("auto", "--backend", help="auto, cpu or cuda")


def model_file_option() -> Any:
    return typer.Option(None, "--model-file", help="serve this GGUF instead of the profile's")


def drafter_option() -> Any:
    return typer.Option(None, "--drafter", help="drafter GGUF for speculative decoding")


def no_drafter_option() -> Any:
    return typer.Option(False, "--no-drafter", help="serve without the profile's drafter")


def server_arg_option() -> Any:
    return typer.Option(
        [], "--server-arg", help="llama-server flag(s) replacing the profile's, e.g. --server-arg='--parallel 64'"
    )


def mps_option() -> Any:
    return typer.Option(
        None, "--mps", metavar="auto|on|off", help="CUDA's Multi-Process Service for the replicas: auto (on when two "
        "or more share a GPU and nvidia-cuda-mps-control is found), on (refused where it is missing) or off "
        "(default: the profile's [server] mps)")


def server_overrides(items: list[str]) -> list[str]:
    """``--server-arg`` values, each shell-split (one item may hold a flag and its value)."""
    return [token for item in items for token in shlex.split(item)]



# The options of a sweep's load (core.rundir.LoadSettings), said once for every command that takes them;
# core.lists.LOAD_FLAGS names the field each one fills (a test holds the commands to it).
def steps_option() -> Any:
    return typer.Option(None, "--steps", help=STEPS_HELP)


def rates_option() -> Any:
    return typer.Option(None, "--rates", help=RATES_HELP)


def arrival_option() -> Any:
    return typer.Option("poisson", "--arrival", help=ARRIVAL_HELP)


def arrival_seed_option() -> Any:
    return typer.Option(0, "--arrival-seed", min=0, help=ARRIVAL_SEED_HELP)


def warmup_option(default: float, note: str = "") -> Any:
    return typer.Option(default, "--warmup", min=0.0, help="warm-up seconds per step" + note)


def measure_option(default: str, note: str = "") -> Any:
    return typer.Option(default, "--measure", help=MEASURE_HELP + note)


def prompts_option() -> Any:
    return typer.Option("mixed", "--prompts", help="mixed, a category, or a JSONL file")


def processes_option() -> Any:
    return typer.Option("1", "--processes", help=PROCESSES_HELP)


def drain_option() -> Any:
    return typer.Option(SWEEP_DRAIN_SECONDS, "--drain", min=0.0, help=DRAIN_HELP)


def pin_slots_option() -> Any:
    return typer.Option(
        False, "--pin-slots", help="user i asks for server slot i (llama-server's id_slot; --steps, "
        "--processes 1): an experiment's bound for the server's own slot choice, not real traffic",
    )


# The workload's options (conversations, drawn lengths, a trace, targets): their text is read by
# loadtest.locust_options.workload_fields, as a hand-run Locust reads it.
def sessions_option() -> Any:
    return typer.Option(False, "--sessions", help="conversations instead of one-shot prompts: each user runs "
                        "conversations (--turns), thinks between turns (--think) and resends the history each turn "
                        "behind a shared system prompt, with the prompt cache on; --steps only")


def turns_option() -> Any:
    return typer.Option(TURNS_DEFAULT, "--turns", help="turns per conversation: a number, or a range drawn "
                        "uniformly (2-6)")


def think_option() -> Any:
    return typer.Option(THINK_DEFAULT, "--think", help="seconds between a reply and the next turn: constant:S or "
                        "exponential:MEAN")


def system_prompt_tokens_option() -> Any:
    return typer.Option(0, "--system-prompt-tokens", min=0, help="tokens of the system prompt every "
                        "conversation shares")


def prompt_length_option() -> Any:
    return typer.Option("", "--prompt-length", help=f"prompt tokens per request, drawn: {LENGTH_EXAMPLE}")


def output_length_option() -> Any:
    return typer.Option("", "--output-length", help="reply tokens per request, drawn (each its max_tokens, with "
                        f"ignore_eos): {LENGTH_EXAMPLE}")


def trace_option() -> Any:
    return typer.Option(None, "--trace", help="replay a JSONL trace (offset_s, prompt_tokens, output_tokens[, "
                        "conversation, turn] per line; docs/workloads.md) as one open-loop step; instead of "
                        "--steps and --rates")


def trace_speed_option() -> Any:
    return typer.Option(1.0, "--trace-speed", help="the trace's offsets are divided by "
                        "this (2: twice as fast)")


def workload_seed_option() -> Any:
    return typer.Option(0, "--workload-seed", min=0, help="seed of the turns, think times and drawn lengths")


def slo_option() -> Any:
    return typer.Option("", "--slo", help="targets each step's goodput is judged by, in seconds or ms, e.g. "
                        "ttft_p90=0.5,tpot_p90=50ms (figures ttft, tpot, itl, e2e at p50, p90, p95, p99)")


def workload_load(*, steps: str | None, rates: str | None, arrival: str, sessions: bool, turns: str, think: str,
                  system_prompt_tokens: int, prompt_length: str, output_length: str, trace: Path | None,
                  trace_speed: float, workload_seed: int, slo: str,
                  default_steps: str | None = None) -> tuple[list[int], list[float], dict[str, Any]]:
    """(user steps, rate steps, the other workload fields of ``LoadSettings``) from a command's options:
    a trace is one open-loop step at its own mean rate; each mistake is refused naming its option."""
    try:
        source, user_steps, rate_steps = load_steps(steps, rates, trace, trace_speed,
                                                    default_steps or DEFAULT_USER_STEPS)
    except LoadTestError as error:  # a trace that cannot be read: refused as the option it came from
        raise UsageError(str(error)) from None
    fields = workload_fields(sessions=sessions, turns=turns, think=think, system_prompt_tokens=system_prompt_tokens,
                             prompt_length=prompt_length, output_length=output_length, trace=source,
                             workload_seed=workload_seed, slo=slo, open_loop=bool(rate_steps), arrival=arrival,
                             trace_speed=trace_speed)
    fields["arrival"] = parse_arrival(arrival)
    fields["arrival_shape"] = parse_arrival_shape(arrival)
    return user_steps, rate_steps, fields
