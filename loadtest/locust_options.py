"""The locustfile's own options: one vocabulary with ``rigbench sweep``, each with its help.

``--steps`` (or ``--rates``, ``--arrival`` and ``--arrival-seed``), ``--warmup``, ``--measure``,
``--run-dir``, ``--runs-dir``, ``--context-tokens`` and ``--model-name`` mean what they mean in
every rigbench command. Locust prints ``--help`` before it loads a locustfile, so these options
are listed by ``rigbench sweep --help`` (which passes the same ones).

Every ``LoadSettings`` field but the arm is read from an option here (``--processes`` is Locust's
own), and where ``LoadSettings`` has a default the option takes it, so a hand run's manifest says
what a sweep with the same options says. Nothing here imports Locust: the options are read from
the namespace Locust parsed.
"""

from __future__ import annotations

import argparse
from typing import Any

from core.errors import UsageError
from core.lists import (
    ARRIVAL_HELP,
    ARRIVAL_SEED_HELP,
    ARRIVALS,
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
    parse_load_steps,
    parse_seconds,
    seconds_per_step,
)
from core.rundir import LoadSettings
from loadtest.schedule import Stage, stages_for

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
    add("--arrival", default=setting_default("arrival"), choices=list(ARRIVALS), help=ARRIVAL_HELP)
    add("--arrival-seed", type=int, default=setting_default("arrival_seed"), help=ARRIVAL_SEED_HELP)
    add("--warmup", type=float, default=SWEEP_WARMUP_SECONDS, help="warm-up seconds per step")
    add("--measure", default=SWEEP_MEASURE, help=MEASURE_HELP)
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
    add("--drain", type=float, default=SWEEP_DRAIN_SECONDS, help=DRAIN_HELP)
    add("--max-error-rate", type=float, default=SWEEP_MAX_ERROR_RATE,
        help="stop the sweep above this share of failed requests")
    add("--min-requests-for-error-rate", type=int, default=10, help="requests before the error rate is judged")
    add("--parallel-slots", type=int, default=0, help="server slots (0: ask the server's /slots)")
    add("--timeline", action="store_true", default=False, help="also keep every chunk's arrival time")
    add("--pin-slots", action="store_true", default=setting_default("pin_slots"),
        help="user i asks for server slot i (llama-server's id_slot; closed loop, one process): an experiment's "
             "bound for the server's slot choice, not real traffic")
    add("--replicas", default="", help="several servers sharing the load, their roots comma-separated: user i goes "
        "to the i-th mod N (open-loop arrival n likewise), and each record names its replica")
    add("--interruption-marker", default="", help="stop the sweep (status interrupted) when this file appears")
    add("--no-preflight", action="store_true", default=False,
        help="skip the check of /health and one streamed reply before the load (rigbench sweep has done it)")
    add("--rigbench-t0", type=float, default=0.0, include_in_web_ui=False, help=argparse.SUPPRESS)
    # how many load processes share an open-loop schedule: set by the master at each start, sent to workers
    add("--rigbench-load-processes", type=int, default=1, include_in_web_ui=False, help=argparse.SUPPRESS)


def stages_from(options: Any) -> list[Stage]:
    """The sweep schedule the options ask for (refused at once, naming the option, when malformed)."""
    return stages_for(settings_from(options))


def settings_from(options: Any) -> LoadSettings:
    """The run's load settings from the parsed options (refused, naming the option, when malformed)."""
    user_steps, rate_steps = parse_load_steps(options.steps or None, options.rates or None, DEFAULT_USER_STEPS)
    measure = parse_seconds(options.measure, "--measure")
    seconds_per_step(measure, len(rate_steps or user_steps), "--measure", "rate" if rate_steps else "user")
    if options.arrival_seed < 0:
        raise UsageError(f"--arrival-seed: expected a whole number >= 0, found {options.arrival_seed}")
    check_pin_slots(options.pin_slots, bool(rate_steps), max(1, options.processes or 1))
    if options.drain < 0:
        raise UsageError(f"--drain: expected seconds >= 0, found {options.drain:g}")
    if len(replica_hosts(options)) > 1 and options.pin_slots:  # a malformed --replicas is refused here too
        raise UsageError("--pin-slots with --replicas: slot i exists on one server, not on each replica; leave one "
                         "out")
    return LoadSettings(
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
    )


def replica_hosts(options: Any) -> list[str]:
    """The replicas' roots (``--replicas``), in order; empty for one server (``--host``)."""
    text = getattr(options, "replicas", "") or ""
    hosts = [host.strip().rstrip("/") for host in text.split(",") if host.strip()]
    bad = [host for host in hosts if not host.startswith(("http://", "https://"))]
    if bad:
        raise UsageError(f"--replicas: {bad[0]!r} is not a server root; expected e.g. "
                         "http://127.0.0.1:8080,http://127.0.0.1:8081")
    if len(set(hosts)) != len(hosts):
        raise UsageError(f"--replicas: a root is given twice in {text!r}")
    return hosts
