"""The options of a hand-run Locust: one vocabulary with ``rigbench sweep``, each with its help.

``--steps`` (or ``--rates``, ``--arrival`` and ``--arrival-seed``), ``--warmup``, ``--measure``,
``--run-dir``, ``--runs-dir``, ``--context-tokens`` and ``--model-name`` mean what they mean in
every rigbench command. A hand run reads them into the one description of a load
(``core.rundir.LoadSettings``, :func:`settings_from`) and writes it to the run it makes; from
there on, as under ``rigbench sweep`` (which passes only ``--run-dir``), every load process reads
the run's manifest. :func:`hand_run_flags` writes settings back as these options (a test holds
the two to each other). Nothing here imports Locust: the options are read from the namespace
Locust parsed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from core.errors import UsageError
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
    format_seconds,
    parse_arrival,
    parse_arrival_shape,
    parse_load_steps,
    parse_seconds,
    seconds_per_step,
)
from core.rundir import LoadSettings
from core.rundir.models import SessionSettings, TraceSource
from core.workload import (
    LENGTH_EXAMPLE,
    format_length,
    format_slo,
    parse_length,
    parse_slo,
    parse_think,
    parse_turns,
)
from loadtest.process_capacity import check_users_per_process
from loadtest.schedule import ARRIVALS_PER_WINDOW, open_loop_windows
from loadtest.trace import trace_rate, trace_source

TURNS_DEFAULT = "1-4"
THINK_DEFAULT = "exponential:3"
# The one Locust request entry a request makes (the error-rate rule reads it back).
LOCUST_REQUEST_TYPE = "POST"
LOCUST_REQUEST_NAME = "/v1/chat/completions (size: output tokens)"


def setting_default(field: str) -> Any:
    """``LoadSettings``'s own default of ``field``."""
    return LoadSettings.model_fields[field].default


def add_arguments(parser: Any) -> None:
    """Register the options on Locust's parser (its ``init_command_line_parser`` event)."""
    add = parser.add_argument
    add("--steps", default="", help=STEPS_HELP)  # neither --steps nor --rates: DEFAULT_USER_STEPS
    add("--rates", default="", help=RATES_HELP)
    add("--arrival", default=setting_default("arrival"), help=ARRIVAL_HELP)
    add("--arrival-seed", type=int, default=setting_default("arrival_seed"), help=ARRIVAL_SEED_HELP)
    add("--warmup", type=float, default=SWEEP_WARMUP_SECONDS, help="warm-up seconds per step")
    add("--measure", default="", help=f"{MEASURE_HELP}; default {SWEEP_MEASURE}, and for --rates each step's "
        f"window as long as its rate needs for {ARRIVALS_PER_WINDOW} arrivals on average, if that is longer")
    add("--run-dir", default="", help="run directory to fill (default: a new one under --runs-dir)")
    add("--runs-dir", default="runs", help="where a new run directory goes")
    add("--model-name", default="default", help="model name sent in each request")
    add("--max-tokens", type=int, default=256, help="tokens per reply")
    add("--temperature", type=float, default=setting_default("temperature"),
        help="sampling temperature of each request")
    add("--cache-prompt", action="store_true", default=setting_default("cache_prompt"),
        help="let llama-server reuse cached prompt prefixes")
    add("--ignore-eos", action="store_true", default=setting_default("ignore_eos"),
        help="every reply runs to --max-tokens")
    add("--prompts", default=setting_default("prompts"), help="mixed, a category (code, chat, ...), or a JSONL file")
    add("--context-tokens", type=int, default=setting_default("context_tokens"),
        help="document tokens ahead of each prompt")
    add("--read-timeout", type=float, default=SWEEP_READ_TIMEOUT_S, help="seconds a stream may stall")
    add("--ride-out", type=float, default=setting_default("outage_seconds"), help="seconds the sweep waits for a "
        "server that refuses every request (restarting, loading) to answer again; longer, it stops (0: at once)")
    add("--drain", type=float, default=SWEEP_DRAIN_SECONDS, help=DRAIN_HELP)
    add("--max-error-rate", type=float, default=SWEEP_MAX_ERROR_RATE,
        help="stop the sweep above this share of failed requests")
    add("--min-requests-for-error-rate", type=int, default=10, help="requests before the error rate is judged")
    add("--parallel-slots", type=int, default=0, help="server slots (0: ask the server's /slots)")
    add("--timeline", action="store_true", default=False, help="also keep every chunk's arrival time")
    add("--pin-slots", action="store_true", default=setting_default("pin_slots"),
        help="user i asks for server slot i (llama-server's id_slot; closed loop, one process): an experiment's "
             "bound for the server's slot choice, not real traffic")
    add("--replica-urls", default="", help="several servers sharing the load, their roots comma-separated: user i goes "
        "to the i-th mod N (open-loop arrival n likewise), and each record names its replica")
    add("--sessions", action="store_true", default=False,
        help="conversations instead of one-shot prompts: each user runs conversations (--turns), thinks between "
             "turns (--think) and resends the history each turn behind a shared system prompt; closed loop")
    add("--turns", default=TURNS_DEFAULT, help="turns per conversation, a number or a range drawn uniformly (2-6)")
    add("--think", default=THINK_DEFAULT, help="seconds between a reply and the next turn: constant:S or "
        "exponential:MEAN")
    add("--system-prompt-tokens", type=int, default=SessionSettings.model_fields["system_prompt_tokens"].default,
        help="tokens of the system prompt every conversation shares")
    add("--prompt-length", default="", help=f"prompt tokens per request, drawn: {LENGTH_EXAMPLE}")
    add("--output-length", default="", help="reply tokens per request, drawn (each sent as its max_tokens with "
        f"ignore_eos): {LENGTH_EXAMPLE}")
    add("--trace", default="", help="replay a JSONL trace (offset_s, prompt_tokens, output_tokens[, conversation, "
        "turn] per line) as one open-loop step; instead of --steps and --rates")
    add("--trace-speed", type=float, default=TraceSource.model_fields["speed"].default,
        help="the trace's offsets are divided by this (2: twice as fast)")
    add("--workload-seed", type=int, default=setting_default("workload_seed"),
        help="seed of the turns, think times and drawn lengths")
    add("--slo", default="", help="targets each step's goodput is judged by, in seconds or ms, e.g. "
        "ttft_p90=0.5,tpot_p90=50ms")
    add("--interruption-marker", default="", help="stop the sweep (status interrupted) when this file appears")
    add("--no-preflight", action="store_true", default=False,
        help="skip the check of /health and one streamed reply before the load (rigbench sweep has done it)")
    add("--rigbench-t0", type=float, default=0.0, include_in_web_ui=False, help=argparse.SUPPRESS)
    # how many load processes share an open-loop schedule: set by the master at each start, sent to workers
    add("--rigbench-load-processes", type=int, default=1, include_in_web_ui=False, help=argparse.SUPPRESS)


def settings_from(options: Any) -> LoadSettings:
    """The run's load settings from the parsed options (refused, naming the option, when malformed)."""
    trace, user_steps, rate_steps = load_steps(options.steps or None, options.rates or None, options.trace or None,
                                               options.trace_speed)
    if options.measure:
        measure = parse_seconds(options.measure, "--measure")
        seconds_per_step(measure, len(rate_steps or user_steps), "--measure", "rate" if rate_steps else "user")
    else:
        default = parse_seconds(SWEEP_MEASURE, "--measure")
        measure = default if not rate_steps or trace is not None else open_loop_windows(  # type: ignore[assignment]
            rate_steps, parse_arrival(options.arrival), parse_arrival_shape(options.arrival), floor=float(default))
    if options.arrival_seed < 0:
        raise UsageError(f"--arrival-seed: expected a whole number >= 0, found {options.arrival_seed}")
    check_pin_slots(options.pin_slots, bool(rate_steps), max(1, options.processes or 1))
    if options.drain < 0:
        raise UsageError(f"--drain: expected seconds >= 0, found {options.drain:g}")
    if options.ride_out < 0:
        raise UsageError(f"--ride-out: expected seconds >= 0, found {options.ride_out:g}")
    check_users_per_process(user_steps, max(1, options.processes or 1), 1)
    if len(replica_hosts(options)) > 1 and options.pin_slots:  # a malformed --replica-urls is refused here too
        raise UsageError("--pin-slots with --replica-urls: slot i exists on one server, not on each replica; leave one "
                         "out")
    return LoadSettings(
        arrival_shape=parse_arrival_shape(options.arrival),
        **workload_fields(sessions=options.sessions, turns=options.turns, think=options.think,
                          system_prompt_tokens=options.system_prompt_tokens, prompt_length=options.prompt_length,
                          output_length=options.output_length, trace=trace, workload_seed=options.workload_seed,
                          slo=options.slo, open_loop=bool(rate_steps), arrival=options.arrival,
                          trace_speed=options.trace_speed),
        user_steps=user_steps,
        rate_steps=rate_steps,
        arrival=parse_arrival(options.arrival),  # type: ignore[arg-type]
        arrival_seed=options.arrival_seed,
        warmup_seconds=options.warmup,
        measure_seconds=measure,
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        cache_prompt=options.cache_prompt,
        ignore_eos=options.ignore_eos,
        prompts=options.prompts,
        context_tokens=options.context_tokens,
        processes=max(1, options.processes or 1),
        pin_slots=options.pin_slots,
        drain_seconds=options.drain,
        max_error_rate=options.max_error_rate,
        read_timeout_seconds=options.read_timeout,
        timeline=options.timeline,
        outage_seconds=options.ride_out,
    )


def replica_hosts(options: Any) -> list[str]:
    """The replicas' roots (``--replica-urls``), in order; empty for one server (``--host``)."""
    text = getattr(options, "replica_urls", "") or ""
    hosts = [host.strip().rstrip("/") for host in text.split(",") if host.strip()]
    bad = [host for host in hosts if not host.startswith(("http://", "https://"))]
    if bad:
        raise UsageError(f"--replica-urls: {bad[0]!r} is not a server root; expected e.g. "
                         "http://127.0.0.1:8080,http://127.0.0.1:8081")
    if len(set(hosts)) != len(hosts):
        raise UsageError(f"--replica-urls: a root is given twice in {text!r}")
    return hosts


def load_steps(steps: str | None, rates: str | None, trace: Path | str | None, trace_speed: float,
               default_steps: str = DEFAULT_USER_STEPS) -> tuple[TraceSource | None, list[int], list[float]]:
    """(the trace, user steps, rate steps): a trace is one open-loop step at its own mean rate and takes
    neither --steps nor --rates; else the steps or rates given (``core.lists.parse_load_steps``)."""
    if trace is None:
        return None, *parse_load_steps(steps, rates, default_steps)
    if steps or rates:
        raise UsageError("--trace with --steps or --rates: a trace's arrivals are its own; leave one out")
    source = trace_source(trace, trace_speed)
    return source, [], [trace_rate(source)]


def workload_fields(*, sessions: bool, turns: str, think: str, system_prompt_tokens: int, prompt_length: str,
                    output_length: str, trace: TraceSource | None, workload_seed: int, slo: str,
                    open_loop: bool, arrival: str = "poisson", trace_speed: float = 1.0) -> dict[str, Any]:
    """The workload's ``LoadSettings`` fields from its options' text, for every command that takes them
    (refused, naming the option, when malformed or when they cannot go together)."""
    session_settings = None
    if sessions:
        if open_loop:
            raise UsageError("--sessions with --rates or --trace: conversations are run by users (--steps), each "
                             "thinking between its turns")
        turns_min, turns_max = parse_turns(turns)
        think_kind, think_seconds = parse_think(think)
        if system_prompt_tokens < 0:
            raise UsageError(f"--system-prompt-tokens: expected tokens >= 0, found {system_prompt_tokens}")
        session_settings = SessionSettings(turns_min=turns_min, turns_max=turns_max, think=think_kind,  # type: ignore[arg-type]
                                           think_seconds=think_seconds, system_prompt_tokens=system_prompt_tokens)
    else:
        unused = [flag for flag, value, default in (
            ("--turns", turns, TURNS_DEFAULT), ("--think", think, THINK_DEFAULT),
            ("--system-prompt-tokens", system_prompt_tokens, 0)) if value != default]
        if unused:
            raise UsageError(f"{unused[0]} without --sessions: it shapes conversations; add --sessions")
    if trace is None and trace_speed != TraceSource.model_fields["speed"].default:
        raise UsageError("--trace-speed without --trace: it speeds a replayed trace; add --trace FILE")
    if arrival.startswith("gamma") and (not open_loop or trace is not None):
        raise UsageError(f"--arrival {arrival} with {'--trace' if trace is not None else '--steps'}: gamma gaps space "
                         "an open loop's arrivals (--rates); a closed loop's users and a trace's rows keep their own")
    if trace is not None and (prompt_length or output_length):
        raise UsageError("--prompt-length or --output-length with --trace: the trace gives each request's lengths")
    if workload_seed < 0:
        raise UsageError(f"--workload-seed: expected a whole number >= 0, found {workload_seed}")
    return {
        "sessions": session_settings,
        "prompt_length": parse_length(prompt_length, "--prompt-length") if prompt_length else None,
        "output_length": parse_length(output_length, "--output-length") if output_length else None,
        "trace": trace,
        "workload_seed": workload_seed,
        "slo": parse_slo(slo) if slo else {},
    }


def hand_run_flags(settings: LoadSettings) -> list[str]:
    """The options a hand-run Locust takes for ``settings`` (``settings_from`` reads them back to the same
    settings, the arm aside): what a sweep's log shows for running its load by hand."""
    options = ["--warmup", repr(settings.warmup_seconds), "--measure", format_seconds(settings.measure_seconds),
               "--max-tokens", str(settings.max_tokens), "--temperature", repr(settings.temperature),
               "--prompts", settings.prompts, "--context-tokens", str(settings.context_tokens),
               "--drain", repr(settings.drain_seconds), "--max-error-rate", repr(settings.max_error_rate),
               "--read-timeout", repr(settings.read_timeout_seconds), "--ride-out", repr(settings.outage_seconds)]
    switches = (("--cache-prompt", settings.cache_prompt), ("--ignore-eos", settings.ignore_eos),
                ("--pin-slots", settings.pin_slots), ("--timeline", settings.timeline))
    options += [flag for flag, on in switches if on]
    if settings.processes > 1:  # Locust's own option
        options += ["--processes", str(settings.processes)]
    if settings.trace is None and settings.open_loop:
        arrival = settings.arrival if settings.arrival_shape is None else f"gamma:{settings.arrival_shape!r}"
        options += ["--rates", ",".join(repr(rate) for rate in settings.rate_steps), "--arrival", arrival,
                    "--arrival-seed", str(settings.arrival_seed)]
    elif settings.trace is None:
        options += ["--steps", ",".join(str(users) for users in settings.user_steps)]
    if settings.sessions is not None:
        sessions = settings.sessions
        options += ["--sessions", "--turns", f"{sessions.turns_min}-{sessions.turns_max}",
                    "--think", f"{sessions.think}:{sessions.think_seconds!r}",
                    "--system-prompt-tokens", str(sessions.system_prompt_tokens)]
    if settings.prompt_length is not None:
        options += ["--prompt-length", format_length(settings.prompt_length)]
    if settings.output_length is not None:
        options += ["--output-length", format_length(settings.output_length)]
    if settings.trace is not None:
        options += ["--trace", settings.trace.path, "--trace-speed", repr(settings.trace.speed)]
    if settings.workload_seed:
        options += ["--workload-seed", str(settings.workload_seed)]
    if settings.slo:
        options += ["--slo", format_slo(settings.slo)]
    return options
