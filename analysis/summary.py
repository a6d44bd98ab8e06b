"""``summary.json``: a report's figures for programs, one versioned definition, validated both ways.

``rigbench report`` writes it beside report.md for programs that want the figures without the
records (a study's report, a dashboard, CI); ``rigbench gate`` judges runs on the same models
built in memory. The models here are the file's only definition: :func:`build_summary`
validates what it writes, :func:`read_summary` what it reads (a damaged or foreign file is a
one-line error naming the file and the key), and the JSON Schema other tools validate against
is generated from them (``rigbench schema
summary``; the committed copy is ``data/summary-v1.schema.json``, kept equal to them by a
test).

A step is :class:`analysis.step.StepFigures` itself (each figure an
:class:`analysis.intervals.Estimate`: value, 95% interval, n, method), and a comparison step
:class:`analysis.compare.StepComparison`: the models the report is made from are the ones the
file holds.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, ValidationError

from analysis.card_limits import FindingKind, card_limits
from analysis.compare import StepComparison
from analysis.cost import PriceBasis, price_label
from analysis.intervals import Estimate
from analysis.prices import PriceQuote
from analysis.repeats import FIGURES, arms_of, between_runs, compare_arms, repeated, spread
from analysis.report_model import Report, RunSection
from analysis.search_section import searches_of
from analysis.step import StepFigures
from core.errors import AnalysisError
from core.rundir import RunStatus
from core.rundir.capacity_search import CapacitySearch
from core.strict import Strict
from core.validation import describe_validation_error

SUMMARY_VERSION = 1
SUMMARY_FILE = "summary.json"
SCHEMA_FILE = Path(__file__).resolve().parent / "data" / f"summary-v{SUMMARY_VERSION}.schema.json"


class AppliedPrice(PriceQuote):
    """A price a run was costed at, and on what grounds (``analysis.cost``): ``basis`` says whether the
    run ran on that type, was priced as it by ``--price-as``, is extrapolated to it (``hypothetical``,
    kept for older readers), or is the hourly price given with ``--usd-per-hour`` (``given``: no instance
    type, region or market); ``gpu_share`` N > 1 means usd_per_hour is 1/N of the instance's price;
    ``measured_on`` names the machine that measured the figures, where that is not ``instance_type``."""

    model_config = ConfigDict(extra="forbid")

    hypothetical: bool
    basis: PriceBasis | None = Field(None, description="recorded, price-as, hypothetical or given "
                                     "(--usd-per-hour); older files lack it")
    gpu_share: int = Field(1, ge=1, description="usd_per_hour is 1/gpu_share of the instance's price")
    measured_on: str | None = Field(None, description="the machine whose run measured the figures priced here "
                                    "(its instance type, else its GPU, else its CPU), where it is not the priced "
                                    "instance_type: price-as, hypothetical, given; None: the run ran on the type "
                                    "(recorded), or an older file")

    @property
    def label(self) -> str:
        basis = self.basis or ("hypothetical" if self.hypothetical else "recorded")
        return price_label(self.instance_type, self.market, basis, self.gpu_share, self.measured_on,
                           self.usd_per_hour)


class RunCostSummary(Strict):
    price: str
    seconds: float
    usd: float
    basis: str


class CardLimit(Strict):
    """A finding of what limits the card (``analysis.card_limits``): its kind, and the line the report gives."""

    kind: FindingKind
    line: str


class RunSummary(Strict):
    run_id: str
    path: str
    label: str
    status: RunStatus
    steps: list[StepFigures]
    prices: list[AppliedPrice]
    usd_per_mtok: list[dict[str, Estimate]] = Field(description="per step, $/Mtok by price label")
    run_cost: list[RunCostSummary]
    warnings: list[str]
    not_priced: str | None = Field(None, description="why the run has no price: it ran on no known instance type")
    card_limits: list[CardLimit] | None = Field(None, description="what limits the card, where the run's telemetry "
                                                "shows it (analysis.card_limits); None: no finding, or an older file")

    def cost(self, step: int, label: str) -> Estimate | None:
        """$/Mtok of the ``step``-th step at the price labelled ``label``, if the run was priced at it."""
        return self.usd_per_mtok[step].get(label) if step < len(self.usd_per_mtok) else None


class ComparisonSummary(Strict):
    a: str
    b: str
    steps: list[StepComparison]


class ArmStepSummary(Strict):
    """One step of an arm over its runs: each figure's mean with its interval between runs (n = runs), and the
    spread between them (coefficient of variation; None below two runs)."""

    step: str
    load: float
    context_tokens: int
    figures: dict[str, Estimate]
    spread: dict[str, float | None]


class ArmRatioSummary(Strict):
    """B against A at one step for one figure, judged by the spread between runs (``analysis.repeats``)."""

    a: str
    b: str
    step: str
    figure: str
    ratio: Estimate
    verdict: Literal["beyond noise", "within noise", "unknown"]
    paired: bool


class ArmSummary(Strict):
    """An arm's runs (its repeats) and its figures between them."""

    label: str
    series: str | None
    runs: list[str] = Field(description="run ids, by repeat")
    steps: list[ArmStepSummary]


class BetweenRunsSummary(Strict):
    """The report's Between runs section: each arm over its runs, and every other arm against the first."""

    arms: list[ArmSummary]
    comparisons: list[ArmRatioSummary]


class Summary(Strict):
    schema_version: Literal[1] = SUMMARY_VERSION
    generated_at: str
    runs: list[RunSummary]
    comparisons: list[ComparisonSummary] = Field(default_factory=list)
    plots: list[str] = Field(default_factory=list)
    capacity_searches: list[CapacitySearch] | None = Field(
        None, description="the capacity searches the runs are probes of (their capacity_search.json); None: none")
    between_runs: BetweenRunsSummary | None = Field(
        None, exclude_if=lambda value: value is None,
        description="figures between runs where an arm ran more than once (--repeats); absent otherwise")


def run_summary(section: RunSection, sections: list[RunSection] | None = None) -> RunSummary:
    """One run's figures, prices and costs, validated; ``sections``: the report's runs, which what limits the
    card reads across."""
    run = section.figures.run
    limits = [{"kind": finding.kind, "line": finding.line} for finding in card_limits(section, sections or [])]
    return RunSummary.model_validate(
        {
            "run_id": run.manifest.run_id,
            "path": str(run.path),
            "label": section.label,
            "status": run.manifest.status,
            "steps": section.figures.steps,
            "prices": [
                {**choice.quote.model_dump(), "hypothetical": choice.hypothetical, "basis": choice.basis,
                 "gpu_share": choice.gpu_share, "measured_on": choice.measured_on}
                for choice in section.prices
            ],
            "usd_per_mtok": [dict(zip(section.cost_labels, row, strict=True)) for row in section.cost_rows],
            "run_cost": [
                {"price": cost.price.label, "seconds": cost.seconds, "usd": cost.usd, "basis": cost.basis}
                for cost in section.run_costs
            ],
            "warnings": section.warnings,
            "not_priced": section.not_priced,
            "card_limits": limits or None,
        }
    )


def build_summary(report: Report) -> Summary:
    """summary.json's content, validated against its models before it is written."""
    return Summary(
        generated_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        runs=[run_summary(section, report.sections) for section in report.sections],
        comparisons=[ComparisonSummary(a=c.a, b=c.b, steps=c.steps) for c in report.comparisons],
        plots=[str(plot) for plot in report.plots],
        capacity_searches=[search for _, search in searches_of(report.sections)] or None,
        between_runs=between_runs_summary(report.sections),
    )


def between_runs_summary(sections: list[RunSection]) -> BetweenRunsSummary | None:
    """The Between runs figures, where an arm ran more than once (None otherwise, or for mixed load kinds)."""
    if len({section.figures.open_loop for section in sections}) > 1:
        return None
    arms = arms_of(sections)
    if not repeated(arms):
        return None
    summaries = []
    for arm in arms:
        steps = []
        for key in arm.step_keys():
            values = {figure.name: list(arm.values(figure, key).values()) for figure in FIGURES}
            steps.append(ArmStepSummary(step=arm.step_label(key), load=key[0], context_tokens=key[1],
                                        figures={name: between_runs(found) for name, found in values.items()},
                                        spread={name: spread(found) for name, found in values.items()}))
        summaries.append(ArmSummary(label=arm.label, series=arm.series,
                                    runs=[section.figures.run.manifest.run_id for section in arm.sections],
                                    steps=steps))
    ratios = [ArmRatioSummary(a=arms[0].label, b=other.label, step=row.step, figure=row.figure.name, ratio=row.ratio,
                              verdict=row.verdict, paired=row.paired)
              for other in arms[1:] for row in compare_arms(arms[0], other)]
    return BetweenRunsSummary(arms=summaries, comparisons=ratios)


def summary_text(summary: Summary) -> str:
    """The file's text: plain JSON, two-space indented (floats as Python writes them, NaN kept)."""
    return json.dumps(summary.model_dump(mode="python"), indent=2) + "\n"


def read_summary(path: Path | str) -> Summary:
    """A summary.json, validated; refused with the file and the key when it is not one this code reads."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise AnalysisError(f"{path}: no such file; `rigbench report RUN` writes {SUMMARY_FILE}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AnalysisError(f"{path}: not valid JSON ({error})") from None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SUMMARY_VERSION:
        raise AnalysisError(
            f"{path}: schema_version {version!r} is not supported (this rigbench reads summary version "
            f"{SUMMARY_VERSION}); re-render it with `rigbench report RUN`"
        )
    try:
        return Summary.model_validate(data)
    except ValidationError as error:
        raise AnalysisError(describe_validation_error(error, path)) from None


def summary_json_schema() -> dict:
    """The JSON Schema of summary.json, as the file is written (draft 2020-12)."""
    schema = Summary.model_json_schema(mode="serialization")
    return {**schema, "$schema": "https://json-schema.org/draft/2020-12/schema", "title": "rigbench summary.json"}


def schema_text() -> str:
    return json.dumps(summary_json_schema(), indent=2, sort_keys=True) + "\n"
