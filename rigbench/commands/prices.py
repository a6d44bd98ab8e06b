"""``rigbench prices``: list the instance types rigbench knows with their prices, show the quotes reports use,
or fetch fresh ones from AWS into the cache."""

from __future__ import annotations

import typer
from tabulate import tabulate

from analysis.prices import PriceBook, PriceQuote, default_cache_path, fetch_on_demand, fetch_spot, save_quotes
from core.instance_types import INSTANCE_TYPES, known_types

app = typer.Typer(
    epilog="Exit codes: 0 listed, shown or fetched; 2 an unknown instance type, or AWS refused the call.",
    help="Instance types and prices: the types rigbench knows, AWS Price List and spot history, cached with source "
    "and date.", no_args_is_help=True
)


def _where_from() -> str:
    cache = default_cache_path()
    return f"cache: {cache} ({'present' if cache.exists() else 'absent'}); bundled: analysis/data/prices.json"


def _cell(quote: PriceQuote | None, sources: list[str], per: int = 1) -> str:
    """'0.8048 [1]': the price and its numbered source (footnotes below the table), '-' where none is known."""
    if quote is None:
        return "-"
    source = f"{quote.source}; {quote.as_of}" + (f"; {quote.note}" if quote.note else "")
    if source not in sources:
        sources.append(source)
    return f"{quote.usd_per_hour / per:.4f} [{sources.index(source) + 1}]"


@app.command("list")
def list_types(region: str = typer.Option("us-east-1", "--region")) -> None:
    """The instance types rigbench knows (what --price-as and --hypothetical accept): GPU, GPU count and memory,
    vCPUs, and the on-demand and spot prices the price book holds, each with its source and date."""

    book = PriceBook.default()
    typer.echo(_where_from() + f"; region {region}\n")
    sources: list[str] = []
    rows = []
    for name, known in sorted(INSTANCE_TYPES.items()):
        on_demand = book.find(name, region, "on-demand")
        rows.append([
            name, known.gpu_name, known.gpu_count, known.gpu_memory_gib, known.vcpu,
            _cell(on_demand, sources), _cell(on_demand, sources, known.gpu_count) if known.gpu_count > 1 else "",
            _cell(book.find(name, region, "spot"), sources),
        ])
    headers = ["type", "GPU", "GPUs", "GB per GPU", "vCPUs", "on-demand $/h", "per GPU $/h", "spot $/h"]
    typer.echo(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    typer.echo("\nsources (source; as of; note):")
    for number, source in enumerate(sources, 1):
        typer.echo(f"[{number}] {source}")
    typer.echo("\nspot: the quote a report takes for a run that names no zone; spot prices differ per zone and move "
               "(`rigbench prices fetch TYPE` asks AWS for today's). A run on one GPU of a multi-GPU type is priced "
               "per GPU.")


@app.command("show")
def show(
    instance_types: list[str] = typer.Argument(None, help="instance types (default: all known)"),
    region: str = typer.Option("us-east-1", "--region"),
) -> None:
    """Print the quotes the price book holds (cache first, then the bundled snapshot)."""

    wanted = known_types(instance_types or [], "prices show")
    book = PriceBook.default()
    typer.echo(_where_from())
    for quote in book.quotes:
        if quote.region == region and (not wanted or quote.instance_type in wanted):
            typer.echo(quote.describe())
    held = {quote.instance_type for quote in book.quotes if quote.region == region}
    for name in wanted:
        if name not in held:
            typer.echo(f"{name}: no quote for {region}; `rigbench prices fetch {name} --region {region}` asks AWS")


@app.command("fetch")
def fetch(
    instance_types: list[str] = typer.Argument(..., help="instance types, e.g. g6.xlarge g6.2xlarge"),
    region: str = typer.Option("us-east-1", "--region"),
    spot: bool = typer.Option(True, "--spot/--no-spot", help="also fetch spot prices per AZ"),
) -> None:
    """Ask AWS (needs credentials) and save the quotes to the cache snapshot."""

    quotes = []
    for instance_type in known_types(instance_types, "prices fetch"):
        quotes.append(fetch_on_demand(instance_type, region))
        if spot:
            quotes.extend(fetch_spot(instance_type, region))
    path = save_quotes(quotes)
    for quote in quotes:
        typer.echo(quote.describe())
    typer.echo(f"saved to {path}")
