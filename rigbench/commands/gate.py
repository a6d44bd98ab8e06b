"""``rigbench gate RUN... --baseline BASE...``: fail a CI build on a regression beyond noise, or a missed limit."""

from __future__ import annotations

from pathlib import Path

import typer

from analysis.gate import GatedRun, Thresholds
from analysis.gate import gate as judge
from analysis.gate_output import markdown_table, outcome_line, write_junit
from analysis.prices import PriceBook
from analysis.report_model import build_section
from core.errors import AnalysisError
from core.instance_types import known_types
from core.whole_files import unwritten_said_as
from core.wording import counted

EXIT_CODES = (
    "Exit codes: 0 no regression and every limit met; 1 a regression or a missed limit (the table says which); "
    "2 unusable input: a run that cannot be read or analysed, runs of different workloads without "
    "--allow-different, runs that share no step, a bad option (an unknown --price-as type among them), or a "
    "--junit file that could not be written (none is left cut)."
)


app = typer.Typer()


@app.command("gate", epilog=EXIT_CODES)
def gate(
    run: list[Path] = typer.Argument(..., help="the run to judge, e.g. runs/<run-id> from this build; several: "
                                     "one arm's repeats (--repeats N), judged by the spread between them"),
    baseline: list[Path] = typer.Option(..., "--baseline", help="the run it must keep up with (a run directory); "
                                        "repeat the option for the baseline's repeats"),
    max_drop: float = typer.Option(
        5.0,
        "--max-drop",
        min=0,
        help="percent of the baseline's value a figure may get worse by; beyond it a regression counts only "
        "when it is beyond the spread between runs (several runs a side), else when the two runs' 95% intervals "
        "do not overlap",
    ),
    min_tok_s: float | None = typer.Option(
        None,
        "--min-tok-s",
        min=0,
        help="fail every step of RUN whose median per-user decode tok/s (its value, client measure; the "
        "report's per-user column) is below this",
    ),
    max_ttft_p90: float | None = typer.Option(
        None, "--max-ttft-p90", min=0, help="seconds; fail every step of RUN whose TTFT p90 (its value) is above it"
    ),
    junit: Path | None = typer.Option(
        None, "--junit", help="also write JUnit XML here: a testcase per step and figure, failures for regressions"
    ),
    price_as: list[str] = typer.Option(
        [], "--price-as", help="price both runs, when made on no known instance type, as this known type, so "
        "$/Mtok is gated too (a run on a known type is priced as that; repeatable, or comma-separated)",
    ),
    allow_different: bool = typer.Option(
        False,
        "--allow-different",
        help="compare runs of different models, prompt sets, reply lengths, temperatures or arrivals "
        "(refused otherwise, naming what differs)",
    ),
) -> None:
    """Judge RUN against BASELINE step by step, for CI: pass, or fail naming the figure that moved.

    Steps are paired by users, or by rate for open-loop runs: aggregate tok/s, per-user tok/s, TTFT p90,
    error rate and $/Mtok at every price both runs have (none for runs on a machine that is no known
    instance type, unless --price-as prices them), printed as a markdown table for the CI log.

    Both runs are analysed afresh from their records, as `rigbench report` does (their summary.json is not
    read, and nothing is written but --junit's file)."""

    price_as = known_types(price_as, "--price-as")
    book = PriceBook.default()
    run_sections = [build_section(path, book, price_as) for path in run]
    base_sections = [build_section(path, book, price_as) for path in baseline]
    sections = [*run_sections, *base_sections]
    ours = GatedRun.from_sections(run_sections, "RUN")
    theirs = GatedRun.from_sections(base_sections, "--baseline")
    thresholds = Thresholds(max_drop=max_drop / 100, min_tok_s=min_tok_s, max_ttft_p90_s=max_ttft_p90)
    result = judge(ours, theirs, thresholds, allow_different=allow_different)
    typer.echo(f"run      = {ours.label} ({counted(len(ours.runs), 'run')})\n"
               f"baseline = {theirs.label} ({counted(len(theirs.runs), 'run')})")
    typer.echo(
        f"a regression: worse than the baseline by more than {max_drop:g}% and beyond the spread between runs "
        "(with one run a side: the two runs' 95% intervals apart)\n"
    )
    for note in result.notes:
        typer.echo(f"note: {note}")
    unpriced = {f"{s.label}: {s.not_priced}" for s in sections if s.not_priced and not s.prices}
    for line in sorted(unpriced):
        typer.echo(f"note: $/Mtok not gated: {line}")
    typer.echo(markdown_table(result))
    typer.echo(f"\n{outcome_line(result)}")
    if junit is not None:
        with unwritten_said_as(AnalysisError, "the file is written whole or not at all, so none is cut; free "
                               "space there, or give --junit another place, and run it again"):
            typer.echo(f"junit: {write_junit(result, junit)}")
    if not result.passed:
        raise typer.Exit(1)
