"""What a report says: per run its figures, the prices applied, $/Mtok and run cost; across runs
the comparisons with the first; and the plots drawn of them.

Kept apart from the outputs, which are formatters over one :class:`Report`: report.md
(``report.py``; report.html is converted from it), steps.csv and requests.csv (``report_csv.py``)
and summary.json (``summary.py``); the plots (``plots.py``) are drawn from its sections.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from analysis.ceiling import BatchedCeiling, ceiling_for
from analysis.compare import StepComparison, compare_runs
from analysis.cost import (
    PriceChoice,
    dollars_per_mtok_estimate,
    not_priced,
    price_choices,
    run_uptime_seconds,
)
from analysis.energy import EnergyPrices
from analysis.figures import RunFigures, run_figures
from analysis.intervals import Estimate
from analysis.load import load_run
from analysis.prices import PriceBook
from analysis.roofline import RunRoofline, run_roofline
from analysis.time_budget import RunBudget
from core.errors import AnalysisError
from core.rundir import DecodeBytes


@dataclass
class RunCost:
    price: PriceChoice
    seconds: float
    basis: str

    @property
    def usd(self) -> float:
        return self.seconds / 3600.0 * self.price.quote.usd_per_hour


@dataclass
class RunSection:
    figures: RunFigures
    prices: list[PriceChoice]
    cost_rows: list[list[Estimate]]  # per step, per price: $/Mtok
    run_costs: list[RunCost]
    warnings: list[str] = field(default_factory=list)
    roofline: RunRoofline | None = None
    ceiling: BatchedCeiling | None = None  # the card's batched decode speed, when a bench result matches
    budget: RunBudget | None = None  # where a decode call's time goes: set across a report's runs (budget_section)
    not_priced: str | None = None  # why the run has no price at all, when it ran on no known type (analysis.cost)

    @property
    def label(self) -> str:
        return self.figures.run.label

    @property
    def cost_labels(self) -> list[str]:
        return [choice.label for choice in self.prices]


def build_section(
    path: Path,
    book: PriceBook,
    price_as: list[str] | None = None,
    decode_bytes: Mapping[str, DecodeBytes] | None = None,
    ceilings: list[BatchedCeiling] | None = None,
    hypothetical: list[str] | None = None,
    slo: Mapping[str, float] | None = None,
) -> RunSection:
    """``price_as``: the types a run on no known type counts as (``--price-as``; the book's ``given`` price,
    ``--usd-per-hour``, prices such a run too); ``hypothetical``: types to extrapolate every run to (``plan
    --hypothetical``); ``decode_bytes``: model summaries by sha256, for a run whose manifest records none (its
    roofline); ``ceilings``: llama-batched-bench results named by hand, besides those found beside the run;
    ``slo``: targets to judge goodput by instead of the run's own."""
    run = load_run(path)
    figures = run_figures(run, slo)
    model = run.manifest.model
    decode = model.decode_bytes if model is not None else None
    if model is not None and decode is None and decode_bytes:
        decode = decode_bytes.get(model.sha256)
    warnings = figures.warnings
    prices = price_choices(run.manifest, book, price_as, warnings, hypothetical)
    unpriced = not_priced(run.manifest, price_as, book)  # said once, in the cost section: not a warning to count
    if unpriced is None and not prices:
        warnings.append("no price known for this run: $/Mtok and run cost are left out (not zero)")
    cost_rows = [
        [dollars_per_mtok_estimate(choice.quote.usd_per_hour, step.aggregate_tok_s) for choice in prices]
        for step in figures.steps
    ]
    seconds, basis = run_uptime_seconds(figures, warnings)
    run_costs = [RunCost(choice, seconds, basis) for choice in prices] if seconds is not None else []
    return RunSection(figures, prices, cost_rows, run_costs, warnings, run_roofline(figures, decode),
                      ceiling_for(run, ceilings), not_priced=unpriced)


@dataclass
class RunComparison:
    """Run ``b`` against run ``a`` (by their labels), step by step."""

    a: str
    b: str
    steps: list[StepComparison]


@dataclass
class Report:
    """Everything one report says, whatever its formats."""

    sections: list[RunSection]
    comparisons: list[RunComparison]
    plots: list[Path]  # the plot files drawn for it
    out_dir: Path  # where its files go; links in it are relative to this
    energy_prices: EnergyPrices | None = None  # a local card's electricity and purchase price (--kwh-price, …)

    @property
    def title(self) -> str:
        return self.sections[0].figures.run.manifest.run_id if len(self.sections) == 1 else f"{len(self.sections)} runs"


def compare_sections(sections: list[RunSection]) -> list[RunComparison]:
    """Every run after the first compared with the first; a pair that cannot be compared becomes
    a warning of the later run."""
    comparisons = []
    for section in sections[1:]:
        try:
            rows = compare_runs(sections[0].figures, section.figures)
        except AnalysisError as error:
            section.warnings.append(f"not compared with {sections[0].label}: {error}")
            continue
        comparisons.append(RunComparison(sections[0].label, section.label, rows))
    return comparisons
