"""``rigbench selftest``: measure the load generator against the ground-truth server."""

from __future__ import annotations

from pathlib import Path

import typer
from tabulate import tabulate

from core.errors import LoadTestError
from core.lists import parse_counts, parse_rates

TARGETS = {"tok_s_error_pct": 0.5, "ttft_p50_error_ms": 2.0, "itl_p50_error_ms": 0.5, "tpot_p50_error_ms": 0.2}


EXIT_CODES = (
    "Exit codes: 0 measured; 2 the selftest could not run or measured no step."
)


def register(app: typer.Typer) -> None:
    @app.command("selftest", epilog=EXIT_CODES)
    def selftest(
        steps: str = typer.Option("1,2,4,8,16,32,64", "--steps", help="user counts (closed loop)"),
        rates: str = typer.Option(
            None, "--rates", help="requests/s, one open-loop step each (Poisson arrivals on queued --slots)"
        ),
        rate: float = typer.Option(100.0, "--rate", help="tok/s each simulated reply streams at"),
        ttft_ms: float = typer.Option(50.0, "--ttft-ms", help="time to first token the server keeps"),
        reply_tokens: int = typer.Option(128, "--reply-tokens"),
        tokens_per_chunk: int = typer.Option(1, "--tokens-per-chunk", min=1, help="tokens each chunk carries"),
        jitter: float = typer.Option(0.0, "--jitter", min=0.0, max=0.99, help="token gaps spread by up to this share"),
        slots: int = typer.Option(None, "--slots", min=1, help="server slots (default: the top step's users; 8 "
                                  "queued slots with --rates)"),
        warmup: float = typer.Option(2.0, "--warmup"),
        measure: float = typer.Option(5.0, "--measure"),
        processes: int = typer.Option(1, "--processes", help="load processes (Locust --processes)"),
        runs_dir: Path = typer.Option(Path("runs"), "--runs-dir"),
        output: Path = typer.Option(None, "--output", help="also write the table as Markdown"),
        save: bool = typer.Option(True, "--save/--no-save", help="remember the per-process ceiling for sweeps"),
        progress: bool = typer.Option(True, "--progress/--no-progress"),
    ) -> None:
        """Sweep the ground-truth server and report how far rigbench's reported figures are from what it sent."""
        from loadtest.ceiling import save_ceiling
        from rigbench.fidelity import ceiling, results_table, selftest

        if rates:
            shape: dict = {"rate_steps": parse_rates(rates, "--rates")}
        else:
            shape = {"user_steps": parse_counts(steps, "--steps")}
        run, results = selftest(
            runs_dir,
            **shape,
            tok_s_per_user=rate,
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
            f"{name} {abs(getattr(top, name)):.3f} (target <= {limit})"
            + (" ok" if abs(getattr(top, name)) <= limit else " MISSED")
            for name, limit in TARGETS.items()
        ]
        summary = (
            (f"{top.rate:g} req/s" if top.rate is not None else f"{top.users} users")
            + f" x {rate:g} tok/s, {tokens_per_chunk} token(s) per chunk, {processes} process(es): "
            + "; ".join(verdicts)
            + "\nhighest aggregate rate followed (tok/s within 0.5%, TTFT p50 within 2 ms, ITL p50 within 0.5 ms, "
            "TPOT p50 within 0.2 ms): "
            + f"{ceiling(results):.0f} tok/s"
            f" ({ceiling(results) / processes:.0f} per process; a lower bound if every step was followed)"
        )
        typer.echo(table)
        typer.echo(summary)
        for warning in manifest.warnings:
            typer.echo(f"warning: {warning}")
        if save:
            entry = save_ceiling(ceiling(results), processes)
            typer.echo(f"saved the per-process ceiling ({entry['per_process_tok_s']:.0f} tok/s) for sweep warnings")
        if output is not None:
            output.parent.mkdir(parents=True, exist_ok=True)
            output.write_text(f"# rigbench selftest ({run.path.name})\n\n{table}\n\n{summary}\n")
            typer.echo(f"wrote {output}")
