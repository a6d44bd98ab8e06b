"""Dollars: $ per million output tokens per step, and what the whole run cost.

$/Mtok = hourly price / (aggregate output tok/s x 3600) x 1e6. Its interval is the price over
the ends of the throughput interval (the price itself is taken as exact, with its source).

Which price: an AWS run is priced from its manifest (the price the rig recorded at run time,
for its market) and from the price book for the other market. A local rig has no price, so
it is priced *hypothetically* at reference instance types (``g6.xlarge`` unless the user
names others), labelled as such everywhere; never a silent zero. A price the book lacks is a
counted warning.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass

from analysis.figures import RunFigures
from analysis.intervals import Estimate
from analysis.prices import Market, PriceBook, PriceQuote
from core.errors import InfraError
from core.instance_types import get_instance_type
from core.rundir import RunManifest

DEFAULT_REFERENCE_TYPES = ("g6.xlarge",)
DEFAULT_REGION = "us-east-1"
MARKETS: tuple[Market, ...] = ("on-demand", "spot")


@dataclass(frozen=True)
class PriceChoice:
    """A price applied to a run, and whether the run really ran on that instance type."""

    quote: PriceQuote
    hypothetical: bool

    @property
    def label(self) -> str:
        text = f"{self.quote.instance_type} {self.quote.market}"
        return f"{text} (hypothetical)" if self.hypothetical else text


def gpu_description(instance_type: str) -> str | None:
    """'1x L4 24 GiB' from the shared instance table, or None for a type it does not list."""
    try:
        known = get_instance_type(instance_type)
    except InfraError:  # a type the table does not list just has no GPU line
        return None
    return f"{known.gpu_count}x {known.gpu_name} {known.gpu_memory_gib} GiB"


def dollars_per_mtok(usd_per_hour: float, tok_s: float | None) -> float | None:
    if tok_s is None or not math.isfinite(tok_s) or tok_s <= 0:
        return None
    return usd_per_hour / (tok_s * 3600.0) * 1e6


def dollars_per_mtok_estimate(usd_per_hour: float, throughput: Estimate) -> Estimate:
    """$/Mtok with the interval mapped from throughput's (its high end gives the low cost)."""
    value = dollars_per_mtok(usd_per_hour, throughput.value)
    low = dollars_per_mtok(usd_per_hour, throughput.high)
    high = dollars_per_mtok(usd_per_hour, throughput.low)
    return Estimate(value, low, high, throughput.n, throughput.method)


def _manifest_quote(manifest: RunManifest) -> PriceQuote | None:
    rig = manifest.rig
    if rig.price_per_hour is None or rig.market is None or rig.instance_type is None:
        return None
    return PriceQuote(
        instance_type=rig.instance_type,
        region=rig.region or "unknown",
        market=rig.market,
        availability_zone=rig.availability_zone,
        usd_per_hour=rig.price_per_hour,
        source=f"run manifest ({rig.price_source or 'source not recorded'})",
        as_of=rig.launch_time or manifest.created_at,
    )


def price_choices(
    manifest: RunManifest, book: PriceBook, reference_types: tuple[str, ...] | list[str] | None, warnings: list[str]
) -> list[PriceChoice]:
    """The prices a run is costed at (see the module docstring); missing ones become warnings."""
    rig = manifest.rig
    choices: list[PriceChoice] = []
    if rig.kind == "aws" and rig.instance_type:
        recorded = _manifest_quote(manifest)
        region = rig.region or DEFAULT_REGION
        for market in MARKETS:
            if recorded is not None and recorded.market == market:
                choices.append(PriceChoice(recorded, hypothetical=False))
                continue
            quote = book.find(rig.instance_type, region, market, rig.availability_zone)
            if quote is None:
                warnings.append(f"no {market} price for {rig.instance_type} in {region}; run `rigbench prices fetch`")
            else:
                choices.append(PriceChoice(quote, hypothetical=False))
    types = list(reference_types) if reference_types else ([] if choices else list(DEFAULT_REFERENCE_TYPES))
    for instance_type in types:
        if rig.kind == "aws" and instance_type == rig.instance_type:
            continue
        for market in MARKETS:
            quote = book.find(instance_type, rig.region or DEFAULT_REGION, market)
            if quote is None:
                warnings.append(f"no {market} price for {instance_type} in {rig.region or DEFAULT_REGION}; left out")
            else:
                choices.append(PriceChoice(quote, hypothetical=True))
    return choices


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def run_uptime_seconds(figures: RunFigures, warnings: list[str]) -> tuple[float | None, str]:
    """Seconds billed: from the rig's launch (setup and build included) to the run's end.

    Without a launch time (a local rig) the run's own span is used, and said so."""
    manifest = figures.run.manifest
    records = figures.run.records
    end = _parse_time(manifest.ended_at)
    if end is None and len(records):
        end = float(records["t_end"].max())
    launch = _parse_time(manifest.rig.launch_time)
    basis = "rig launch to run end (setup and build included)"
    if launch is None:
        launch = _parse_time(manifest.created_at)
        basis = "run start to run end (no rig launch time recorded: setup and build not included)"
    if launch is None or end is None or end < launch:
        warnings.append("run duration unknown (no usable created_at/ended_at); run cost left out")
        return None, basis
    return end - launch, basis
