"""The real-Gemma study's tables from its folder: served ÷ ceiling, where the time goes, the drafter.

Reads what ``rigbench.studies.real_gemma`` left (``phases.jsonl`` names each arm's run folder;
``bench.json``, ``batched-bench-*.json``, each run's ``summary.json`` and ``telemetry.jsonl``) and
writes Markdown: a study folder is its own evidence, and its tables can be made again from it.

Usage: ``rigbench study real-gemma-report STUDY [--out README-tables.md]``.
"""

from __future__ import annotations

import json
from pathlib import Path

from tabulate import tabulate

from analysis.arms import arm_of
from analysis.ceiling import read_ceiling
from analysis.study_report import decode_steps
from analysis.summary import read_summary
from analysis.time_budget import arm_run, run_budgets
from core.rundir import RunDir
from rigbench.autotune import TrialResult, autotune_table, best_trial, headline_figures, kept_sentence
from rigbench.studies.real_gemma import DRAFTER_ARMS, SWEEP_ARMS


def arm_runs(study: Path) -> dict[str, Path]:
    """Arm label -> its run folder, from the study's phase log: the last complete run of each label, or, where the
    label's last runs are repeats of one series (``--repeats``), the repeat closest to their mean aggregate at the
    largest step (the earliest on a tie): a typical run, not the luckiest. ``rigbench report`` on the repeats gives
    the spread between them."""
    groups: dict[str, tuple[str | None, list[Path]]] = {}
    for line in (study / "phases.jsonl").read_text().splitlines():
        entry = json.loads(line)
        if entry.get("phase") == "run" and entry.get("status") == "complete":
            series, runs = groups.get(entry["label"], (None, []))
            path = study / "runs" / entry["run"]
            same = entry.get("series") is not None and entry.get("series") == series
            groups[entry["label"]] = (entry.get("series"), [*runs, path] if same else [path])
    return {label: typical_run(runs) for label, (_, runs) in groups.items()}


def typical_run(runs: list[Path]) -> Path:
    """The run whose aggregate at its largest step is closest to the runs' mean (the first where none has one)."""
    if len(runs) == 1:
        return runs[0]
    tops = {}
    for run in runs:
        steps = read_summary(run / "summary.json").runs[0].steps if (run / "summary.json").exists() else []
        top = max(steps, key=lambda step: step.users).aggregate_tok_s.value if steps else None
        if top is not None:
            tops[run] = top
    if not tops:
        return runs[0]
    mean = sum(tops.values()) / len(tops)
    return min(tops, key=lambda run: (round(abs(tops[run] - mean), 6), runs.index(run)))  # two runs always tie


def fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def sweep_tables(study: Path, runs: dict[str, Path]) -> list[str]:
    ceilings = {name: read_ceiling(study / f"batched-bench-{name}.json") for name in ("per-slot-kv", "unified-kv")}
    kv = {label: "unified-kv" if "-kvu" in flags else "per-slot-kv" for label, _, _, flags, _ in SWEEP_ARMS}
    arms, figures, calls, measured = [], {}, {}, []
    for label, *_ in SWEEP_ARMS:
        if label not in runs:
            continue
        arms.append(label)
        steps = read_summary(runs[label] / "summary.json").runs[0].steps
        figures.update({(label, figure.users): figure for figure in steps})
        calls[label] = decode_steps(runs[label])
        arm = arm_of(RunDir(runs[label]).read_manifest(), label)
        if arm is not None:  # the arm's flags come from its manifest, as `rigbench report` reads them
            measured.append(arm_run(arm, steps, calls[label], ceilings[kv[label]]))
    if not arms:
        return ["No sweep arm completed."]
    _, budgets = run_budgets(measured)
    by_step = sorted((budget for steps in budgets for budget in steps), key=lambda b: (b.users, arms.index(b.arm)))
    budget_rows = [[b.users, b.arm, f"{b.served_share:.2f}", fmt(b.ceiling_ms, 1), fmt(b.call_ms, 1),
                    fmt(b.sampling_ms, 1), fmt(b.slots_ms, 1), fmt(b.rest_ms, 1), b.reading] for b in by_step]
    users = sorted({count for _, count in figures})
    served_rows, call_rows = [], []
    for count in users:
        served_row, call_row = [count], [count]
        for label in arms:
            figure = figures.get((label, count))
            ceiling = ceilings[kv[label]]
            top = ceiling.decode_tok_s.get(count) if ceiling else None
            if figure is None:
                served_row.append("-")
                call_row.append("-")
                continue
            value, low, high = figure.aggregate_tok_s.value, figure.aggregate_tok_s.low, figure.aggregate_tok_s.high
            share = f" ({value / top:.2f})" if value and top else ""
            served_row.append(f"{fmt(value)} [{fmt(low)}-{fmt(high)}]{share}")
            rate = calls[label].get(count)
            # tokens served per decode call: how many busy slots one call carried, on average
            per_call = f" / {value / rate:.1f}" if rate and value else ""
            call_row.append(fmt(1000 / rate if rate else None, 1) + per_call)
        per_slot, unified = (ceilings[name].decode_tok_s.get(count) if ceilings[name] else None
                             for name in ("per-slot-kv", "unified-kv"))
        served_rows.append([*served_row, f"{fmt(per_slot)} / {fmt(unified)}"])
        call_rows.append(call_row)
    return [
        "### Served aggregate tok/s [95% interval] (÷ llama-batched-bench's decode tok/s with as many sequences)", "",
        tabulate(served_rows, ["users", *arms, "ceiling per-slot / unified"], "github"), "",
        "### The server's ms per decode call / tokens per call (llamacpp:n_decode_total over each window)", "",
        "Tokens per call is the served aggregate over the calls per second: the sequences one call carried, on "
        "average (prompt calls are counted as calls too, so it reads a little low).", "",
        tabulate(call_rows, ["users", *arms], "github"), "",
        "### Where the time of one decode call goes (ms), and the reading", "",
        tabulate(budget_rows, ["users", "arm", "served ÷ ceiling", "card's step", "server's call", "sampling",
                               "slot layout", "server loop", "reading"], "github"), "",
    ]


DRAFT_ON_CPU = "--no-spec-draft-backend-sampling"


def drafter_table(runs: dict[str, Path]) -> list[str]:
    """Each drafter arm at one user; the best draft length among the arms of the line as shipped (the
    target's sampling on the GPU, the draft's sampling where llama-server puts it by default)."""
    rows, best = [], None
    for label, draft, gpu_sampling, extra in DRAFTER_ARMS:
        run = runs.get(label)
        if run is None:
            continue
        (figure,) = read_summary(run / "summary.json").runs[0].steps[:1]
        calls = decode_steps(run).get(1)
        tok_s = figure.aggregate_tok_s
        draft_place = "-" if not draft else "CPU" if DRAFT_ON_CPU in extra else "GPU"
        rows.append([label, draft, "GPU" if gpu_sampling else "CPU", draft_place,
                     f"{fmt(tok_s.value, 1)} [{fmt(tok_s.low, 1)}-{fmt(tok_s.high, 1)}]",
                     fmt(figure.draft_acceptance.value, 2) if draft else "-",
                     fmt(figure.tokens_per_decode_step, 2) if draft else "1.00",
                     fmt(1000 / calls, 2) if calls else "-"])
        shipped = gpu_sampling and not extra
        if shipped and tok_s.value and (best is None or tok_s.value > best[1]):
            best = (draft, tok_s.value)
    if not rows:
        return ["No drafter run completed."]
    line = f"Best draft length here: {best[0]} ({best[1]:.1f} tok/s)." if best else ""
    return ["### One user with a drafter of a lower rung (Q2_K of the same model)", "",
            tabulate(rows, ["arm", "drafted tokens", "target's sampling", "draft's sampling", "tok/s [95%]",
                            "accepted share", "tokens per decode step", "ms per decode call"], "github"),
            "", line, ""]


def autotune_tables(study: Path) -> list[str]:
    """The autotune trials over the many-users line, and the one it keeps."""
    log = study / "autotune" / "autotune.jsonl"
    if not log.exists():
        return []
    results = []
    for line in log.read_text().splitlines():
        result = TrialResult.model_validate_json(line)
        summary = study / "autotune" / Path(result.run_path or "-").name / "summary.json"
        if result.status == "complete" and summary.exists():  # figures from the folder itself, intervals included
            result = result.model_copy(update=headline_figures(summary))
        results.append(result)
    best = best_trial(results)
    return ["### Autotune over the many-users line", "", autotune_table(results, best), "",
            kept_sentence(results, best) + ".", ""]


def study_tables(study: Path) -> str:
    runs = arm_runs(study)
    lines = []
    model = study / "model.json"
    if model.exists():
        facts = json.loads(model.read_text())
        lines += [f"Model: `{facts['file']}`, {facts['size']:,} bytes, sha256 `{facts['sha256']}` "
                  f"({'matches the pin' if facts['matches'] else 'DIFFERS from the pin'}), from {facts['source']}; "
                  f"{facts['terms']}.", ""]
    bench = study / "bench.json"
    if bench.exists():
        summary = json.loads(bench.read_text())["summary"]
        lines += [f"llama-bench at the one-user line: pp512 {fmt(summary.get('pp512'))} tok/s, "
                  f"tg128 {fmt(summary.get('tg128'), 1)} tok/s.", ""]
    return "\n".join([*lines, *sweep_tables(study, runs), *drafter_table(runs), *autotune_tables(study)]) + "\n"
