"""The load's options, one set for every command that runs a sweep (``sweep``, ``local``), read into the
one description of a load: ``core.rundir.LoadSettings``.

A command takes the set with :func:`with_load_options`; its function then gets a :class:`LoadFlags`
instead of thirty parameters, and :func:`load_request` turns it into settings once: the ``--load``
file's fields (TOML or JSON, ``core.load_file``), with the flags given on the command line over
them, and the command's defaults (and the profile's request settings) where neither says. A new load
option is one entry in :data:`LOAD_OPTIONS` and its field in ``LoadSettings``: every command, the
manifest, the rig's upload and the locustfile (which reads the run's manifest) follow.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import typer
from pydantic import ValidationError

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
    SWEEP_MAX_ERROR_RATE,
    SWEEP_MEASURE,
    SWEEP_READ_TIMEOUT_S,
    SWEEP_WARMUP_SECONDS,
    check_pin_slots,
    parse_arrival,
    parse_arrival_shape,
    parse_counts,
    parse_seconds,
    seconds_per_step,
)
from core.load_file import AUTO_PROCESSES, read_load_file
from core.profile import RequestDefaults
from core.rundir import LoadSettings
from core.rundir.models import RequestOrigins, SettingOrigin, TraceSource
from core.workload import LENGTH_EXAMPLE
from loadtest.locust_options import THINK_DEFAULT, TURNS_DEFAULT, load_steps, workload_fields
from loadtest.process_capacity import check_rate_per_process, check_users_per_process
from loadtest.schedule import ARRIVALS_PER_WINDOW, open_loop_windows
from loadtest.trace import trace_rate, trace_source
from rigbench.load_processes import PROCESSES_HELP, parse_processes

# the fields that say what kind of load runs: a layer (the file, the flags) that names one names them all
STEP_FIELDS = ("user_steps", "rate_steps", "trace")
REQUEST_FIELDS = ("max_tokens", "temperature", "ignore_eos", "cache_prompt")
CONTEXT = "load_options_context"
# where a load came from when no file is given: its mistakes are the flags' own (each names its flag)
FLAGS_ONLY = "the load flags"
RIDE_OUT_DEFAULT = LoadSettings.model_fields["outage_seconds"].default
OPEN_LOOP_WINDOWS_HELP = (f"; left out, a rate step's window is as long as its rate needs for {ARRIVALS_PER_WINDOW} "
                          "arrivals on average, if that is longer")


def _options(warmup: float, measure: str, note: str) -> list[tuple[str, Any, Any]]:
    """(parameter, type, typer option) of every load option; ``note`` follows the window options' help."""
    return [
        ("load_file", Path | None, typer.Option(None, "--load", help="a load written as a file (TOML or JSON: "
                                                "LoadSettings' fields, docs/load-files.md); flags given beside it "
                                                "override its values")),
        ("steps", str | None, typer.Option(None, "--steps", help=STEPS_HELP)),
        ("rates", str | None, typer.Option(None, "--rates", help=RATES_HELP)),
        ("arrival", str, typer.Option("poisson", "--arrival", help=ARRIVAL_HELP)),
        ("arrival_seed", int, typer.Option(0, "--arrival-seed", min=0, help=ARRIVAL_SEED_HELP)),
        ("warmup", float, typer.Option(warmup, "--warmup", min=0.0, help="warm-up seconds per step" + note)),
        ("measure", str, typer.Option(measure, "--measure", help=MEASURE_HELP + note + OPEN_LOOP_WINDOWS_HELP)),
        ("max_tokens", int | None, typer.Option(None, "--max-tokens", min=1, help="tokens per reply; default: the "
                                                "profile's, else 256")),
        ("ignore_eos", bool | None, typer.Option(None, "--ignore-eos/--no-ignore-eos", help="every reply runs to "
                                                 "--max-tokens; default: the profile's, else off")),
        ("prompts", str, typer.Option("mixed", "--prompts", help="mixed, a category, or a JSONL file")),
        ("context_tokens", str, typer.Option("0", "--context-tokens", help="document tokens ahead of each prompt, "
                                             "one run each, e.g. 0,8192")),
        ("processes", str, typer.Option("1", "--processes", help=PROCESSES_HELP)),
        ("pin_slots", bool, typer.Option(False, "--pin-slots", help="user i asks for server slot i (llama-server's "
                                         "id_slot; --steps, --processes 1): an experiment's bound for the server's "
                                         "own slot choice, not real traffic")),
        ("drain", float, typer.Option(SWEEP_DRAIN_SECONDS, "--drain", min=0.0, help=DRAIN_HELP)),
        ("sessions", bool, typer.Option(False, "--sessions", help="conversations instead of one-shot prompts: each "
                                        "user runs conversations (--turns), thinks between turns (--think) and "
                                        "resends the history each turn behind a shared system prompt, with the "
                                        "prompt cache on; --steps only")),
        ("turns", str, typer.Option(TURNS_DEFAULT, "--turns", help="turns per conversation: a number, or a range "
                                    "drawn uniformly (2-6)")),
        ("think", str, typer.Option(THINK_DEFAULT, "--think", help="seconds between a reply and the next turn: "
                                    "constant:S or exponential:MEAN")),
        ("system_prompt_tokens", int, typer.Option(0, "--system-prompt-tokens", min=0, help="tokens of the system "
                                                   "prompt every conversation shares")),
        ("prompt_length", str, typer.Option("", "--prompt-length", help="prompt tokens per request, drawn: "
                                            f"{LENGTH_EXAMPLE}")),
        ("output_length", str, typer.Option("", "--output-length", help="reply tokens per request, drawn (each its "
                                            f"max_tokens, with ignore_eos): {LENGTH_EXAMPLE}")),
        ("trace", Path | None, typer.Option(None, "--trace", help="replay a JSONL trace (offset_s, prompt_tokens, "
                                            "output_tokens[, conversation, turn] per line; docs/workloads.md) as one "
                                            "open-loop step; instead of --steps and --rates")),
        ("trace_speed", float, typer.Option(1.0, "--trace-speed", help="the trace's offsets are divided by this "
                                            "(2: twice as fast)")),
        ("workload_seed", int, typer.Option(0, "--workload-seed", min=0, help="seed of the turns, think times and "
                                            "drawn lengths")),
        ("slo", str, typer.Option("", "--slo", help="targets each step's goodput is judged by, in seconds or ms, "
                                  "e.g. ttft_p90=0.5,tpot_p90=50ms (figures ttft, tpot, itl, e2e at p50, p90, p95, "
                                  "p99)")),
        ("max_error_rate", float, typer.Option(SWEEP_MAX_ERROR_RATE, "--max-error-rate", min=0.0, max=1.0,
                                               help="stop the sweep above this share of failed requests (0 to 1)")),
        ("read_timeout", float, typer.Option(SWEEP_READ_TIMEOUT_S, "--read-timeout", min=0.1, help="seconds a "
                                             "stream may stall (the pre-flight reply too)")),
        ("ride_out", float, typer.Option(RIDE_OUT_DEFAULT, "--ride-out", min=0.0, help="seconds the sweep waits "
                                         "for a server that refuses every request (restarting, loading) to answer "
                                         "again, recording the refusals; longer, it stops naming the outage (0: "
                                         "stop at once)")),
        ("timeline", bool, typer.Option(False, "--timeline", help="also keep every chunk's arrival time")),
        ("repeats", int, typer.Option(1, "--repeats", min=1, max=100, help="run the whole load this many times, "
                                      "arms interleaved (A B A B); the report's figures and comparisons then carry "
                                      "the spread between runs (1: one run, that spread unknown)")),
    ]


# The LoadSettings fields each option fills (the file names the same fields); the rest come from the profile
# (temperature, cache_prompt) or name the run (arm: sweep's --url NAME=URL, local's --label).
OPTION_FIELDS: dict[str, tuple[str, ...]] = {
    "steps": STEP_FIELDS, "rates": STEP_FIELDS, "trace": STEP_FIELDS, "trace_speed": STEP_FIELDS,
    "arrival": ("arrival", "arrival_shape"), "arrival_seed": ("arrival_seed",), "warmup": ("warmup_seconds",),
    "measure": ("measure_seconds",), "max_tokens": ("max_tokens",), "ignore_eos": ("ignore_eos",),
    "prompts": ("prompts",), "context_tokens": ("context_tokens",), "processes": ("processes",),
    "pin_slots": ("pin_slots",), "drain": ("drain_seconds",), "sessions": ("sessions",), "turns": ("sessions",),
    "think": ("sessions",), "system_prompt_tokens": ("sessions",), "prompt_length": ("prompt_length",),
    "output_length": ("output_length",), "workload_seed": ("workload_seed",), "slo": ("slo",),
    "max_error_rate": ("max_error_rate",), "read_timeout": ("read_timeout_seconds",), "timeline": ("timeline",),
    "ride_out": ("outage_seconds",), "repeats": ("repeats",),
}


@dataclass
class LoadFlags:
    """The load options as a command received them, and which of them the command line gave."""

    values: dict[str, Any]
    given: set[str] = field(default_factory=set)
    # every parameter of the command, load or not, that the command line gave: a value equal to its default
    # was still typed (``--runs-dir runs`` beside ``--resume`` is refused like any other)
    command_line: set[str] = field(default_factory=set)

    def flag(self, name: str) -> str:
        """The option's name as typed (``read_timeout`` -> ``--read-timeout``)."""
        return "--load" if name == "load_file" else "--" + name.replace("_", "-")


def with_load_options(*, warmup: float, measure: str, note: str = "") -> Callable[[Callable], Callable]:
    """A typer command that takes the load options: its ``load: LoadFlags`` parameter receives them."""

    def decorate(command: Callable) -> Callable:
        signature = inspect.signature(command)
        own = [parameter for name, parameter in signature.parameters.items() if name != "load"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
                 for name, kind, option in _options(warmup, measure, note)]
        # typer hands the command's context to a parameter of this type: it knows which options were typed
        added.append(inspect.Parameter(CONTEXT, inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context))

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name, _, _ in _options(warmup, measure, note)}
            context = kwargs.pop(CONTEXT)
            typed = {name for name in context.params
                     if getattr(context.get_parameter_source(name), "name", "") == "COMMANDLINE"}
            return command(*args, load=LoadFlags(values, typed & values.keys(), typed), **kwargs)

        run.__signature__ = signature.replace(parameters=[*own, *added])  # type: ignore[attr-defined]
        run.__annotations__ = {key: value for key, value in command.__annotations__.items() if key != "load"}
        return run

    return decorate


@dataclass
class LoadRequest:
    """The load a command will run, read once: the settings of its first run, the document lengths of its
    runs (one run each), whether ``--processes auto`` sizes the load processes once the server answers, and
    where each request setting came from."""

    settings: LoadSettings
    contexts: list[int]
    auto_processes: bool
    origins: RequestOrigins

    def for_context(self, context: int, **changes: Any) -> LoadSettings:
        return self.settings.model_copy(update={"context_tokens": context, **changes})


def flag_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Every option's ``LoadSettings`` fields, each mistake refused naming its option."""
    try:
        trace, user_steps, rate_steps = load_steps(values["steps"], values["rates"], values["trace"],
                                                   values["trace_speed"], DEFAULT_USER_STEPS)
    except LoadTestError as error:  # a trace that cannot be read: refused as the option it came from
        raise UsageError(str(error)) from None
    workload = workload_fields(
        sessions=values["sessions"], turns=values["turns"], think=values["think"],
        system_prompt_tokens=values["system_prompt_tokens"], prompt_length=values["prompt_length"],
        output_length=values["output_length"], trace=trace, workload_seed=values["workload_seed"],
        slo=values["slo"], open_loop=bool(rate_steps), arrival=values["arrival"], trace_speed=values["trace_speed"])
    processes = parse_processes(values["processes"])
    check_pin_slots(values["pin_slots"], bool(rate_steps), processes)
    measure = parse_seconds(values["measure"], "--measure")
    seconds_per_step(measure, len(rate_steps or user_steps), "--measure", "rate" if rate_steps else "user")
    return {
        **workload, "user_steps": user_steps, "rate_steps": rate_steps,
        "arrival": parse_arrival(values["arrival"]), "arrival_shape": parse_arrival_shape(values["arrival"]),
        "arrival_seed": values["arrival_seed"], "warmup_seconds": values["warmup"],
        "measure_seconds": measure, "max_tokens": values["max_tokens"],
        "ignore_eos": values["ignore_eos"], "prompts": values["prompts"],
        "context_tokens": parse_counts(values["context_tokens"], "--context-tokens", minimum=0, example="0,8192"),
        "processes": processes, "pin_slots": values["pin_slots"], "drain_seconds": values["drain"],
        "max_error_rate": values["max_error_rate"], "read_timeout_seconds": values["read_timeout"],
        "timeline": values["timeline"], "outage_seconds": values["ride_out"], "repeats": values["repeats"],
    }


def file_fields(path: Path) -> dict[str, Any]:
    """A load file's fields, a trace named by its path read here (relative to the file's folder); a file
    that names one kind of load names none of the others."""
    fields = read_load_file(path)
    trace = fields.get("trace")
    if isinstance(trace, str):
        located = Path(trace) if Path(trace).is_absolute() else path.parent / trace
        try:
            fields["trace"] = trace_source(located, float(fields.pop("trace_speed", 1.0)), option=f"{path}: trace")
        except LoadTestError as error:
            raise UsageError(str(error)) from None
    if fields.get("processes") == AUTO_PROCESSES:
        fields["processes"] = None
    if isinstance(fields.get("context_tokens"), int):
        fields["context_tokens"] = [fields["context_tokens"]]
    if any(key in fields for key in STEP_FIELDS):
        fields = {"user_steps": [], "rate_steps": [], "trace": None} | fields
    if fields.get("trace") is not None and not fields["rate_steps"]:  # a trace is one step at its mean rate
        fields["trace"] = TraceSource.model_validate(fields["trace"])
        fields["rate_steps"] = [trace_rate(fields["trace"])]
    return fields


def load_fields(flags: LoadFlags) -> tuple[dict[str, Any], dict[str, SettingOrigin]]:
    """The load the flags and the ``--load`` file describe, as ``LoadSettings`` fields: the file's, the given
    flags over them, the command's defaults below both (``context_tokens`` a list, one run each; ``processes``
    None for auto; request settings None where neither gave one); and which request settings a flag or the
    file gave."""
    from_flags = flag_fields(flags.values)
    path = flags.values.get("load_file")
    from_file = file_fields(Path(path)) if path is not None else {}
    given = {name for option in flags.given for name in OPTION_FIELDS.get(option, ())}
    fields: dict[str, Any] = {key: value for key, value in from_flags.items() if key not in given}
    fields |= from_file
    fields |= {key: value for key, value in from_flags.items() if key in given}
    if "measure_seconds" not in given and "measure_seconds" not in from_file and fields.get("rate_steps") \
            and fields.get("trace") is None:
        # rate steps in the command's default windows: each long enough for its random arrivals
        fields["measure_seconds"] = open_loop_windows(fields["rate_steps"], fields.get("arrival", "poisson"),
                                                      fields.get("arrival_shape"), floor=from_flags["measure_seconds"])
    named: dict[str, SettingOrigin] = {key: "flag" if key in given else "file" for key in REQUEST_FIELDS
                                       if key in given or key in from_file}
    return fields, named


def settle_load(fields: dict[str, Any], *, request: RequestDefaults, request_from: SettingOrigin,
                named: dict[str, SettingOrigin] | None = None, arm: str | None = None, force_ignore_eos: bool = False,
                where: str = "the load") -> LoadRequest:
    """The load ``fields`` describe (``LoadSettings``' fields, any of them, as a load file holds them), with the
    request settings the profile (``request_from``) or rigbench gives where the fields do not, checked once:
    each mistake one line naming ``where`` and the key. ``named``: where the request settings the fields give
    came from (a flag unless said). ``force_ignore_eos``: replies always run to max_tokens (a synthetic
    model's random text may end anywhere)."""
    fields = dict(fields)
    named = named or {}
    origins: dict[str, SettingOrigin] = {"model_name": "rigbench"}
    for key in REQUEST_FIELDS:
        if fields.get(key) is None:
            fields[key], origins[key] = getattr(request, key), request_from
        else:
            origins[key] = named.get(key, "flag")
    if fields.get("sessions") is not None and not fields["cache_prompt"]:
        fields["cache_prompt"], origins["cache_prompt"] = True, "flag"  # a conversation resends its history
    fields["ignore_eos"] = fields["ignore_eos"] or force_ignore_eos
    contexts = fields.pop("context_tokens", 0)
    contexts = contexts if isinstance(contexts, list) else [contexts]
    processes = fields.pop("processes", 1)
    fields.setdefault("arm", arm)
    try:
        settings = LoadSettings(**fields, context_tokens=contexts[0], processes=processes or 1)
    except ValidationError as error:
        problem = error.errors()[0]
        key = ".".join(str(part) for part in problem["loc"])
        said = problem["msg"].removeprefix("Value error, ")
        raise UsageError(f"{where}: {key}: {said}" if key else f"{where}: {said}") from None
    try:
        check_users_per_process(settings.user_steps, processes, os.cpu_count() or 1)
        check_rate_per_process(settings.rate_steps, processes, os.cpu_count() or 1, trace=settings.trace is not None)
    except UsageError as error:
        raise UsageError(str(error) if where == FLAGS_ONLY else f"{where}: {error}") from None
    return LoadRequest(settings, contexts, processes is None, RequestOrigins(**origins))


def load_request(flags: LoadFlags, *, request: RequestDefaults, request_from: SettingOrigin) -> LoadRequest:
    """The load a command's flags (and ``--load`` file) describe, settled with the request defaults."""
    fields, named = load_fields(flags)
    path = flags.values.get("load_file")
    where = f"--load {path} with the flags" if path is not None else FLAGS_ONLY
    return settle_load(fields, request=request, request_from=request_from, named=named, where=where)


def load_to_send(values: dict[str, Any], load_file: Path | None, *, request: RequestDefaults,
                 request_from: SettingOrigin, what: str) -> tuple[dict[str, Any], LoadRequest]:
    """A load for another machine's ``rigbench sweep --load``: the options ``values`` gave (a step's, the
    cloud loop's: only those set) over the ``load_file``'s fields, read and checked whole here, so a mistake
    stops the command before anything runs there. Returns the load file's fields (request settings neither
    gave left out: the profile's there) and the load as it will run."""
    defaults = {name: option.default for name, _, option in _options(SWEEP_WARMUP_SECONDS, SWEEP_MEASURE, "")}
    flags = LoadFlags(defaults | values | {"load_file": load_file}, set(values))
    fields, named = load_fields(flags)
    where = f"{what} --load {load_file} with its options" if load_file is not None else f"{what}'s load options"
    return fields, settle_load(fields, request=request, request_from=request_from, named=named, where=where)
