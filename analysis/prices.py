"""Instance prices with their provenance: AWS APIs, a cached snapshot, a bundled snapshot.

Every price that reaches a report is a :class:`PriceQuote` carrying its source and the date it
was observed, because a $/Mtok figure is only as good as the price behind it.

- On-demand: the AWS Price List Query API (``pricing`` client; its endpoint lives in
  us-east-1) with the filters instanceType, regionCode, operatingSystem=Linux, tenancy=Shared,
  preInstalledSw=NA, capacitystatus=Used. Each PriceList entry is a JSON *string* whose
  ``terms.OnDemand.<sku.term>.priceDimensions.<dim>.pricePerUnit.USD`` is the hourly price.
- Spot: ``ec2.describe_spot_price_history`` for Linux/UNIX in the region, latest per AZ.
- ``rigbench prices fetch`` saves quotes to a cache snapshot (``$RIGBENCH_PRICE_CACHE`` or
  ``prices.json`` under the cache root, ``~/.cache/rigbench`` by default); lookups prefer the
  cache, then the bundled snapshot ``analysis/data/prices.json``, so reports work offline.
- Given: ``--usd-per-hour USD`` (``rigbench report`` and ``rigbench plan``) is an hourly price the user
  gives for a machine that is no known instance type (:func:`given_quote`). It claims no type, region or
  market (those fields are None), and the book carries it (:attr:`PriceBook.given`) to every price
  decision, so a run priced at it goes through the same quotes and choices as one priced with
  ``--price-as`` (``analysis.cost``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from core.cache import cache_root
from core.errors import AnalysisError, UsageError
from core.rundir.models import Market
from core.validation import describe_validation_error
from core.whole_files import write_whole
from core.wording import counted

PRICING_REGION = "us-east-1"
SPOT_PRODUCT = "Linux/UNIX"
SPOT_LOOKBACK = dt.timedelta(hours=6)


class PriceQuote(BaseModel):
    """An hourly price and where it came from. ``instance_type``, ``region`` and ``market`` are None only for a
    price given by hand (:func:`given_quote`), which claims none of them."""

    instance_type: str | None
    region: str | None
    market: Market | None
    availability_zone: str | None = None
    usd_per_hour: float
    source: str
    as_of: str
    note: str | None = None

    def describe(self) -> str:
        where = self.availability_zone or self.region
        named = "" if self.instance_type is None else f"{self.instance_type} {self.market} {where} "
        text = f"{named}${self.usd_per_hour:.4f}/h ({self.source}, {self.as_of})"
        return text + (f"; {self.note}" if self.note else "")


class PriceSnapshot(BaseModel):
    schema_version: Literal[1] = 1
    created_at: str
    source: str
    quotes: list[PriceQuote]


def on_demand_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return [{"Type": "TERM_MATCH", "Field": key, "Value": value} for key, value in fields.items()]


def parse_on_demand(price_list: list[str], instance_type: str, region: str) -> float:
    """The hourly USD price from GetProducts' PriceList (JSON strings, one per product)."""
    prices = set()
    for entry in price_list:
        product = json.loads(entry) if isinstance(entry, str) else entry
        for term in product.get("terms", {}).get("OnDemand", {}).values():
            for dimension in term.get("priceDimensions", {}).values():
                usd = float(dimension.get("pricePerUnit", {}).get("USD", "nan"))
                if dimension.get("unit", "Hrs") == "Hrs" and usd > 0:
                    prices.add(usd)
    if not prices:
        raise AnalysisError(
            f"the AWS price list has no on-demand Linux price for {instance_type} in {region} "
            f"({counted(len(price_list), 'product')} matched); check the instance type and region spelling"
        )
    if len(prices) > 1:
        raise AnalysisError(
            f"the AWS price list gives several on-demand prices for {instance_type} in {region}: "
            f"{sorted(prices)}; expected one with the Linux/Shared/NA/Used filters"
        )
    return prices.pop()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _aws_failure(what: str, error: Exception) -> AnalysisError:
    return AnalysisError(
        f"{what} failed ({type(error).__name__}: {error}); set AWS credentials, or price from the "
        "bundled snapshot (reports do so by default)"
    )


def fetch_on_demand(instance_type: str, region: str, client: Any = None) -> PriceQuote:
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = client or boto3.client("pricing", region_name=PRICING_REGION)
    price_list: list[str] = []
    request = {
        "ServiceCode": "AmazonEC2",
        "Filters": on_demand_filters(instance_type, region),
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    try:
        while True:
            response = client.get_products(**request)
            price_list.extend(response.get("PriceList", []))
            if not response.get("NextToken"):
                break
            request["NextToken"] = response["NextToken"]
    except (BotoCoreError, ClientError) as error:
        raise _aws_failure("the AWS Price List Query API", error) from None
    usd = parse_on_demand(price_list, instance_type, region)
    return PriceQuote(
        instance_type=instance_type,
        region=region,
        market="on-demand",
        usd_per_hour=usd,
        source="AWS Price List Query API (pricing.get_products)",
        as_of=_now().isoformat(timespec="seconds"),
    )


def fetch_spot(instance_type: str, region: str, client: Any = None, now: dt.datetime | None = None) -> list[PriceQuote]:
    """The latest spot price of each AZ of the region (Linux/UNIX)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    client = client or boto3.client("ec2", region_name=region)
    now = now or _now()
    latest: dict[str, dict] = {}
    try:
        pages = client.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=[instance_type],
            ProductDescriptions=[SPOT_PRODUCT],
            StartTime=now - SPOT_LOOKBACK,
            EndTime=now,
        )
        for page in pages:
            for item in page.get("SpotPriceHistory", []):
                zone = item["AvailabilityZone"]
                if zone not in latest or item["Timestamp"] > latest[zone]["Timestamp"]:
                    latest[zone] = item
    except (BotoCoreError, ClientError) as error:
        raise _aws_failure("ec2.describe_spot_price_history", error) from None
    if not latest:
        raise AnalysisError(
            f"no spot price history for {instance_type} ({SPOT_PRODUCT}) in {region} over the last "
            f"{SPOT_LOOKBACK}; the type may not be offered there"
        )
    return [
        PriceQuote(
            instance_type=instance_type,
            region=region,
            market="spot",
            availability_zone=zone,
            usd_per_hour=float(item["SpotPrice"]),
            source="AWS EC2 DescribeSpotPriceHistory",
            as_of=item["Timestamp"].isoformat(timespec="seconds"),
        )
        for zone, item in sorted(latest.items())
    ]


def default_cache_path() -> Path:
    configured = os.environ.get("RIGBENCH_PRICE_CACHE")
    return Path(configured) if configured else cache_root() / "prices.json"


def read_snapshot(path: Path) -> PriceSnapshot:
    try:
        return PriceSnapshot.model_validate_json(path.read_text())
    except ValidationError as error:
        raise AnalysisError(describe_validation_error(error, path) + "; delete it and fetch again") from None


def bundled_snapshot() -> PriceSnapshot:
    text = resources.files("analysis").joinpath("data/prices.json").read_text()
    return PriceSnapshot.model_validate_json(text)


def _key(quote: PriceQuote) -> tuple:
    return (quote.instance_type, quote.region, quote.market, quote.availability_zone)


def save_quotes(quotes: list[PriceQuote], path: Path | None = None) -> Path:
    """Merge quotes into the cache snapshot (a newer quote replaces the same type/region/AZ)."""
    path = path or default_cache_path()
    merged: dict[tuple, PriceQuote] = {}
    if path.exists():
        merged = {_key(q): q for q in read_snapshot(path).quotes}
    merged.update({_key(q): q for q in quotes})
    snapshot = PriceSnapshot(
        created_at=_now().isoformat(timespec="seconds"),
        source="rigbench prices fetch (AWS APIs)",
        quotes=sorted(merged.values(), key=_key_text),
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, snapshot.model_dump_json(indent=2) + "\n")
    return path


def _key_text(quote: PriceQuote) -> tuple:
    return tuple(part or "" for part in _key(quote))


GIVEN_PRICE_FLAG = "--usd-per-hour"
GIVEN_PRICE_HELP = (
    "price runs made on no known instance type (a local machine, a CPU) at this hourly price in USD, above 0: "
    "no instance type or GPU is claimed, and each figure says it is priced at the given $/h and which machine "
    "measured it (like --price-as, with your own price; a run on a known type keeps that type's price)"
)


def given_quote(usd_per_hour: float | None) -> PriceQuote | None:
    """The price given with ``--usd-per-hour``, as a quote of no instance type; None when none was given. A price
    that is not a finite number above 0 is refused in one line (UsageError, exit 2) before anything is read."""
    if usd_per_hour is None:
        return None
    if not (math.isfinite(usd_per_hour) and usd_per_hour > 0):
        raise UsageError(
            f"{GIVEN_PRICE_FLAG}: {usd_per_hour:g} is not an hourly price; give what the machine costs in USD per "
            f"hour, above 0 (e.g. {GIVEN_PRICE_FLAG} 0.50)"
        )
    return PriceQuote(
        instance_type=None,
        region=None,
        market=None,
        usd_per_hour=usd_per_hour,
        source=f"given with {GIVEN_PRICE_FLAG}",
        as_of=_now().date().isoformat(),
    )


class PriceBook:
    """Quotes in order of preference: the cache snapshot first, then the bundled one; and ``given``, the price
    given for machines that are no known instance type (``--usd-per-hour``), if one was."""

    def __init__(self, quotes: list[PriceQuote], given: PriceQuote | None = None):
        self.quotes = quotes
        self.given = given

    @classmethod
    def default(cls, cache: Path | None = None, usd_per_hour: float | None = None) -> PriceBook:
        """The cache and bundled snapshots; ``usd_per_hour``: the ``--usd-per-hour`` price, refused unless above 0
        (before any file is read)."""
        given = given_quote(usd_per_hour)
        cache = cache or default_cache_path()
        quotes = read_snapshot(cache).quotes if cache.exists() else []
        return cls(quotes + bundled_snapshot().quotes, given)

    def find(self, instance_type: str, region: str, market: Market, zone: str | None = None) -> PriceQuote | None:
        """The AZ's own quote when asked and known; otherwise the highest quote of the
        first snapshot that has the type and region (a conservative price, noted as such)."""
        matches = [q for q in self.quotes if (q.instance_type, q.region, q.market) == (instance_type, region, market)]
        if not matches:
            return None
        if zone is not None:
            exact = [q for q in matches if q.availability_zone == zone]
            if exact:
                return exact[0]
        first_source = [q for q in matches if q.source == matches[0].source]
        highest = max(first_source, key=lambda q: q.usd_per_hour)
        if len(first_source) > 1:
            note = f"highest of {len(first_source)} quotes for {region}" + (f"; {highest.note}" if highest.note else "")
            return highest.model_copy(update={"note": note})
        return highest
