"""``rigbench prices``: show the prices reports use, or fetch fresh ones from AWS into the cache."""

from __future__ import annotations

import typer

from analysis.prices import PriceBook, default_cache_path, fetch_on_demand, fetch_spot, save_quotes

app = typer.Typer(
    epilog="Exit codes: 0 shown or fetched; 2 an unknown instance type, or AWS refused the call.",
    help="Instance prices: AWS Price List and spot history, cached with source and date.", no_args_is_help=True
)


@app.command("show")
def show(
    instance_types: list[str] = typer.Argument(None, help="instance types (default: all known)"),
    region: str = typer.Option("us-east-1", "--region"),
) -> None:
    """Print the quotes the price book holds (cache first, then the bundled snapshot)."""

    book = PriceBook.default()
    cache = default_cache_path()
    typer.echo(f"cache: {cache} ({'present' if cache.exists() else 'absent'}); bundled: analysis/data/prices.json")
    for quote in book.quotes:
        if quote.region == region and (not instance_types or quote.instance_type in instance_types):
            typer.echo(quote.describe())


@app.command("fetch")
def fetch(
    instance_types: list[str] = typer.Argument(..., help="instance types, e.g. g6.xlarge g6.2xlarge"),
    region: str = typer.Option("us-east-1", "--region"),
    spot: bool = typer.Option(True, "--spot/--no-spot", help="also fetch spot prices per AZ"),
) -> None:
    """Ask AWS (needs credentials) and save the quotes to the cache snapshot."""

    quotes = []
    for instance_type in instance_types:
        quotes.append(fetch_on_demand(instance_type, region))
        if spot:
            quotes.extend(fetch_spot(instance_type, region))
    path = save_quotes(quotes)
    for quote in quotes:
        typer.echo(quote.describe())
    typer.echo(f"saved to {path}")

