"""The same ladder on several machines, in the article's tables: right per rung per machine, whether every
machine ran the same bytes, each machine's best trade with its decode speed, and per pair of machines
the grid's counts (graded differently, lost on both, first lost on both at the same rung).

Why a module apart from the pairwise grid: a loop over N rigs has N ladders and N(N-1)/2 grids, and the
reader needs one page that lines them up before opening any single grid.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from tabulate import tabulate

from analysis.quality_compare import SIGNIFICANT_P, format_p, load_eval, paired
from analysis.quality_grid import write_grid
from analysis.quality_report import RungResult, best_trade, load_ladder
from core.errors import AnalysisError


@dataclass(frozen=True)
class Machine:
    """One machine's ladder (or eval) folder and the name the tables give it."""

    label: str
    folder: Path


@dataclass(frozen=True)
class AcrossPage:
    """A page across machines, and its answer in one paragraph: what a reader of the loop's headline needs
    before any table (each machine's best trade, and whether any pair differs beyond noise)."""

    markdown: str
    glance: str


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", label).strip("-")


def different_files(ladders: dict[str, list[RungResult]]) -> dict[str, dict[str, str]]:
    """Each rung whose file is not the same on every machine: which machine holds which digest."""
    found = {}
    for name in dict.fromkeys(rung.name for rungs in ladders.values() for rung in rungs):
        digests = {label: rung.sha256 for label, rungs in ladders.items() for rung in rungs if rung.name == name}
        if len(set(digests.values())) > 1:
            found[name] = digests
    return found


def same_bytes(different: dict[str, dict[str, str]]) -> list[str]:
    """One line per rung whose file is not the same on every machine (``different_files``), naming who has which
    digest."""
    return [f"- **{name}: different files** ({'; '.join(f'{label} {digest[:12]}' for label, digest in held.items())}"
            "): left out of the grids of the pairs that differ." for name, held in different.items()]


def ladders_across(machines: list[Machine], out: Path) -> AcrossPage:
    """The page's markdown; every pair's grid is written under ``out/grids/`` (a pair that cannot be compared
    says why in one line instead)."""
    ladders: dict[str, list[RungResult]] = {}
    problems = []
    for machine in machines:
        try:
            ladders[machine.label] = load_ladder(machine.folder)[1]
        except AnalysisError as error:
            problems.append(f"- {machine.label}: no ladder to compare ({error})")
    lines = ["## Answers per rung on each machine", ""]
    rung_names = list(dict.fromkeys(rung.name for rungs in ladders.values() for rung in rungs))
    rows = []
    for name in rung_names:
        row: dict[str, object] = {"rung": name}
        for label, rungs in ladders.items():
            rung = next((r for r in rungs if r.name == name), None)
            row[f"{label}: right (higher is better)"] = (
                "—" if rung is None else f"{sum(a.right for a in rung.result.answers.values())}/"
                f"{len(rung.result.answers)}")
            row[f"{label}: decode tok/s (higher is better)"] = "—" if rung is None or rung.speed is None else round(
                rung.speed, 1)
        rows.append(row)
    if rows:
        lines += [tabulate(rows, headers="keys", tablefmt="github"), ""]
    different = different_files(ladders)
    lines += same_bytes(different) or ["Every rung is the same file (sha256) on every machine."]
    lines += ["", "### Best trade per machine", "",
              "The fastest rung whose loss against the machine's own top rung is not significant (McNemar, p < 0.05).",
              ""]
    trades = []
    for label, rungs in ladders.items():
        best = best_trade(rungs)
        if best is None:
            lines.append(f"- {label}: no rung without a significant loss has a decode speed")
            trades.append(f"{label}: none without a significant loss")
            continue
        right = f"{sum(a.right for a in best.result.answers.values())}/{len(best.result.answers)} right"
        lost = "" if best.pair is None else (f", lost {best.pair.lost} / gained {best.pair.gained}, p = "
                                             f"{format_p(best.pair.p_value)}")
        lines.append(f"- {label}: **{best.name}**, {right}{lost}, {best.speed:.1f} decode tok/s (median per answer)")
        trades.append(f"{label}: {best.name}, {right} at {best.speed:.1f} decode tok/s")
    verdicts = []
    lines += ["", "### Machine against machine", ""]
    for (label_a, _), (label_b, _) in combinations(ladders.items(), 2):
        folder_a = next(m.folder for m in machines if m.label == label_a)
        folder_b = next(m.folder for m in machines if m.label == label_b)
        target = out / "grids" / f"{_slug(label_a)}-vs-{_slug(label_b)}"
        try:
            write_grid(folder_a, folder_b, target, leave_out_different_files=True, labels=(label_a, label_b))
        except AnalysisError as error:
            lines += [f"- {label_a} vs {label_b}: no grid ({error})", ""]
            verdicts.append(f"{label_a} vs {label_b}: no grid")
            continue
        grid = json.loads((target / "grid.json").read_text())
        grid_rows = _grid_rows(grid)
        verdicts.append(f"{label_a} vs {label_b}: {_machine_verdict(grid)}")
        lines += [f"**{label_a} vs {label_b}** ([grid]({target.relative_to(out)}/grid.md))", "",
                  tabulate(grid_rows, headers="keys", tablefmt="github"), ""]
    glance = (f"Best trade (the fastest rung that lost nothing beyond noise against the machine's own top rung): "
              f"{'; '.join(trades) or 'no ladder to read'}.")
    if verdicts:
        glance += (" Machine against machine, rung by rung (McNemar, each rung's own p, not corrected for the rungs "
                   f"compared): {'; '.join(verdicts)}.")
    if different:
        glance += f" Not the same file on every machine, left out where they differ: {', '.join(different)}."
    return AcrossPage("\n".join(lines + problems) + "\n", glance)


def _machine_verdict(grid: dict) -> str:
    """Which rungs the two machines alone grade differently beyond noise, from the pair's grid.json."""
    rows = grid["rungs"]
    moved = [f"{row['name']} (p = {format_p(row['machine']['p_value'])})" for row in rows
             if row["machine"]["p_value"] < SIGNIFICANT_P]
    if moved:
        return f"graded differently beyond noise at {', '.join(moved)}"
    if not rows:
        return "no rung in common"
    smallest = min(rows, key=lambda row: row["machine"]["p_value"])
    return (f"no rung graded differently beyond noise (smallest p = {format_p(smallest['machine']['p_value'])}, "
            f"at {smallest['name']})")


def _grid_rows(grid: dict) -> list[dict[str, object]]:
    """The pair's counts per rung, from the grid.json just written; "first lost on both here": the questions both
    machines first lose at that rung."""
    first = {name: 0 for name in [row["name"] for row in grid["rungs"]]}
    for where in grid["first_lost"].values():
        if where["a"] is not None and where["a"] == where["b"]:
            first[where["a"]] = first.get(where["a"], 0) + 1
    return [{"rung": row["name"], "graded differently (lower: alike)": row["graded_differently"],
             "machine moves: A only / B only": f"{row['machine']['lost']} / {row['machine']['gained']}",
             "p (machine)": format_p(row["machine"]["p_value"]), "lost on both": row["lost_both"],
             "first lost on both here": first[row["name"]]} for row in grid["rungs"]] + [
        {"rung": f"left out: {name}", "graded differently (lower: alike)": "different files"}
        for name in grid.get("left_out", {})]


def evals_across(machines: list[Machine]) -> AcrossPage:
    """The served model's eval on each machine, and each pair question by question."""
    results = {}
    lines = ["## The served model's answers on each machine", ""]
    for machine in machines:
        try:
            results[machine.label] = load_eval(machine.folder)
        except AnalysisError as error:
            lines.append(f"- {machine.label}: no eval ({error})")
    rows = [{"machine": label, "right (higher is better)": f"{sum(a.right for a in r.answers.values())}/"
             f"{len(r.answers)}", "decode tok/s (median)": r.median_decode_tok_s()} for label, r in results.items()]
    if rows:
        lines += [tabulate(rows, headers="keys", tablefmt="github"), ""]
    verdicts = []
    for (label_a, a), (label_b, b) in combinations(results.items(), 2):
        pair = paired(a, b)
        lines.append(f"- {label_a} vs {label_b}: right on {label_a} only {pair.lost}, on {label_b} only "
                     f"{pair.gained} of {pair.questions} (p = {format_p(pair.p_value)})")
        verdict = "differ beyond noise" if pair.p_value < SIGNIFICANT_P else "no difference beyond noise"
        verdicts.append(f"{label_a} vs {label_b} {verdict} (p = {format_p(pair.p_value)})")
    right = "; ".join(f"{row['machine']} {row['right (higher is better)']} right" for row in rows)
    glance = f"The served model: {right or 'no eval to read'}" + (f"; {'; '.join(verdicts)}." if verdicts else ".")
    return AcrossPage("\n".join(lines) + "\n", glance)
