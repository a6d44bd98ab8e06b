"""``rigbench report RUN...``: report.md (or .html, .csv), summary.json and plots from run directories;
with several runs, each is compared with the first (B/A ratios per step, printed and in the report)."""

from __future__ import annotations

from pathlib import Path

import typer

from analysis.energy import EnergyPrices
from analysis.prices import GIVEN_PRICE_HELP, PriceBook
from analysis.report import build_sections, comparison_table, default_out_dir, parse_formats, write_files
from analysis.report_model import compare_sections
from core.instance_types import known_types
from core.rundir.capacity_search import expand_searches, is_search
from core.workload import parse_slo
from rigbench.autotune import is_tuning, tuning_runs
from rigbench.decode_bytes import GGUF_HELP, decode_bytes_for_runs

EXIT_CODES = (
    "Exit codes: 0 written; 2 a run directory that cannot be read, an unknown --format, an unknown instance type "
    "in --price-as, a --usd-per-hour not above 0, or a --gguf that is no given run's model."
)
FORMAT_HELP = (
    "comma-separated: md (report.md), html (report.html: one self-contained page, plots embedded, sortable "
    "tables), csv (steps.csv: one row per run, step and figure; requests.csv: one row per request), all"
)


app = typer.Typer()


@app.command("report", epilog=EXIT_CODES)
def report(
    runs: list[Path] = typer.Argument(
        ..., help="run directories (runs/<run-id>); several give a cross-run report, each compared with the first; "
        "an autotune folder stands for its trials' runs, a capacity search's folder for its probes"
    ),
    out: Path | None = typer.Option(None, "--out", help="folder for the report (default: the run's own folder)"),
    price_as: list[str] = typer.Option(
        [], "--price-as", help="price runs made on no known instance type (a local machine) as this known type: "
        "what the machine counts as; without it (or --usd-per-hour) such a run is not priced. A run on one GPU of a "
        "multi-GPU type is priced per GPU (repeatable, or comma-separated; `rigbench prices list` shows the types)",
    ),
    usd_per_hour: float | None = typer.Option(None, "--usd-per-hour", metavar="USD", help=GIVEN_PRICE_HELP),
    formats: str = typer.Option("md", "--format", help=FORMAT_HELP),
    gguf: list[Path] = typer.Option([], "--gguf", help=GGUF_HELP),
    ceiling: list[Path] = typer.Option(
        [], "--ceiling", help="a llama-batched-bench report (JSON) of the same model and card, set beside the "
        "served curve (ones in the run's folder or the two above it are found without it; repeatable)",
    ),
    kwh_price: float | None = typer.Option(
        None, "--kwh-price", min=0, help="electricity in $ per kWh: the energy section's $/Mtok of a card you run"),
    card_usd: float | None = typer.Option(
        None, "--card-usd", min=0, help="what the card cost: spread over --card-years into $/Mtok beside it"),
    card_years: float = typer.Option(3.0, "--card-years", min=0.1, help="years of service --card-usd is spread over"),
    slo: str = typer.Option("", "--slo", help="judge each step's goodput against these targets instead of the "
                            "run's own, e.g. ttft_p90=0.5,tpot_p90=50ms (figures ttft, tpot, itl, e2e at p50, p90, "
                            "p95, p99)"),
) -> None:
    """Write report.md (per-step tok/s, latency, $/Mtok with intervals), summary.json and plots; two runs also
    give B/A ratios.

    With several runs, the first is A (the baseline, e.g. without the drafter) and each other one B:
    per-step ratios B/A of per-user tok/s, aggregate tok/s and TTFT p90, with 95% intervals, paired
    by prompt category, are printed here and written in the cross-run report."""
    chosen = parse_formats(formats)  # a bad --format stops here, before anything is read or written
    price_as = known_types(price_as, "--price-as")  # and an unknown type
    targets = parse_slo(slo) if slo else None  # and a target it cannot read
    book = PriceBook.default(usd_per_hour=usd_per_hour)  # and a --usd-per-hour not above 0
    # an autotune folder stands for its trials' runs (the profile's line first), a capacity search's for its probes
    probes = expand_searches([run for path in runs for run in (tuning_runs(path) if is_tuning(path) else [path])])
    sections = build_sections(probes, price_as, book, decode_bytes=decode_bytes_for_runs(probes, gguf),
                              ceilings=ceiling, slo=targets)
    # a pair that cannot be compared: the report says why; a search's probes differ in load by design
    comparisons = [] if any(map(is_search, runs)) else compare_sections(sections)
    for comparison in comparisons:
        typer.echo(f"A = {comparison.a}\nB = {comparison.b}\n\n{comparison_table(comparison.steps)}\n")
    prices = EnergyPrices(usd_per_kwh=kwh_price, card_usd=card_usd, card_years=card_years)
    for path in write_files(sections, out if out is not None else default_out_dir(runs), chosen, comparisons,
                            energy_prices=prices if prices.given else None):
        typer.echo(str(path))
