"""``rigbench cloud orphans``: rigbench instances past their TTL or whose stack is gone; ``--terminate`` ends them."""

from __future__ import annotations

from pathlib import Path

import typer
from tabulate import tabulate

from core.wording import counted
from infra.orphans import (
    check_regions,
    default_client_factory,
    find_orphans,
    orphan_rows,
    pulumi_stack_names,
    terminate_orphans,
)


def parse_stack_list(text: str) -> set[str]:
    return {name.strip().rsplit("/", 1)[-1] for name in text.split(",") if name.strip()}


EXIT_CODES = (
    "Exit codes: 0 listed (and ended, with --terminate); 1 --terminate was declined; 2 a bad "
    "region or AWS refused the call."
)


def orphans(
    region: list[str] = typer.Option([], "--region", "-r", help="region to search (repeat for each region)"),
    known_stacks: str | None = typer.Option(
        None, "--known-stacks", help="comma-separated stacks that exist (default: `pulumi stack ls --json`)"
    ),
    skip_stack_check: bool = typer.Option(
        False, "--skip-stack-check", help="only look at TTL expiry (no Pulumi CLI or stack list needed)"
    ),
    project_dir: Path = typer.Option(Path("."), "--project-dir", help="folder with Pulumi.yaml, for stack ls"),
    terminate: bool = typer.Option(False, "--terminate", help="terminate the instances found, after confirming"),
    yes: bool = typer.Option(False, "--yes", "-y", help="with --terminate: do not ask for confirmation"),
    endpoint_url: str | None = typer.Option(
        None, "--endpoint-url", help="EC2-compatible endpoint (tests, LocalStack, moto)", hidden=True
    ),
) -> None:
    """List rigbench-tagged EC2 instances running past their TTL or whose Pulumi stack is gone."""


    regions = check_regions(region)
    if skip_stack_check:
        stacks = None
    elif known_stacks is not None:
        stacks = parse_stack_list(known_stacks)
    else:
        stacks = pulumi_stack_names(project_dir)
    factory = default_client_factory(endpoint_url)
    found = find_orphans(regions, factory, stacks)
    scope = f"in {', '.join(regions)}" + ("" if stacks is not None else " (TTL check only)")
    if not found:
        typer.echo(f"no orphaned rigbench instances {scope}")
        return
    headers = ["region", "instance", "type", "state", "stack", "owner", "expires at", "why"]
    typer.echo(tabulate(orphan_rows(found), headers=headers, tablefmt="github"))
    typer.echo(f"{counted(len(found), 'orphaned rigbench instance')} {scope}")
    if not terminate:
        typer.echo("run again with --terminate to end them")
        return
    if not yes and not typer.confirm(f"Terminate these {counted(len(found), 'instance')}?", default=False):
        typer.echo("nothing terminated")
        raise typer.Exit(1)
    ended = terminate_orphans(found, factory)
    typer.echo(f"terminated {counted(len(ended), 'instance')}: {', '.join(ended)}")
