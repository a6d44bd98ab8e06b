"""``rigbench plan``: instances needed per measured rig to serve N users (closed-loop sweeps) or
R requests per second (open-loop sweeps, ``--rates``) at the targets; or from a capacity search's folder
(``rigbench sweep --find-max``), whose largest load meeting its own service-level targets is the capacity; or from
an autotune folder (``rigbench autotune``), whose kept trial is the card's best measured configuration.

Only priced rigs are ranked: a run on a known instance type, one whose machine ``--price-as``
names a type for, or one ``--usd-per-hour`` gives an hourly price. Other types enter only when
``--hypothetical`` names them, labelled so: a recommendation of a type nobody measured must be asked for.
Every price of hardware that did not measure the run names the machine that did (``analysis.cost``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import typer

from analysis.goodput_section import targets_text
from analysis.plan import Targets, plan_table, plans_for_sections
from analysis.prices import GIVEN_PRICE_HELP, PriceBook
from analysis.report_model import build_section
from core.errors import AnalysisError, UsageError
from core.instance_types import known_types
from core.rundir.capacity_search import CapacitySearch, is_search, read_search
from core.whole_files import unwritten_said_as, write_whole
from core.wording import counted
from rigbench.autotune import is_tuning, kept_runs
from rigbench.decode_bytes import GGUF_HELP, decode_bytes_for_runs

NO_PLAN_EXIT_CODE = 3
EXIT_CODES = (
    "Exit codes: 0 a rig meets the targets (the recommendation is printed); 3 no measured rig meets them; "
    "2 a bad option or run directory, an unknown instance type in --price-as or --hypothetical, a --usd-per-hour "
    "not above 0, no run priced (none ran on a known type: give --price-as, --usd-per-hour or --hypothetical), "
    "a --gguf that is no given run's model, or an --out file that could not be written (none is left cut)."
)


def best_probe(folder: Path, search: CapacitySearch) -> Path:
    """The probe run a search's plan is priced and drawn from: its largest load meeting the targets, else its
    first probe (the plan then says no load met them)."""
    result = search.result
    probe = search.probe(result.largest_meeting) if result is not None else None
    probe = probe or (search.probes[0] if search.probes else None)
    if probe is None:
        raise UsageError(f"{folder}: the capacity search has no probe yet; nothing to plan from")
    return folder / probe.run_id


app = typer.Typer()


@app.command("plan", epilog=EXIT_CODES)
def plan(
    runs: list[Path] = typer.Argument(..., help="run directories, one per rig configuration; a capacity search's "
                                      "folder, or an autotune folder (its kept trial: the card's best configuration)"),
    users: int = typer.Option(None, "--users", min=1, help="concurrent users to serve (closed-loop runs)"),
    rate: float = typer.Option(
        None, "--rate", min=0.0, help="requests per second to serve (open-loop runs, swept with --rates)"
    ),
    min_tok_s: float = typer.Option(None, "--min-tok-s", min=0, help="per-user decode tok/s each user must get "
                                    "(for sweeps; a capacity search brings its own targets)"),
    ttft_p90: float = typer.Option(None, "--ttft-p90", min=0, help="TTFT p90 ceiling in seconds (for sweeps)"),
    price_as: list[str] = typer.Option(
        [], "--price-as", help="price runs made on no known instance type (a local machine) as this known type: "
        "what the machine counts as; a run on one GPU of a multi-GPU type is priced per GPU (repeatable, or "
        "comma-separated; `rigbench prices list` shows the types)",
    ),
    hypothetical: list[str] = typer.Option(
        [], "--hypothetical", metavar="TYPE[,TYPE]", help="also rank every run extrapolated to these known "
        "types, labelled hypothetical (without it only the types the runs ran on, --price-as or --usd-per-hour are "
        "ranked)",
    ),
    usd_per_hour: float | None = typer.Option(None, "--usd-per-hour", metavar="USD", help=GIVEN_PRICE_HELP),
    out: Path | None = typer.Option(None, "--out", help="also write the ranked plans as JSON to this file"),
    gguf: list[Path] = typer.Option([], "--gguf", help=GGUF_HELP),
) -> None:
    """Rank rigs by $/h to serve the users (or the request rate), reading each sweep conservatively
    (95% interval ends)."""

    if (users is None) == (rate is None) or rate == 0:
        raise UsageError("give --users N (a closed-loop sweep's load) or --rate R (requests/s above 0, for "
                         "sweeps made with --rates), one of the two")
    searches = {path: read_search(path) for path in runs if is_search(path)}  # rigbench sweep --find-max
    sweeps = [path for path in runs if path not in searches]
    if sweeps and (min_tok_s is None or ttft_p90 is None):
        raise UsageError(f"--min-tok-s and --ttft-p90 are needed to read a sweep's steps ({sweeps[0]}); a capacity "
                         "search's folder brings its own targets")
    price_as = known_types(price_as, "--price-as")
    hypothetical = known_types(hypothetical, "--hypothetical")
    book = PriceBook.default(usd_per_hour=usd_per_hour)  # a --usd-per-hour not above 0 is refused here
    tunings = {path: kept_runs(path) for path in runs if path not in searches and is_tuning(path)}
    probes = {best_probe(path, search): search for path, search in searches.items()}
    paths = [run for path in runs for run in (
        [best_probe(path, searches[path])] if path in searches else tunings[path][0] if path in tunings else [path])]
    known = decode_bytes_for_runs(paths, gguf)
    sections = [build_section(path, book, price_as, known, hypothetical=hypothetical) for path in paths]
    by_run = {section.figures.run.path: probes[path] for path, section in zip(paths, sections, strict=True)
              if path in probes}
    unpriced = [section for section in sections if not section.prices]
    if len(unpriced) == len(sections):
        why = "; ".join(f"{section.label}: {section.not_priced or 'no price known'}" for section in unpriced)
        raise UsageError(f"no run is priced, so there is nothing to rank ({why}); give --price-as TYPE (what the "
                         "machine counts as), --usd-per-hour USD (what it costs) or --hypothetical TYPE[,TYPE] "
                         "(`rigbench prices list` shows the types)")
    targets = Targets(users=users or 0, min_tok_s=min_tok_s if min_tok_s is not None else 0.0,
                      ttft_p90_s=ttft_p90 if ttft_p90 is not None else math.inf, rate=rate)
    plans = plans_for_sections(sections, targets, by_run)
    demand = f"{rate:g} requests/s" if rate is not None else counted(users, "user")
    if sweeps:
        typer.echo(f"{demand}, each >= {min_tok_s:g} tok/s (lower 95% bound of the median), "
                   f"TTFT p90 <= {ttft_p90:g} s (upper bound), no errors")
    for path, (kept, trial) in tunings.items():
        which = kept[0].name if len(kept) == 1 else f"its {len(kept)} repeats, sized by the lowest"
        typer.echo(f"autotune folder {path}: planned from the trial it kept, {trial.name} ({which}), the card's "
                   "best measured configuration")
    for path, search in searches.items():
        typer.echo(f"{demand}; capacity search {path.name}: its largest load meeting {targets_text(search.targets)} "
                   "(every target's 95% interval within it), no errors")
    typer.echo("")
    typer.echo(plan_table(plans))
    best = plans[0] if plans and plans[0].instances is not None else None
    if best is None:
        typer.echo("\nno measured rig meets the targets; relax them or measure smaller user steps")
    else:
        typer.echo(
            f"\nrecommended: {best.run_label} at {best.price.label}: {best.instances_text()} of "
            f"{best.capacity.describe()}, ${best.usd_per_hour:.3f}/h"
        )
    if out is not None:
        given = {**targets.__dict__, "min_tok_s": min_tok_s, "ttft_p90_s": ttft_p90}
        searched = {path.name: search.targets for path, search in searches.items()}
        payload = {"targets": given, "capacity_searches": searched, "plans": [plan.to_dict() for plan in plans]}
        with unwritten_said_as(AnalysisError, "the file is written whole or not at all, so none is cut; free "
                               "space there, or give --out another place, and run it again"):
            write_whole(out, json.dumps(payload, indent=2) + "\n")
    if any(plan.price.hypothetical for plan in plans):
        typer.echo("\nprices marked (hypothetical) apply an instance type the run did not run on (--hypothetical), "
                   "to figures measured on the machine each names")
    if any(plan.price.basis == "price-as" for plan in plans):
        typer.echo("\nprices marked (--price-as) apply the type given for a machine that is no known type, to "
                   "figures measured on the machine each names")
    if any(plan.price.basis == "given" for plan in plans):
        typer.echo("\nprices marked (--usd-per-hour) are the hourly price given for a machine that is no known "
                   "type, applied to figures measured on the machine each names")
    for section in unpriced:
        typer.echo(f"not ranked: {section.label}: {section.not_priced or 'no price known (see its warnings)'}")
    for section in sections:
        for warning in section.warnings:
            typer.echo(f"warning: {section.label}: {warning}")
    if best is None:
        raise typer.Exit(NO_PLAN_EXIT_CODE)
