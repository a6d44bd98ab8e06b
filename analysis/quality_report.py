"""The ladder report: per rung its bytes, speed and graded answers against the reference rung.

It answers the article's question in one table — which quantization still gives the right
answers, and what it buys in speed and bytes — and then says which rung is the best trade:
the fastest whose loss against the reference is not significant (McNemar, p < 0.05), and the
fastest within N answers of the reference. Determinism (repeats that gave another text) and
the run's price (hours × the rig's price per hour) follow.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tabulate import tabulate  # noqa: E402

from analysis.quality_compare import (  # noqa: E402
    EvalResult,
    Paired,
    check_same_questions,
    describe_prompt,
    format_p,
    load_eval,
    mode_warning,
    paired,
    paired_row,
)
from core.errors import AnalysisError  # noqa: E402
from core.rundir.quality import LadderManifest, RepeatMismatch  # noqa: E402
from core.rundir.quality_files import EvalDir, LadderDir  # noqa: E402
from core.whole_files import unwritten_said_as, whole_file, write_whole  # noqa: E402
from core.wording import counted

REPORT = "report.md"
SUMMARY = "quality.json"
PLOT = "plots/speed_vs_right.png"


@dataclass(frozen=True)
class RungResult:
    name: str
    size_bytes: int
    sha256: str
    result: EvalResult
    pair: Paired | None
    tg128: float | None
    pp512: float | None
    memory_mib: float | None

    @property
    def speed(self) -> float | None:
        """Median decode tok/s over the rung's answers (what a user of this server sees)."""
        return self.result.median_decode_tok_s()


def load_ladder(folder: Path) -> tuple[LadderManifest, list[RungResult]]:
    ladder = LadderDir(folder)
    manifest = ladder.read_manifest()
    evaluated = [rung for rung in manifest.rungs if rung.eval_run]
    if not evaluated:
        raise AnalysisError(f"{folder}: no rung has been evaluated yet")
    results = {rung.name: load_eval(folder / rung.eval_run) for rung in evaluated}
    check_same_questions(list(results.values()))
    if manifest.reference not in results:
        raise AnalysisError(f"{folder}: the reference rung {manifest.reference} has no eval run")
    reference = results[manifest.reference]
    rungs = []
    for rung in evaluated:
        bench = rung.bench
        rungs.append(
            RungResult(
                name=rung.name,
                size_bytes=rung.size_bytes,
                sha256=rung.sha256,
                result=results[rung.name],
                pair=None if rung.name == manifest.reference else paired(reference, results[rung.name]),
                tg128=bench.generation_tokens_per_second if bench else None,
                pp512=bench.prompt_tokens_per_second if bench else None,
                memory_mib=rung.memory_after_load_mib,
            )
        )
    return manifest, rungs


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}×" if value and base else "—"


def ladder_rows(rungs: list[RungResult], reference: str) -> list[dict[str, object]]:
    base = next(r for r in rungs if r.name == reference)
    rows = []
    for rung in rungs:
        row = paired_row(rung.name, rung.result, rung.pair)
        row.pop("arm")
        speed = row.pop("median decode tok/s")
        rows.append(
            {
                "rung": rung.name,
                "MB": round(rung.size_bytes / 1e6, 1),
                "× bytes": _ratio(rung.size_bytes, base.size_bytes),
                **row,
                "decode tok/s (median)": speed,
                "× speed": _ratio(rung.speed, base.speed),
                "tg128": rung.tg128,
                "pp512": rung.pp512,
                "memory MiB": rung.memory_mib,
            }
        )
    return rows


def best_trade(rungs: list[RungResult]) -> RungResult | None:
    """The fastest rung whose loss against the reference is not significant."""
    fair = [rung for rung in rungs if rung.speed and not (rung.pair and rung.pair.significant_loss)]
    return max(fair, key=lambda rung: rung.speed or 0.0, default=None)


def fastest_within(rungs: list[RungResult], answers: int) -> RungResult | None:
    """The fastest rung that lost at most ``answers`` more than it gained."""
    close = [
        rung for rung in rungs if rung.speed and (rung.pair is None or rung.pair.lost - rung.pair.gained <= answers)
    ]
    return max(close, key=lambda rung: rung.speed or 0.0, default=None)


def determinism_lines(folder: Path, rungs: list[RungResult]) -> list[str]:
    lines = []
    for rung in rungs:
        repeats = rung.result.manifest.settings.repeat
        if repeats < 2:
            continue
        mismatches: list[RepeatMismatch] = EvalDir(rung.result.folder).mismatches()
        asked = len(rung.result.answers)
        texts = len({m.question_id for m in mismatches})
        extracted = len({m.question_id for m in mismatches if not m.same_extracted})
        grades = len({m.question_id for m in mismatches if not m.same_grade})
        lines.append(
            f"- **{rung.name}**, each question asked {repeats} times: texts differ on {texts} of {asked}, "
            f"extracted answers on {extracted}, grades on {grades}."
        )
        for mismatch in mismatches[:10]:
            where = (
                f"token {mismatch.first_token_index} ({mismatch.first_tokens[0]!r} vs {mismatch.first_tokens[1]!r})"
                if mismatch.first_token_index is not None and mismatch.first_tokens
                else f"character {mismatch.first_char_index}"
            )
            lines.append(f"  - {mismatch.question_id}: first differs at {where}")
    return lines


def price_line(manifest: LadderManifest, price_per_hour: float | None, price_source: str | None) -> str:
    hours = (manifest.wall_seconds or 0.0) / 3600
    price = price_per_hour if price_per_hour is not None else manifest.rig.price_per_hour
    source = price_source or manifest.rig.price_source
    if price is None:
        return (
            f"Wall time {manifest.wall_seconds or 0:.0f} s ({hours:.2f} h). No price was given: "
            "`rigbench quality report DIR --price-per-hour P --price-source S` prices it."
        )
    return (
        f"Wall time {manifest.wall_seconds or 0:.0f} s ({hours:.2f} h) × ${price:.4f}/h"
        f"{f' ({source})' if source else ''} = **${hours * price:.4f}** for the whole ladder."
    )


def plot_speed_vs_right(rungs: list[RungResult], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(6.0, 4.0), dpi=100)
    for rung in rungs:
        if rung.speed is None:
            continue
        axes.scatter(
            rung.speed, rung.result.right, color="tab:red" if rung.pair and rung.pair.significant_loss else "tab:blue"
        )
        axes.annotate(rung.name, (rung.speed, rung.result.right), textcoords="offset points", xytext=(4, 4), fontsize=8)
    axes.set_xlabel("median decode tok/s (one request at a time)")
    axes.set_ylabel(f"right answers of {len(rungs[0].result.answers)}")
    axes.set_title("Speed against accuracy per rung (red: significant loss)")
    axes.grid(alpha=0.3)
    figure.tight_layout()
    with whole_file(path, "wb") as handle:
        figure.savefig(handle, format="png")
    plt.close(figure)
    return path


def render_ladder(
    folder: Path,
    manifest: LadderManifest,
    rungs: list[RungResult],
    *,
    within: int = 2,
    price_per_hour: float | None = None,
    price_source: str | None = None,
) -> str:
    settings = manifest.settings
    lines = [
        f"# Quantization ladder: {manifest.source.name}",
        "",
        f"Source {manifest.source.name} ({manifest.source.size_bytes:,} bytes, sha256 {manifest.source.sha256[:16]}…)."
        + (f" {manifest.source_note}" if manifest.source_note else ""),
        f"Questions: {manifest.questions.name}, {manifest.questions.count} (sha256 {manifest.questions.sha256[:12]}…"
        + (f", {manifest.questions.source}" if manifest.questions.source else "")
        + ").",
        f"Asked at temperature {settings.temperature}, seed {settings.seed}, "
        f"max {counted(settings.max_tokens, 'token')}, "
        f"cache_prompt {str(settings.cache_prompt).lower()}, thinking {'on' if settings.thinking else 'off'}, "
        f"{counted(settings.concurrency, 'request')} at a time"
        + (
            " (batched decoding can change the arithmetic, so answers can differ from one at a time)"
            if settings.concurrency > 1
            else ""
        )
        + ".",
        describe_prompt(settings),
        *([warning] if (warning := mode_warning([rung.result for rung in rungs])) else []),
        f"Machine: {manifest.rig.machine.gpu_name or manifest.rig.machine.cpu_model} "
        f"({manifest.build.backend if manifest.build else 'unknown'} build"
        + (f" {manifest.build.source[:20]}" if manifest.build else "")
        + f"); server flags `{' '.join(manifest.server_args)}`.",
        f"Status: {manifest.status}" + (f" ({manifest.status_detail})" if manifest.status_detail else "") + ".",
        "",
        f"## Rungs against {manifest.reference}",
        "",
        "Lost: right at the reference, wrong here; gained: the other way; p: exact McNemar on those two.",
        "",
        tabulate(ladder_rows(rungs, manifest.reference), headers="keys", tablefmt="github"),
        "",
        "## Files",
        "",
        tabulate(
            [{"rung": r.name, "bytes": f"{r.size_bytes:,}", "sha256": r.sha256} for r in rungs],
            headers="keys",
            tablefmt="github",
        ),
        "",
        "## Best trade",
        "",
    ]
    best = best_trade(rungs)
    if best is None:
        lines.append("No rung has a measured speed.")
    else:
        detail = (
            f"lost {best.pair.lost}, gained {best.pair.gained}, p = {format_p(best.pair.p_value)}"
            if best.pair
            else "the reference"
        )
        lines.append(f"- Fastest rung whose loss is not significant: **{best.name}** ({best.speed} tok/s; {detail}).")
    close = fastest_within(rungs, within)
    if close is not None:
        lines.append(
            f"- Fastest rung within {counted(within, 'answer')} of the reference (lost − gained ≤ {within}): "
            f"**{close.name}** ({close.speed} tok/s)."
        )
    lines += ["", "![speed against accuracy](plots/speed_vs_right.png)", "", "## Determinism", ""]
    lines += determinism_lines(folder, rungs) or [
        "No rung was asked more than once (`--repeat 2` asks each question twice)."
    ]
    lines += ["", "## Cost", "", price_line(manifest, price_per_hour, price_source), ""]
    return "\n".join(lines)


@unwritten_said_as(AnalysisError, "every file is written whole or not at all, so none is cut; free space "
                   "there, then write it again")
def write_ladder_report(
    folder: Path, *, within: int = 2, price_per_hour: float | None = None, price_source: str | None = None
) -> Path:
    """``report.md``, ``quality.json`` and the plot, in the ladder's folder."""
    manifest, rungs = load_ladder(folder)
    text = render_ladder(
        folder, manifest, rungs, within=within, price_per_hour=price_per_hour, price_source=price_source
    )
    plot_speed_vs_right(rungs, folder / PLOT)
    write_whole(folder / REPORT, text)
    summary = {
        "ladder_id": manifest.ladder_id,
        "reference": manifest.reference,
        "prompt_mode": manifest.settings.mode_label(),
        "wall_seconds": manifest.wall_seconds,
        "rungs": [
            {
                "rung": r.name,
                "size_bytes": r.size_bytes,
                "sha256": r.sha256,
                "right": r.result.right,
                "questions": len(r.result.answers),
                "lost": r.pair.lost if r.pair else 0,
                "gained": r.pair.gained if r.pair else 0,
                "p_value": r.pair.p_value if r.pair else None,
                "failures": r.result.failures(),
                "median_decode_tok_s": r.speed,
                "tg128": r.tg128,
                "pp512": r.pp512,
                "memory_mib": r.memory_mib,
            }
            for r in rungs
        ],
        "best_trade": best.name if (best := best_trade(rungs)) else None,
    }
    write_whole(folder / SUMMARY, json.dumps(summary, indent=1) + "\n")
    return folder / REPORT
