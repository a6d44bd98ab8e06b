"""Graded answers compared question by question: right, lost, gained, and whether it is noise.

Two arms asked the same questions are compared paired: only questions where they disagree
say anything about which is better. The exact McNemar test asks how likely that many losses
against that many gains would be if neither arm were better (a two-sided binomial test on
the disagreements); the 95 % interval of the paired difference says how many points of
accuracy the arm may really have lost. A rung or arm "loses significantly" when p < 0.05
and it lost more than it gained.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from scipy.stats import binomtest

from core.errors import AnalysisError
from core.rundir.quality import FAILURE_KINDS, AnswerRecord, EvalManifest, EvalSettings
from core.rundir.quality_files import EvalDir

SIGNIFICANT_P = 0.05
Z95 = 1.959964


@dataclass(frozen=True)
class EvalResult:
    """One eval run read back: first repeat's answer per question, plus the manifest."""

    folder: Path
    manifest: EvalManifest
    answers: dict[str, AnswerRecord]
    all_answers: list[AnswerRecord]

    @property
    def right(self) -> int:
        return sum(record.right for record in self.answers.values())

    def failures(self) -> dict[str, int]:
        return {kind: sum(kind in record.failures for record in self.answers.values()) for kind in FAILURE_KINDS}

    def median_decode_tok_s(self) -> float | None:
        speeds = [r.decode_tokens_per_second for r in self.answers.values() if r.decode_tokens_per_second]
        return round(statistics.median(speeds), 2) if speeds else None


def load_eval(folder: Path) -> EvalResult:
    directory = EvalDir(folder)
    manifest = directory.read_manifest()
    records = directory.answers()
    first = {record.question_id: record for record in records if record.repeat == 0}
    if not first:
        raise AnalysisError(f"{folder}: no graded answers yet (answers.jsonl is empty or missing)")
    return EvalResult(folder, manifest, first, records)


@dataclass(frozen=True)
class Paired:
    """``other`` against ``reference`` on the questions both answered."""

    questions: int
    right_reference: int
    right_other: int
    lost: int  # right in the reference, wrong in the other
    gained: int  # wrong in the reference, right in the other
    p_value: float
    difference: float  # accuracy of other minus reference, in points of 1
    low: float
    high: float

    @property
    def significant_loss(self) -> bool:
        return self.lost > self.gained and self.p_value < SIGNIFICANT_P


def paired(reference: EvalResult, other: EvalResult, questions: list[str] | None = None) -> Paired:
    """``questions`` narrows the pairing to a set both answered (a grid pairs on the questions every rung of
    both machines answered)."""
    common = sorted(set(reference.answers) & set(other.answers) & set(questions if questions is not None
                                                                        else reference.answers))
    if not common:
        raise AnalysisError(f"{reference.folder} and {other.folder} share no question ids; they cannot be paired")
    lost = sum(reference.answers[q].right and not other.answers[q].right for q in common)
    gained = sum(other.answers[q].right and not reference.answers[q].right for q in common)
    n = len(common)
    disagreements = lost + gained
    p_value = binomtest(lost, disagreements, 0.5).pvalue if disagreements else 1.0
    difference = (gained - lost) / n
    spread = math.sqrt(max(disagreements - (gained - lost) ** 2 / n, 0.0)) / n
    return Paired(
        questions=n,
        right_reference=sum(reference.answers[q].right for q in common),
        right_other=sum(other.answers[q].right for q in common),
        lost=lost,
        gained=gained,
        p_value=float(p_value),
        difference=difference,
        low=difference - Z95 * spread,
        high=difference + Z95 * spread,
    )


def check_same_questions(results: list[EvalResult]) -> None:
    """Refuse arms that asked different question sets: a paired comparison needs one set."""
    digests = {result.manifest.questions.sha256 for result in results}
    if len(digests) > 1:
        names = ", ".join(f"{r.folder.name} ({r.manifest.questions.sha256[:12]})" for r in results)
        raise AnalysisError(f"the runs asked different question files: {names}; compare runs of one question set")


def describe_prompt(settings: EvalSettings) -> str:
    """The sentence a report gives the prompt mode: a score means little without how it was asked."""
    if settings.prompt is None:
        return "Prompt mode: chat (each question a user message through the server's chat template)."
    prompt = settings.prompt
    exemplars = (
        f" exemplars {', '.join(prompt.exemplar_ids)} drawn with seed {settings.shot_seed} from {prompt.pool};"
        if prompt.exemplars
        else ""
    )
    stops = ", ".join(repr(stop) for stop in settings.stop) or "none"
    return (
        f"Prompt mode: {settings.mode_label()} (a few-shot prompt sent to /v1/completions;{exemplars} "
        f"format {prompt.question_template!r}, stop {stops})."
    )


def _asked_as(result: EvalResult, with_exemplars: bool) -> str:
    settings = result.manifest.settings
    exemplars = f": exemplars {', '.join(settings.prompt.exemplar_ids)}" if with_exemplars and settings.prompt else ""
    return f"{result.folder.name} ({settings.mode_label()}{exemplars})"


def mode_warning(results: list[EvalResult]) -> str | None:
    """One line when the runs were not asked the same way (chat against completion, other shots or
    other exemplars): a score that moved may be the prompt's doing, not the server's, so a
    comparison says so instead of mixing them silently."""
    prompts = {(r.manifest.settings.mode, r.manifest.settings.shots) for r in results}
    exemplars = {r.manifest.settings.prompt.model_dump_json() if r.manifest.settings.prompt else "" for r in results}
    if len(prompts) > 1:
        runs = ", ".join(_asked_as(r, with_exemplars=False) for r in results)
        return f"warning: these runs were graded in different prompt modes ({runs}); a difference may be the prompt's"
    if len(exemplars) > 1:
        runs = "; ".join(_asked_as(r, with_exemplars=True) for r in results)
        return f"warning: these runs were graded with different exemplars ({runs}); a difference may be the prompt's"
    return None


def format_p(p_value: float) -> str:
    return "1" if p_value >= 0.9995 else (f"{p_value:.3f}" if p_value >= 0.001 else f"{p_value:.1e}")


def paired_row(name: str, result: EvalResult, pair: Paired | None) -> dict[str, object]:
    """One table row of an arm or rung: its score, and against the reference when it is not it."""
    row: dict[str, object] = {"arm": name, "right": f"{result.right}/{len(result.answers)}"}
    if pair is None:
        row.update({"lost": "—", "gained": "—", "p (McNemar)": "—", "Δ accuracy [95% CI]": "reference"})
    else:
        row.update(
            {
                "lost": pair.lost,
                "gained": pair.gained,
                "p (McNemar)": format_p(pair.p_value),
                "Δ accuracy [95% CI]": (
                    f"{pair.difference * 100:+.1f} [{pair.low * 100:+.1f}, {pair.high * 100:+.1f}] pts"
                ),
            }
        )
    failures = result.failures()
    row.update({kind: failures[kind] for kind in FAILURE_KINDS})
    row["median decode tok/s"] = result.median_decode_tok_s()
    return row
