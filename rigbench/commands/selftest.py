"""``rigbench selftest``: measure the load generator against the ground-truth server."""

from __future__ import annotations

from pathlib import Path

import typer
from tabulate import tabulate

from analysis.repeats import arms_of
from analysis.repeats_section import aa_lines
from analysis.report import build_sections
from core.errors import LoadTestError
from core.lists import DEFAULT_USER_STEPS, STEPS_HELP, parse_counts, parse_rates
from core.repeat_order import interleaved, new_series_id
from core.whole_files import write_whole
from core.wording import counted
from loadtest.process_capacity import save_capacity
from rigbench import fidelity
from rigbench.fidelity import capacity, results_table
from rigbench.options import runs_dir_option

EXIT_CODES = (
    "Exit codes: 0 measured; 2 the selftest could not run or measured no step."
)


app = typer.Typer()


@app.command("selftest", epilog=EXIT_CODES)
def selftest(
    steps: str = typer.Option(DEFAULT_USER_STEPS, "--steps", help=STEPS_HELP),
    rates: str = typer.Option(
        None, "--rates", help="requests/s, one open-loop step each (Poisson arrivals on queued --slots)"
    ),
    tok_s: float = typer.Option(100.0, "--tok-s", help="tok/s each simulated reply streams at"),
    ttft_ms: float = typer.Option(50.0, "--ttft-ms", help="time to first token the server keeps"),
    reply_tokens: int = typer.Option(128, "--reply-tokens", help="tokens of each simulated reply"),
    tokens_per_chunk: int = typer.Option(1, "--tokens-per-chunk", min=1, help="tokens each chunk carries"),
    jitter: float = typer.Option(0.0, "--jitter", min=0.0, max=0.99, help="token gaps spread by up to this share"),
    slots: int = typer.Option(None, "--slots", min=1, help="server slots (default: the top step's users; 8 "
                              "queued slots with --rates)"),
    warmup: float = typer.Option(2.0, "--warmup", help="warm-up seconds per step"),
    measure: float = typer.Option(5.0, "--measure", help="measured seconds of every step"),
    processes: int = typer.Option(1, "--processes", help="load processes (Locust --processes)"),
    runs_dir: Path = runs_dir_option(),
    output: Path = typer.Option(None, "--out", "--output", help="also write the table to this Markdown file"),
    save: bool = typer.Option(True, "--save/--no-save", help="remember the per-process capacity for sweeps"),
    progress: bool = typer.Option(True, "--progress/--no-progress"),
    aa: int = typer.Option(
        1, "--aa", min=1, max=50, help="an A/A check: sweep the same ground truth this many times (2 or more) and "
        "report how far the runs land apart; with 4 or more, odd runs against even runs must not differ"),
) -> None:
    """Sweep the ground-truth server and report how far rigbench's reported figures are from what it sent."""

    if rates:
        shape: dict = {"rate_steps": parse_rates(rates, "--rates")}
    else:
        shape = {"user_steps": parse_counts(steps, "--steps")}
    options = dict(shape, tok_s_per_user=tok_s, ttft_ms=ttft_ms, reply_tokens=reply_tokens,
                   tokens_per_chunk=tokens_per_chunk, jitter=jitter, slots=slots, warmup=warmup, measure=measure,
                   processes=processes, progress=progress)
    if aa > 1:
        aa_check(runs_dir, aa, options, output)
        return
    run, results = fidelity.selftest(
        runs_dir,
        **shape,
        tok_s_per_user=tok_s,
        ttft_ms=ttft_ms,
        reply_tokens=reply_tokens,
        tokens_per_chunk=tokens_per_chunk,
        jitter=jitter,
        slots=slots,
        warmup=warmup,
        measure=measure,
        processes=processes,
        progress=progress,
    )
    manifest = run.read_manifest()
    if not results:
        raise LoadTestError(
            f"selftest produced no measured steps ({manifest.status}: {manifest.status_detail}); "
            f"see {run.path / 'locust.log'}"
        )
    table = tabulate(results_table(results), headers="keys", tablefmt="github", floatfmt=".3f")
    top = max(results, key=lambda r: r.rate if r.rate is not None else r.users)
    verdicts = [
        f"{tolerance.figure} {abs(getattr(top, tolerance.figure)):.3f} (target <= {tolerance.limit:g})"
        + (" ok" if tolerance.met(top) else " MISSED")
        for tolerance in fidelity.TOLERANCES
    ]
    summary = (
        (f"{top.rate:g} req/s" if top.rate is not None else counted(top.users, "user"))
        + f" x {tok_s:g} tok/s, {counted(tokens_per_chunk, 'token')} per chunk, "
          f"{counted(processes, 'process', 'processes')}: "
        + "; ".join(verdicts)
        + f"\nhighest aggregate rate followed ({fidelity.FOLLOWED_RULE}): "
        + f"{capacity(results):.0f} tok/s"
        f" ({capacity(results) / processes:.0f} per process; a lower bound if every step was followed)"
    )
    typer.echo(table)
    typer.echo(summary)
    for warning in manifest.warnings:
        typer.echo(f"warning: {warning}")
    if save:
        entry = save_capacity(capacity(results), processes)
        typer.echo(f"saved the per-process capacity ({entry['per_process_tok_s']:.0f} tok/s) for sweep warnings")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_whole(output, f"# rigbench selftest ({run.path.name})\n\n{table}\n\n{summary}\n")
        typer.echo(f"wrote {output}")


def aa_check(runs_dir: Path, runs: int, options: dict, output: Path | None) -> None:
    """``--aa N``: N self-test sweeps as one arm's repeats of one series, then the spread between them (and,
    with four or more, the arm against itself): the noise this machine and load generator put between runs."""
    series = new_series_id("selftest-aa")
    paths = []
    for planned in interleaved([None], ["selftest"], runs, series):
        typer.echo(f"A/A run {planned.repeat.index} of {runs}")
        run, _ = fidelity.selftest(runs_dir, repeat=planned.repeat, **options)
        paths.append(run.path)
    arm = arms_of(build_sections(paths))[0]
    text = "\n".join(aa_lines(arm))
    typer.echo(f"\nA/A: {runs} runs of the same ground truth ({series})\n\n{text}")
    typer.echo("runs: " + " ".join(str(path) for path in paths))
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_whole(output, f"# rigbench selftest --aa {runs} ({series})\n\n{text}")
        typer.echo(f"wrote {output}")
