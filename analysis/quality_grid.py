"""Two ladders of the same files on two machines, compared question by question.

Whether a card changes answers is only a fair question when both machines ran the same
bytes: rungs whose sha256 differ are refused (or, when asked, kept and marked). Per rung it
counts questions graded differently and where each machine lost an answer its reference rung
had right; per question it finds the first rung that lost it on each machine; the picture is
one row per rung and one cell per question (both right, both wrong, or graded differently).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from tabulate import tabulate  # noqa: E402

from analysis.quality_compare import Paired, check_same_questions, describe_prompt, format_p, paired  # noqa: E402
from analysis.quality_report import RungResult, load_ladder  # noqa: E402
from core.errors import AnalysisError  # noqa: E402
from core.whole_files import unwritten_said_as, whole_file, write_whole  # noqa: E402
from core.wording import counted

BOTH_RIGHT, BOTH_WRONG, DIFFERENT = 0, 1, 2
COLOURS = ListedColormap(["#4caf50", "#424242", "#ff9800"])


@dataclass(frozen=True)
class GridRung:
    name: str
    same_file: bool
    questions: int
    graded_differently: int
    identical_text: int
    right_a: int
    right_b: int
    lost_a: int
    lost_b: int
    lost_both: int
    # the machine alone: right on A and wrong on B (lost), the reverse (gained), exact McNemar p
    machine: Paired
    # the quantization alone, on each machine: this rung against the machine's own reference rung
    quantization_a: Paired
    quantization_b: Paired


def _label(folder: Path, rungs: list[RungResult]) -> str:
    machine = rungs[0].result.manifest.rig.machine
    return machine.gpu_name or machine.cpu_model or folder.name


def compare_ladders(a: Path, b: Path, *, allow_different_files: bool = False,
                    leave_out_different_files: bool = False, labels: tuple[str, str] | None = None) -> dict:
    """``allow_different_files`` keeps rungs whose files differ, marked; ``leave_out_different_files`` draws the
    grid without them and names them (a loop over several rigs draws what it can and says what it could not)."""
    manifest_a, rungs_a = load_ladder(a)
    manifest_b, rungs_b = load_ladder(b)
    by_name_b = {rung.name: rung for rung in rungs_b}
    common = [rung for rung in rungs_a if rung.name in by_name_b]
    if not common:
        raise AnalysisError(f"{a} and {b} share no rung names; a grid needs the same rungs on both machines")
    check_same_questions([rung.result for rung in common] + [by_name_b[r.name].result for r in common])
    different = [r.name for r in common if r.sha256 != by_name_b[r.name].sha256]
    pairs = "; ".join(
        f"{n}: {next(r for r in common if r.name == n).sha256[:12]} vs {by_name_b[n].sha256[:12]}" for n in different
    )
    left_out = {}
    if different and leave_out_different_files:
        left_out = {r.name: (r.sha256, by_name_b[r.name].sha256) for r in common if r.name in different}
        common = [r for r in common if r.name not in different]
        if not common:
            raise AnalysisError(f"{a} and {b} ran different files for every rung they share ({pairs}): no grid")
    elif different and not allow_different_files:
        raise AnalysisError(
            f"the ladders ran different files for {', '.join(different)} ({pairs}); a grid compares the same bytes on "
            "two machines — quantize once and copy the files, or pass --allow-different-files to mark those rungs"
        )
    differ = manifest_a.settings.differences(manifest_b.settings, ignore={"repeat"})
    if differ:
        raise AnalysisError(
            f"the ladders asked their questions differently ({'; '.join(differ)}); a grid compares machines: ask "
            "both the same way"
        )
    reference_a = next(r for r in rungs_a if r.name == manifest_a.reference)
    reference_b = next(r for r in rungs_b if r.name == manifest_b.reference)
    answered = [set(r.result.answers) for r in common] + [set(by_name_b[r.name].result.answers) for r in common]
    answered += [set(reference_a.result.answers), set(reference_b.result.answers)]
    questions = sorted(set.intersection(*answered))
    rows: list[GridRung] = []
    cells = np.zeros((len(common), len(questions)), dtype=int)
    first_lost: dict[str, dict[str, str | None]] = {q: {"a": None, "b": None} for q in questions}
    for row, rung in enumerate(common):
        other = by_name_b[rung.name]
        graded = identical = lost_a = lost_b = lost_both = 0
        for column, question in enumerate(questions):
            answer_a, answer_b = rung.result.answers[question], other.result.answers[question]
            if answer_a.right == answer_b.right:
                cells[row, column] = BOTH_RIGHT if answer_a.right else BOTH_WRONG
            else:
                cells[row, column] = DIFFERENT
                graded += 1
            identical += answer_a.text == answer_b.text
            was_a = reference_a.result.answers[question].right and not answer_a.right
            was_b = reference_b.result.answers[question].right and not answer_b.right
            lost_a += was_a
            lost_b += was_b
            lost_both += was_a and was_b
            if was_a and first_lost[question]["a"] is None:
                first_lost[question]["a"] = rung.name
            if was_b and first_lost[question]["b"] is None:
                first_lost[question]["b"] = rung.name
        rows.append(
            GridRung(
                name=rung.name,
                same_file=rung.sha256 == other.sha256,
                questions=len(questions),
                graded_differently=graded,
                identical_text=identical,
                right_a=sum(rung.result.answers[q].right for q in questions),
                right_b=sum(other.result.answers[q].right for q in questions),
                lost_a=lost_a,
                lost_b=lost_b,
                lost_both=lost_both,
                machine=paired(rung.result, other.result, questions),
                quantization_a=paired(reference_a.result, rung.result, questions),
                quantization_b=paired(reference_b.result, other.result, questions),
            )
        )
    return {
        "a": {"folder": str(a), "label": labels[0] if labels else _label(a, rungs_a), "reference": reference_a.name},
        "b": {"folder": str(b), "label": labels[1] if labels else _label(b, rungs_b), "reference": reference_b.name},
        "prompt_mode": manifest_a.settings.mode_label(),
        "prompt": describe_prompt(manifest_a.settings),
        "rungs": rows,
        "questions": questions,
        "cells": cells,
        "first_lost": first_lost,
        "left_out": left_out,
    }


def draw_grid(grid: dict, path: Path) -> Path:
    cells = grid["cells"]
    rungs = [row.name + ("" if row.same_file else " (other file)") for row in grid["rungs"]]
    width = min(max(6.0, cells.shape[1] * 0.06 + 2.0), 24.0)
    figure, axes = plt.subplots(figsize=(width, 0.45 * len(rungs) + 1.6), dpi=100)
    axes.imshow(cells, cmap=COLOURS, vmin=0, vmax=2, aspect="auto", interpolation="nearest")
    axes.set_yticks(range(len(rungs)), rungs, fontsize=8)
    axes.set_xlabel(f"question (1 … {cells.shape[1]})")
    axes.set_xticks([])
    axes.set_title(f"{grid['a']['label']} vs {grid['b']['label']}: graded per question and rung", fontsize=9)
    axes.legend(
        handles=[
            Patch(color=COLOURS(i), label=text)
            for i, text in enumerate(("both right", "both wrong", "graded differently"))
        ],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.08),
        ncol=3,
        fontsize=8,
        frameon=False,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with whole_file(path, "wb") as handle:
        figure.savefig(handle, format="png")
    plt.close(figure)
    return path


def render_grid(grid: dict) -> str:
    a, b = grid["a"], grid["b"]
    table = [
        {
            "rung": row.name + ("" if row.same_file else " ⚠ other file"),
            f"right A ({a['label'][:24]})": row.right_a,
            f"right B ({b['label'][:24]})": row.right_b,
            "graded differently": row.graded_differently,
            "identical text": f"{row.identical_text}/{row.questions}",
            "lost on A": row.lost_a,
            "lost on B": row.lost_b,
            "lost on both": row.lost_both,
        }
        for row in grid["rungs"]
    ]
    first = grid["first_lost"]
    lost_anywhere = [(q, where["a"], where["b"]) for q, where in first.items() if where["a"] or where["b"]]
    same_first = sum(1 for _, on_a, on_b in lost_anywhere if on_a == on_b)
    lines = [
        f"# Grade grid: A = {a['label']} vs B = {b['label']}",
        "",
        f"A: `{a['folder']}` (reference rung {a['reference']}); B: `{b['folder']}` (reference rung {b['reference']}). "
        f"{counted(len(grid['questions']), 'question')}; "
        "lost = right at the machine's reference rung, wrong at this rung.",
        grid["prompt"],
        "",
        *[f"**{name} left out**: the two machines ran different files (sha256 {sha_a[:12]} on A, {sha_b[:12]} on B)."
          " A grid compares the same bytes; quantize again or copy the file.\n" for name, (sha_a, sha_b) in
          grid.get("left_out", {}).items()],
        tabulate(table, headers="keys", tablefmt="github"),
        "",
        "![grade grid](grid.png)",
        "",
        *machine_against_quantization(grid),
        "## First rung that loses each question",
        "",
        f"{counted(len(lost_anywhere), 'question')} {'is' if len(lost_anywhere) == 1 else 'are'} lost at some rung "
        f"on either machine; on {same_first} of them "
        "both machines lose it first at the same rung.",
        "",
    ]
    if lost_anywhere:
        lines.append(
            tabulate(
                [
                    {"question": q, "first lost on A": on_a or "—", "first lost on B": on_b or "—"}
                    for q, on_a, on_b in lost_anywhere
                ],
                headers="keys",
                tablefmt="github",
            )
        )
    return "\n".join(lines) + "\n"


def count(pair: Paired) -> int:
    return pair.lost + pair.gained


def moved(pair: Paired) -> str:
    return f"{pair.lost} / {pair.gained}"


def machine_against_quantization(grid: dict) -> list[str]:
    """The article's headline comparison: at each rung, how many answers the machine alone moves (the same file
    on both) beside how many the quantization moves on each machine (this rung against its own reference), each
    with its exact McNemar p."""
    a, b = grid["a"], grid["b"]
    rows = grid["rungs"]
    table = [
        {
            "rung": row.name + ("" if row.same_file else " ⚠ other file"),
            "machine: right only on A / only on B": moved(row.machine),
            "p (machine)": format_p(row.machine.p_value),
            f"quantization on A: lost / gained vs {a['reference']}": "—" if row.name == a["reference"]
            else moved(row.quantization_a),
            "p (A)": "—" if row.name == a["reference"] else format_p(row.quantization_a.p_value),
            f"quantization on B: lost / gained vs {b['reference']}": "—" if row.name == b["reference"]
            else moved(row.quantization_b),
            "p (B)": "—" if row.name == b["reference"] else format_p(row.quantization_b.p_value),
        }
        for row in rows
    ]
    lines = ["## The machine against the quantization", "",
             "Each count is questions whose grade moved; p is McNemar's exact test on those moves (a moved "
             "question either way is a coin toss under no effect).", ""]
    top = next((row for row in rows if row.name == a["reference"] and row.same_file), None)
    if top is not None:
        sentence = (f"At the top rung, {top.name}, the machine alone moves {count(top.machine)} of "
                    f"{counted(top.questions, 'grade')} ({moved(top.machine)}, p = {format_p(top.machine.p_value)})")
        quantized = [row for row in rows if row.name != a["reference"]]
        for side, label in (("quantization_a", "A"), ("quantization_b", "B")):
            if quantized:
                least = min(quantized, key=lambda row: count(getattr(row, side)))
                most = max(quantized, key=lambda row: count(getattr(row, side)))
                sentence += (f"; on {label} the quantization moves {count(getattr(least, side))} ({least.name}, p = "
                             f"{format_p(getattr(least, side).p_value)}) to {count(getattr(most, side))} ({most.name},"
                             f" p = {format_p(getattr(most, side).p_value)})")
        lines += [sentence + ".", ""]
    lines += [tabulate(table, headers="keys", tablefmt="github"), ""]
    return lines


@unwritten_said_as(AnalysisError, "every file is written whole or not at all, so none is cut; free space "
                   "there, then write it again")
def write_grid(a: Path, b: Path, out: Path, *, allow_different_files: bool = False,
               leave_out_different_files: bool = False, labels: tuple[str, str] | None = None) -> Path:
    """``labels``: the names the page gives the two machines (default: each ladder's GPU or CPU)."""
    grid = compare_ladders(a, b, allow_different_files=allow_different_files,
                           leave_out_different_files=leave_out_different_files, labels=labels)
    out.mkdir(parents=True, exist_ok=True)
    draw_grid(grid, out / "grid.png")
    write_whole(out / "grid.md", render_grid(grid))
    summary = {
        "a": grid["a"],
        "b": grid["b"],
        "prompt_mode": grid["prompt_mode"],
        "rungs": [asdict(row) for row in grid["rungs"]],
        "first_lost": grid["first_lost"],
        "left_out": grid["left_out"],
    }
    write_whole(out / "grid.json", json.dumps(summary, indent=1) + "\n")
    return out / "grid.md"
