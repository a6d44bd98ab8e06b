"""The GPU study's report: one markdown file with plots, from the folder the GPU study
wrote (ceilings, autotune trials, the greedy-text check, sweeps, drafter arms, long context).

Why a generator rather than a hand-written page: every figure in it comes from the committed
files beside it, so it can be rebuilt and checked (``rigbench study report DIR``), and the
published L4 figures of the same models (``data/published-l4.json``, with their source) are
quoted beside ours only as ratios, for orientation. Each arm's steps are read through the one
summary reader (``analysis.summary``), the batched ceilings through ``analysis.ceiling``, and the
plots are drawn in the report's own style (``analysis.plots``).
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from itertools import zip_longest
from pathlib import Path

from pydantic import ValidationError
from tabulate import tabulate

from analysis.ceiling import read_ceiling
from analysis.figures import decode_call_rates
from analysis.intervals import Estimate
from analysis.plots import PlotSpec, draw_lines
from analysis.repeats import between_runs
from analysis.step import StepFigures
from analysis.summary import read_summary
from core.errors import AnalysisError
from core.llama_bench import BenchReport
from core.profile import RESERVED_SERVER_FLAGS, split_flags
from core.rundir import RunDir
from core.validation import describe_validation_error
from core.whole_files import unwritten_said_as, write_whole
from core.wording import counted

PUBLISHED_L4_FILE = Path(__file__).resolve().parent / "data" / "published-l4.json"
SEED_L4 = json.loads(PUBLISHED_L4_FILE.read_text())["figures"]
CLIENT_SERVER_TOLERANCE = 0.02
ARM = re.compile(
    r"^(?P<preset>[a-z0-9-]+?)-(?P<kind>best|profile|drafter(?P<n>\d)(?P<random>-random)?|ctx(?P<depth>\d+))$"
)


@dataclass
class Arm:
    """One run of the study: which preset, what it was (no drafter, drafter N, context D)."""

    path: Path
    preset: str
    kind: str
    draft_n: int | None
    random_drafter: bool
    depth: int | None
    server_args: list[str]
    steps: list[StepFigures] = field(default_factory=list)

    def step(self, users: int) -> StepFigures | None:
        return next((s for s in self.steps if s.users == users), None)


def value(step: StepFigures | None, name: str) -> float | None:
    """A step's figure by name: an estimate's value, or the plain number (None without the step)."""
    if step is None:
        return None
    figure = getattr(step, name)
    return figure.value if isinstance(figure, Estimate) else figure


def fmt(number: float | None, digits: int = 1, suffix: str = "") -> str:
    if number is None or (isinstance(number, float) and math.isnan(number)):
        return "-"
    return f"{number:,.{digits}f}{suffix}"


def read_json(path: Path, optional: bool = False):
    if optional and not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise AnalysisError(
            f"{path}: missing; is {path.parent} a folder the GPU study wrote (rigbench study gpu)?"
        ) from None
    except ValueError as error:
        raise AnalysisError(f"{path}: not valid JSON ({error})") from None


def load_arms(study: Path) -> list[Arm]:
    arms = []
    for manifest_path in sorted((study / "runs").glob("*/manifest.json")):
        manifest = RunDir(manifest_path.parent).read_manifest()
        match = ARM.match((manifest.load.arm if manifest.load else None) or "")
        if match is None or manifest.status != "complete":
            continue
        summary = read_summary(manifest_path.parent / "summary.json")
        steps = {s.users: s for s in summary.runs[0].steps}  # one entry per user count
        arms.append(Arm(
            path=manifest_path.parent,
            preset=match["preset"],
            kind="base" if match["kind"] in ("best", "profile") else match["kind"],  # the no-drafter line
            draft_n=int(match["n"]) if match["n"] else None,
            random_drafter=bool(match["random"]),
            depth=int(match["depth"]) if match["depth"] else None,
            server_args=manifest.server.args if manifest.server else [],
            steps=[steps[u] for u in sorted(steps)],
        ))
    return arms


def serving_flags(args: list[str]) -> str:
    """The run's llama-server line without the flags rigbench adds itself (model paths, host,
    port, API key)."""
    return " ".join(token for group in split_flags(args) if group[0] not in RESERVED_SERVER_FLAGS for token in group)


def ceiling_section(presets: list[str], benches: dict[str, BenchReport | None], depth: dict,
                    models: dict[str, int]) -> list[str]:
    rows = [[p, f"{models.get(f'{p}-q4_0.gguf', 0):,}", fmt(summary_of(b).get("pp512")),
             fmt(summary_of(b).get("tg128"))] for p, b in benches.items()]
    lines = ["## 1. llama-bench ceiling", "",
             tabulate(rows, ["model (synthetic, Q4_0)", "file bytes", "pp512 tok/s", "tg128 tok/s"], "github"), ""]
    e2b = models.get(f"{presets[0]}-q4_0.gguf")
    if e2b and presets[0] == "e2b":
        off = e2b / SEED_L4["e2b_file_bytes"] - 1
        lines.append(f"Synthetic E2B Q4_0 file: {e2b:,} bytes against the published {SEED_L4['e2b_file_bytes']:,} "
                     f"({off:+.2%}; the check asks for within 2%).")
    if depth:
        cells = ", ".join(f"{k.split('@d')[1]} tokens ahead: {v:,.1f}" for k, v in depth.items())
        lines.append(f"tg128 of {presets[0]} at depth (llama-bench `-d`): {cells}.")
    if benches[presets[0]] is not None:
        command = benches[presets[0]].command
        lines += ["", f"llama-bench flags (the profile's, translated): `{serving_flags(command[1:])}`", ""]
    else:
        lines += ["", f"(no llama-bench figures for {presets[0]} in this study)", ""]
    return lines


def summary_of(bench: BenchReport | None) -> dict[str, float]:
    """A llama-bench report's summary ({} when the study has no such file)."""
    return bench.summary if bench is not None else {}


def read_bench(path: Path) -> BenchReport | None:
    """A llama-bench report the study wrote, validated; None when the study has no such file."""
    data = read_json(path, optional=True)
    if data is None:
        return None
    try:
        return BenchReport.model_validate(data)
    except ValidationError as error:
        raise AnalysisError(describe_validation_error(error, path)) from None


def source_line(source: str) -> list[str]:
    """A section measured by an earlier study says which folder its figures come from."""
    return [f"From the earlier study `{source}` (its runs, its llama-bench figures).", ""] if source else []


REPEATED_TRIALS = (
    "A trial run more than once (`--repeats`) is one row: each figure is the mean over its complete runs, with the "
    "1-user server speed and the 64-user aggregate given with their 95% interval between the runs (Student t, "
    "n = runs), the spread a difference between trials is judged by; autotune picks its trial by the same means.")


def trial_repeats(trials: list[dict]) -> list[list[dict]]:
    """The log's lines by trial, in the order each trial first ran, each trial's runs by repeat: the latest line of
    each repeat, as autotune reads its own log (a run made again replaces the earlier one; a line from before
    repeats is repeat 1)."""
    by_name: dict[str, dict[int, dict]] = {}
    for trial in trials:
        by_name.setdefault(trial["name"], {})[trial.get("repeat", 1)] = trial
    return [[runs[index] for index in sorted(runs)] for runs in by_name.values()]


def between_cell(values: list[float], digits: int = 1) -> str:
    """The mean of the runs' figures with its 95% interval between them (just the figure where one run has it)."""
    estimate = between_runs(values)
    if estimate.low is None or estimate.high is None:
        return fmt(estimate.value, digits)
    return f"{fmt(estimate.value, digits)} [{fmt(estimate.low, digits)}, {fmt(estimate.high, digits)}]"


def repeated_trial_row(runs: list[dict]) -> list[str]:
    """A trial run more than once, as one row: why a mean and not each run, or the best run: the table compares
    trials, and a trial's expected speed is what a choice between them rests on; the interval says how far its runs
    landed apart. Figures over the complete runs; the ratio is of the means."""
    first, complete = runs[0], [run for run in runs if run["status"] == "complete"]

    def values(name: str) -> list[float]:
        return [float(run[name]) for run in complete if run.get(name) is not None]

    def mean(name: str) -> float | None:
        found = values(name)
        return sum(found) / len(found) if found else None

    statuses = {run["status"] for run in runs}
    status = (f"{statuses.pop()} ({counted(len(runs), 'run')})" if len(statuses) == 1
              else f"{len(complete)} of {counted(len(runs), 'run')} complete")
    many = (first.get("max_users") or 0) > 1
    one_user, agg = mean("one_user_server_tok_s"), mean("aggregate_tok_s_at_max_users")
    return [
        first["name"], " ".join(first["overrides"]) or "(profile as is)", status,
        between_cell(values("one_user_server_tok_s")), fmt(mean("one_user_client_tok_s")),
        fmt(mean("one_user_vs_bench"), 3), between_cell(values("aggregate_tok_s_at_max_users")) if many else "-",
        fmt(agg / one_user, 2) if many and agg and one_user else "-",
    ]


def autotune_section(study: Path, tg128: float | None, source: str = "") -> list[str]:
    path = study / "autotune" / "autotune.jsonl"
    if not path.exists():
        return []
    trials = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows, grouped = [], trial_repeats(trials)
    for runs in grouped:
        if len(runs) > 1:
            rows.append(repeated_trial_row(runs))
            continue
        (t,) = runs
        ratio = t.get("one_user_vs_bench")
        one_user = t.get("one_user_server_tok_s")
        agg = t.get("aggregate_tok_s_at_max_users")
        many = t.get("max_users", 0) and t.get("max_users", 0) > 1
        rows.append([
            t["name"], " ".join(t["overrides"]) or "(profile as is)", t["status"], fmt(one_user),
            fmt(t.get("one_user_client_tok_s")), fmt(ratio, 3), fmt(agg) if many else "-",
            fmt(agg / one_user, 2) if many and agg and one_user else "-",
        ])
    lines = [
        "## 2. What limits llama-server: autotune trials (every trial kept in autotune/autotune.jsonl)", "",
        *source_line(source),
        "Each trial: a profile's serving line plus the flags shown (each run directory has the whole "
        "line), a fresh server, 1 user then 64 users (trials with one user only leave the 64-user "
        "columns empty). One-user speed is llama-server's own decode rate (`timings.predicted_per_second`, "
        f"median over requests) against llama-bench tg128 ({fmt(tg128)}).", "",
        *([REPEATED_TRIALS, ""] if any(len(runs) > 1 for runs in grouped) else []),
        tabulate(rows, ["trial", "flags added", "status", "1 user server tok/s", "1 user client tok/s",
                        "1 user / tg128", "64-user aggregate tok/s", "64 users / 1 user (server)"], "github"), "",
    ]
    if (study / "best.json").exists():  # studies that chose the sweeps' flags by autotune
        best = json.loads((study / "best.json").read_text())
        whose = ("That study's automatic pick for its own sweeps" if source
                 else "The study's automatic pick for the sweeps below")
        lines += [f"{whose}: `{best.get('name')}` "
                  f"(`{' '.join(best.get('overrides', []))}`).", ""]
    return lines


def greedy_reference(name: str, names: Iterable[str]) -> str | None:
    """What a greedy-check setting is compared with: CPU sampling on the same target, with the
    drafter when the setting has one (the drafter changes greedy text by itself: llama.cpp's
    kernels round a 3-token pass differently from three 1-token passes)."""
    target, setting = name.split("/", 1)
    base = f"{target}/cpu-sampling" + ("+drafter" if "+drafter" in setting else "")
    return base if base != name and base in names else None


def differing_replies(replies: dict, name: str, other: str) -> int:
    """How many of two settings' greedy replies (same prompts, same order) differ."""
    texts = [reply["text"] for reply in replies[name].values()]
    others = [reply["text"] for reply in replies[other].values()]
    return sum(a != b for a, b in zip_longest(texts, others))


def greedy_section(study: Path) -> list[str]:
    path = study / "greedy.json"
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    replies = data["replies"]
    names = [n for n in replies if "error" not in replies[n]]

    def sameness(name: str, other: str) -> str:
        differ = differing_replies(replies, name, other)
        return "yes" if differ == 0 else f"no ({differ} of {len(replies[name])} replies differ)"

    rows = []
    for name in names:
        ref = greedy_reference(name, names)
        no_drafter = name.replace("+drafter", "")
        has_plain = "+drafter" in name and no_drafter in names
        accepted = sum((r.get("timings") or {}).get("draft_n_accepted") or 0 for r in replies[name].values())
        drafted = sum((r.get("timings") or {}).get("draft_n") or 0 for r in replies[name].values())
        rows.append([name, ref or "-", sameness(name, ref) if ref else "-",
                     sameness(name, no_drafter) if has_plain else "-",
                     f"{accepted}/{drafted}" if drafted else "-"])
    errors = [f"- `{n}` failed: {replies[n]['error']}" for n in replies if "error" in replies[n]]
    if data.get("median_top2_margin_cpu_sampling") is not None:
        errors.append(f"- Median log-probability margin between the two best candidates (CPU sampling): "
                      f"{data['median_top2_margin_cpu_sampling']:.4f}.")
    for name, prompts in (data.get("where_texts_part") or {}).items():
        for prompt, where in prompts.items():
            if where:
                errors.append(f"- `{name}` parts from CPU sampling at token {where['token_index']} of '{prompt}', "
                              f"where the two best candidates were {fmt(where['top2_margin'], 4)} apart.")
    return [
        "## 3. Greedy text under each setting", "",
        "Four greedy replies of 48 tokens per setting (two prompts, repeat_penalty 1.0 and 1.5; the penalty "
        "makes random-weight text vary). `plain` is an E2B without the favoured token (random text); "
        "`favoured` is the target the drafter arms use.", "",
        tabulate(rows, ["setting", "compared with", "same text", "same text as without the drafter",
                        "drafts accepted"], "github"), "", *errors, "",
    ]


def sweep_rows(arm: Arm) -> list[list[str]]:
    rows = []
    one = value(arm.step(1), "aggregate_tok_s")
    for s in arm.steps:
        agg = s.aggregate_tok_s
        server, client = s.server_tok_s.value, s.client_tok_s.value
        diff = (client / server - 1) if server and client else None
        rows.append([
            s.users, f"{fmt(agg.value)} [{fmt(agg.low, 0)}, {fmt(agg.high, 0)}]",
            fmt(agg.value / one, 2) if one and agg.value is not None else "-", fmt(server), fmt(client),
            fmt(diff * 100, 2, " %") if diff is not None else "-",
            fmt(s.ttft_s["p50"].value if "p50" in s.ttft_s else None, 3),
            fmt(s.draft_acceptance.value, 2), fmt(s.tokens_per_decode_step, 2),
            s.completed_in_window,
        ])
    return rows


SWEEP_HEADERS = ["users", "aggregate tok/s [95%]", "x 1 user", "per-user server tok/s", "per-user client tok/s",
                 "client vs server", "TTFT p50 s", "draft acceptance", "tokens per step", "requests ended in window"]


def agreement_lines(arms: list[Arm]) -> list[str]:
    worst = []
    for arm in arms:
        for s in arm.steps:
            server, client = s.server_tok_s.value, s.client_tok_s.value
            if server and client:
                worst.append((abs(client / server - 1), arm, s.users))
    if not worst:
        return []
    gap, arm, users = max(worst, key=lambda item: item[0])
    verdict = "within" if gap <= CLIENT_SERVER_TOLERANCE else "OUTSIDE"
    return [f"Client-measured and server-reported per-user speed: largest gap {gap:.2%} "
            f"({arm.path.name}, {counted(users, 'user')}), {verdict} the {CLIENT_SERVER_TOLERANCE:.0%} required.", ""]


def sweep_section(arms: list[Arm]) -> list[str]:
    lines = ["## 4. Sweeps, 1 to 64 users (mixed prompts, 256-token replies)", ""]
    for arm in arms:
        if arm.depth is not None:
            continue
        title = f"### {arm.preset} " + ("without drafter" if arm.kind == "base" else
                                         f"with drafter, {counted(arm.draft_n, 'drafted token')}"
                                         + (" (a drafter that is almost never right)" if arm.random_drafter else ""))
        lines += [title, "", f"Run `{arm.path.name}`; server: `{serving_flags(arm.server_args)}`", "",
                  tabulate(sweep_rows(arm), SWEEP_HEADERS, "github"), ""]
    lines += agreement_lines([a for a in arms if a.depth is None])
    return lines


def decode_steps(run: Path) -> dict[int, float]:
    """users -> llama-server decode calls per second over each step's measured window, by the
    figures' own definition (``analysis.figures.decode_call_rates``); read from the run's telemetry
    here because a study reads each run's summary.json, not its figures."""
    run_dir = RunDir(run)
    windows = run_dir.read_manifest().steps
    rates = decode_call_rates(run_dir.read_telemetry(), [window.index for window in windows])
    return {window.users: rates[window.index] for window in windows if window.index in rates}


def least_squares_slope(points: list[tuple[float, float]]) -> float | None:
    """The slope of the least-squares line through the points; None for fewer than two x values."""
    try:
        return statistics.linear_regression([x for x, _ in points], [y for _, y in points]).slope
    except statistics.StatisticsError:
        return None


def decode_step_section(arms: list[Arm], decode_rates: dict[Path, dict[int, float]]) -> list[str]:
    """How long one decode call of llama-server takes as users are added (from /metrics)."""
    lines = []
    for arm in arms:
        if arm.kind != "base":
            continue
        rates = decode_rates.get(arm.path)
        if not rates:
            continue
        rows, points = [], []
        for users, rate in sorted(rates.items()):
            aggregate = value(arm.step(users), "aggregate_tok_s")
            step_ms = 1000 / rate
            points.append((users, step_ms))
            rows.append([users, fmt(rate), fmt(step_ms, 2), fmt(aggregate / rate, 1) if aggregate else "-"])
        slope = least_squares_slope(points)
        lines += [f"### {arm.preset}", "", tabulate(rows, ["users", "decode calls/s", "ms per decode call",
                                                            "tokens per call (aggregate / calls)"], "github"), "",
                  f"Least-squares slope: {fmt(slope, 3)} ms more per decode call for each added user.", ""]
    if not lines:
        return []
    return ["## 4a. What grows with users: llama-server's decode call", "",
            "From the server's `n_decode_total` counter over each measured window (prompt calls "
            "included). One call decodes a token for every busy slot and reads the weights once, so "
            "time that grows with every added sequence is per-sequence work: attention over its own "
            "context, sampling, and the server's per-token handling. llama-batched-bench (same kernels, "
            "no sampling, no server) separates the GPU's share.", "", *lines]


def batched_ceiling_section(study: Path, arms: list[Arm], decode_rates: dict[Path, dict[int, float]]) -> list[str]:
    """llama-batched-bench's decode rate for N sequences (the card's ceiling for N users with the
    same kernels, no sampling, no HTTP) beside what llama-server served to N users."""
    lines = []
    for preset in dict.fromkeys(a.preset for a in arms):
        found = {p.name[len(f"batched-bench-{preset}-"):-len(".json")]: read_ceiling(p)
                 for p in sorted(study.glob(f"batched-bench-{preset}-*.json"))}
        files = {label: ceiling for label, ceiling in found.items() if ceiling is not None}
        if not files:
            continue
        base = next((a for a in arms if a.preset == preset and a.kind == "base" and a.depth is None), None)
        rates = decode_rates.get(base.path, {}) if base else {}
        labels = list(files)
        counts = sorted({users for ceiling in files.values() for users in ceiling.decode_tok_s})
        rows = []
        for users in counts:
            ceilings = [files[label].decode_tok_s.get(users) for label in labels]
            served = value(base.step(users), "aggregate_tok_s") if base else None
            best = max((c for c in ceilings if c), default=None)
            rows.append([users, *(fmt(c) for c in ceilings), fmt(served),
                         fmt(served / best, 2) if served and best else "-",
                         fmt(users / best * 1000, 2) if best else "-",
                         fmt(1000 / rates[users], 2) if users in rates else "-"])
        command = next(iter(files.values())).command
        npp, ntg = (command[command.index(flag) + 1] if flag in command else "?" for flag in ("-npp", "-ntg"))
        lines += [f"### {preset}", "", tabulate(rows, [
            "users", *(f"batched-bench tg tok/s ({label})" for label in labels),
            "served aggregate tok/s", "served / best ceiling", "ms per step (batched-bench)",
            "ms per decode call (server)"], "github", disable_numparse=True), "",
            f"llama-batched-bench: {npp} prompt tokens then {ntg} generated per sequence, every sequence "
            f"decoding together; flags `{serving_flags(command[1:])}`.", ""]
    if not lines:
        return []
    return ["## 4b. The card's batched-decode ceiling against what llama-server served", "",
            "llama-batched-bench decodes N sequences in lockstep with the same build and kernels, with no "
            "sampling, no HTTP and no slot scheduling: what N users could get at most. The served "
            "aggregate is the sweep above (staggered requests, prefill mixed in).", "", *lines]


def drafter_section(arms: list[Arm]) -> list[str]:
    rows = []
    for preset in dict.fromkeys(a.preset for a in arms):
        base = next((a for a in arms if a.preset == preset and a.kind == "base"), None)
        for arm in arms:
            if arm.preset != preset or arm.draft_n is None:
                continue
            for users in (1, 64):
                step, ref = arm.step(users), base.step(users) if base else None
                speed = value(step, "server_tok_s") if users == 1 else value(step, "aggregate_tok_s")
                ref_speed = value(ref, "server_tok_s") if users == 1 else value(ref, "aggregate_tok_s")
                per_step = value(step, "tokens_per_decode_step")
                one_user_rate = value(step, "server_tok_s") if users == 1 else None
                step_ms = per_step / one_user_rate * 1000 if per_step and one_user_rate else None
                rows.append([preset, arm.draft_n, "~0" if arm.random_drafter else "~1", users,
                             fmt(speed), fmt(ref_speed), fmt(speed / ref_speed, 2) if speed and ref_speed else "-",
                             fmt(value(step, "draft_acceptance"), 2), fmt(per_step, 2), fmt(step_ms, 2)])
    if not rows:
        return []
    caveat = []
    bases = {a.preset: a for a in arms if a.kind == "base"}

    def on_gpu(arm: Arm) -> bool:
        return "--backend-sampling" in arm.server_args

    unlike = sorted({a.path.name for a in arms
                     if a.draft_n is not None and a.preset in bases and on_gpu(a) != on_gpu(bases[a.preset])})
    if unlike:
        caveat = [f"**Not like for like:** {counted(len(unlike), 'drafter run')} sampled in a different place (CPU "
                  "or GPU) from the run without the drafter, so their ratios mix the drafter with the sampling cost: "
                  + ", ".join(f"`{name}`" for name in unlike) + ".", ""]
    return [
        "## 5. Drafter gains and acceptance", "", *caveat,
        "Speed at 1 user is llama-server's per-request decode rate; at 64 users the aggregate. "
        "The favoured drafter always guesses the token the favoured target always picks "
        "(acceptance ~1, the most a drafter can give); the random one almost never (~0, its pure cost). "
        "Step time = tokens per step / decode rate.", "",
        tabulate(rows, ["model", "drafted tokens", "acceptance by design", "users", "tok/s with drafter",
                        "tok/s without", "ratio", "measured acceptance", "tokens per step", "ms per step (1 user)"],
                 "github"), "",
    ]


def long_context_section(arms: list[Arm], tg0: float | None, bench: dict, source: str = "") -> list[str]:
    ctx = sorted((a for a in arms if a.depth is not None), key=lambda a: a.depth)
    if not ctx:
        return []
    base = value(ctx[0].step(1), "server_tok_s")
    rows = []
    for arm in ctx:
        s = arm.step(1)
        server = value(s, "server_tok_s")
        ceiling = tg0 if arm.depth == 0 else bench.get(f"tg128@d{arm.depth}")
        rows.append([f"{arm.depth:,}", fmt(server), fmt(value(s, "client_tok_s")), fmt(ceiling),
                     fmt(server / ceiling, 2) if server and ceiling else "-",
                     fmt(server / base, 2) if server and base else "-",
                     fmt(s.ttft_s["p50"].value if s and "p50" in s.ttft_s else None, 2),
                     fmt(value(s, "aggregate_tok_s"))])
    seed = SEED_L4["e2b_story_120k"] / SEED_L4["e2b_story_empty"]
    return [
        "## 6. Long context (E2B, one user, prompt cache off)", "", *source_line(source),
        f"Server: `{serving_flags(ctx[0].server_args)}`. The first D tokens of a long document go ahead of "
        "each prompt, counted by the served model's /tokenize.", "",
        tabulate(rows, ["tokens ahead", "decode tok/s (server)", "decode tok/s (client)", "llama-bench tg128 at depth",
                        "server / bench", "vs 0 ahead", "TTFT p50 s", "aggregate tok/s (prefill included)"], "github"),
        "", f"Seed, L4, real E2B story: {SEED_L4['e2b_story_empty']} tok/s empty, {SEED_L4['e2b_story_120k']} at "
        f"120,000 ahead ({seed:.2f} of empty).", "",
    ]


def seed_section(arms: list[Arm]) -> list[str]:
    e2b = next((a for a in arms if a.preset == "e2b" and a.kind == "base"), None)
    e4b_d = next((a for a in arms if a.preset == "e4b" and a.draft_n == 2 and not a.random_drafter), None)
    rows = []
    if e2b:
        ours = value(e2b.step(1), "server_tok_s")
        rows.append(["E2B one user, no drafter (tok/s)", fmt(ours), fmt(SEED_L4["e2b_one_user"]),
                     fmt(ours / SEED_L4["e2b_one_user"], 2) if ours else "-"])
    if e2b and e4b_d:
        ratio = value(e4b_d.step(1), "server_tok_s") / value(e2b.step(1), "server_tok_s")
        rows.append(["E4B with drafter / E2B without, one user", fmt(ratio, 3),
                     fmt(SEED_L4["e4b_drafter_one_user"] / SEED_L4["e2b_one_user"], 3), "-"])
    drafter3 = next((a for a in arms if a.preset == "e2b" and a.draft_n == 3 and not a.random_drafter), None)
    if e2b and drafter3:
        ratio = value(drafter3.step(1), "server_tok_s") / value(e2b.step(1), "server_tok_s")
        rows.append(["drafter (3 tokens) at one user, vs none (ours: acceptance ~1 by design)", fmt(ratio, 2),
                     f"{SEED_L4['drafter_gain_code_3']:.2f} code, {SEED_L4['drafter_gain_story_3']:.2f} story", "-"])
    drafter64 = [a for a in arms if a.preset == "e2b" and a.draft_n == 2 and not a.random_drafter]
    if e2b and drafter64:
        ratio = value(drafter64[0].step(64), "aggregate_tok_s") / value(e2b.step(64), "aggregate_tok_s")
        rows.append(["drafter (2 tokens) at 64 users, vs none", fmt(ratio, 2), fmt(SEED_L4["drafter_at_64"], 2), "-"])
    if not rows:
        return []
    return ["## 7. The seed articles' L4 figures, for orientation", "",
            f"Seed card: {SEED_L4['card']}. Ours: synthetic weights, so only ratios carry over.", "",
            tabulate(rows, ["figure", "H200 (this study)", "L4 (seed)", "H200 / L4"], "github"), ""]


STUDY_PLOTS = {
    "sweep_aggregate.png": ("aggregate_tok_s", PlotSpec("Aggregate output throughput, every arm",
                                                        "aggregate output tokens (tok/s)")),
    "sweep_per_user.png": ("server_tok_s", PlotSpec("Per-user decode speed, every arm",
                                                    "median per-user decode, server timings (tok/s)")),
}


def arm_label(arm: Arm) -> str:
    return f"{arm.preset} " + ("no drafter" if arm.kind == "base" else f"drafter {arm.draft_n}"
                               + (" (random)" if arm.random_drafter else ""))


def draw_plots(arms: list[Arm], out: Path) -> list[str]:
    """The sweep arms (no long-context runs) side by side, with each figure's 95% interval."""
    out.mkdir(exist_ok=True)
    sweeps = [arm for arm in arms if arm.depth is None]
    for filename, (name, spec) in STUDY_PLOTS.items():
        lines = [(arm_label(arm), [(float(s.users), getattr(s, name)) for s in arm.steps]) for arm in sweeps]
        draw_lines(out / filename, spec, [line for line in lines if line[1]])
    return list(STUDY_PLOTS)


def bench_ceilings(study: Path, preset: str) -> tuple[float | None, dict]:
    """(tg128, {tg128@dD: ...}) of a study's llama-bench files for one preset."""
    tg0 = summary_of(read_bench(study / f"bench-{preset}.json")).get("tg128")
    return tg0, summary_of(read_bench(study / f"bench-{preset}-depth.json"))


@unwritten_said_as(AnalysisError, "every file is written whole or not at all, so none is cut; free space "
                   "there, then write it again")
def write_study_report(study: Path | str, earlier: Iterable[Path | str] = ()) -> Path:
    """Write STUDY/REPORT.md and STUDY/plots/; returns the report's path. Sections this study did
    not measure (autotune, long context) are taken from the first ``earlier`` study that did, and
    say so."""
    study = Path(study)
    earlier = [Path(e) for e in earlier]
    arms = load_arms(study)
    settings = study / "study.json"
    benched = sorted(p.name[len("bench-"):-len(".json")] for p in study.glob("bench-*.json") if "-depth" not in p.name)
    declared = read_json(settings)["presets"] if settings.exists() else []
    presets = list(dict.fromkeys([*declared, *(a.preset for a in arms if a.depth is None),
                                  *(a.preset for a in arms), *benched]))
    build = read_json(study / "build_manifest.json")
    if not presets:
        raise AnalysisError(f"{study}: no bench-*.json and no study runs to report on")
    devices = (study / "list_devices.txt").read_text().strip() if (study / "list_devices.txt").exists() else ""
    benches = {p: read_bench(study / f"bench-{p}.json") for p in presets}
    depth = summary_of(read_bench(study / f"bench-{presets[0]}-depth.json"))
    tg0 = summary_of(benches[presets[0]]).get("tg128")
    plots = draw_plots(arms, study / "plots")
    decode_rates = {arm.path: decode_steps(arm.path) for arm in arms if arm.kind == "base" and arm.depth is None}

    def first_with(has: Callable[[Path], bool]) -> Path | None:
        return next((folder for folder in [study, *earlier] if has(folder)), None)

    def named(folder: Path) -> str:
        return "" if folder == study else os.path.relpath(folder.resolve(), study.resolve())

    def ceilings_of(folder: Path) -> tuple[float | None, dict]:
        return (tg0, depth) if folder == study else bench_ceilings(folder, presets[0])

    loaded = {study: arms}

    def arms_in(folder: Path) -> list[Arm]:
        if folder not in loaded:
            loaded[folder] = load_arms(folder)
        return loaded[folder]

    tuned = first_with(lambda folder: (folder / "autotune" / "autotune.jsonl").exists())
    long_ctx = first_with(lambda folder: any(a.depth is not None for a in arms_in(folder)))
    lines = [
        "# GPU study: synthetic Gemma 4 E2B / E4B on llama.cpp", "",
        f"Build: {build['backend']} for compute capability {build.get('cuda_arch')}, "
        f"{build['build_seconds']} s, source `{build['source']}`. "
        f"Devices: `{devices.splitlines()[-1].strip() if devices else '?'}`.",
        "", "Models are synthetic: real Gemma 4 tensor shapes, random weights, so the text is random and every "
        "reply is exactly 256 tokens (the synthetic vocabulary cannot produce end-of-text). Speed depends on "
        "shapes and kernels, not on weight values; quality is not measured here.", "",
        *ceiling_section(presets, benches, depth, read_json(study / "models.json")),
        *(autotune_section(tuned, ceilings_of(tuned)[0], named(tuned)) if tuned else []),
        *greedy_section(study),
        *sweep_section(arms), *(f"![{p}](plots/{p})" for p in plots), "",
        *decode_step_section(arms, decode_rates), *batched_ceiling_section(study, arms, decode_rates),
        *drafter_section(arms),
        *(long_context_section(arms_in(long_ctx), *ceilings_of(long_ctx), named(long_ctx))
          if long_ctx else []),
        *seed_section(arms),
    ]
    report = study / "REPORT.md"
    write_whole(report, "\n".join(lines) + "\n")
    return report
