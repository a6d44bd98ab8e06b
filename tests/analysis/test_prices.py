"""Prices: the Price List Query API parsed on AWS's documented response shape (botocore
Stubber, since moto has no pricing backend), spot history from a real moto server on
loopback, and the cached and bundled snapshots."""

from __future__ import annotations

import datetime as dt
import json

import boto3
import pytest
from botocore.stub import Stubber

from analysis.prices import (
    PriceBook,
    bundled_snapshot,
    fetch_on_demand,
    fetch_spot,
    on_demand_filters,
    parse_on_demand,
    read_snapshot,
    save_quotes,
)
from core.errors import AnalysisError
from core.instance_types import INSTANCE_TYPES


def product(sku: str, usd: str, instance_type: str = "g6.xlarge") -> str:
    """One PriceList entry as the API returns it: a JSON *string* (shape from AWS's docs)."""
    term = f"{sku}.JRTCKXETXF"
    return json.dumps(
        {
            "product": {
                "productFamily": "Compute Instance",
                "attributes": {
                    "instanceType": instance_type,
                    "regionCode": "us-east-1",
                    "operatingSystem": "Linux",
                    "tenancy": "Shared",
                    "preInstalledSw": "NA",
                    "capacitystatus": "Used",
                },
                "sku": sku,
            },
            "serviceCode": "AmazonEC2",
            "terms": {
                "OnDemand": {
                    term: {
                        "priceDimensions": {
                            f"{term}.6YS6EN2CT7": {
                                "unit": "Hrs",
                                "endRange": "Inf",
                                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour",
                                "appliesTo": [],
                                "rateCode": f"{term}.6YS6EN2CT7",
                                "beginRange": "0",
                                "pricePerUnit": {"USD": usd},
                            }
                        },
                        "sku": sku,
                        "effectiveDate": "2026-11-01T00:00:00Z",
                        "offerTermCode": "JRTCKXETXF",
                        "termAttributes": {},
                    }
                },
                "Reserved": {},
            },
            "version": "20261101000000",
            "publicationDate": "2026-11-01T00:00:00Z",
        }
    )


def pricing_client():
    return boto3.client(
        "pricing", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


def test_on_demand_price_is_parsed_across_pages_with_the_documented_filters():
    client = pricing_client()
    request = {
        "ServiceCode": "AmazonEC2",
        "Filters": on_demand_filters("g6.xlarge", "us-east-1"),
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
    }
    with Stubber(client) as stub:
        stub.add_response("get_products", {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "t1"}, request)
        stub.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": [product("SKU1", "0.8048000000")]},
            {**request, "NextToken": "t1"},
        )
        quote = fetch_on_demand("g6.xlarge", "us-east-1", client=client)
        stub.assert_no_pending_responses()
    assert quote.usd_per_hour == 0.8048
    assert quote.market == "on-demand"
    assert "Price List Query API" in quote.source
    fields = {f["Field"]: f["Value"] for f in request["Filters"]}
    assert fields == {
        "instanceType": "g6.xlarge",
        "regionCode": "us-east-1",
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }


def test_no_product_or_several_prices_are_clear_errors():
    with pytest.raises(AnalysisError, match="no on-demand Linux price for g9.huge"):
        parse_on_demand([], "g9.huge", "us-east-1")
    with pytest.raises(AnalysisError, match="several on-demand prices"):
        parse_on_demand([product("A", "0.8048"), product("B", "0.9")], "g6.xlarge", "us-east-1")
    # a zero-priced dimension (e.g. a reservation fee line) is not a price
    assert parse_on_demand([product("A", "0.0000000000"), product("B", "0.9")], "g6.xlarge", "us-east-1") == 0.9


def test_api_failure_says_what_to_do():
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error("get_products", "AccessDeniedException", "not allowed")
        with pytest.raises(AnalysisError, match="AccessDeniedException.*bundled snapshot"):
            fetch_on_demand("g6.xlarge", "us-east-1", client=client)


def test_spot_keeps_the_latest_price_per_zone():
    client = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    now = dt.datetime(2027, 1, 15, 12, tzinfo=dt.UTC)
    history = [
        ("us-east-1a", "0.3100", now - dt.timedelta(hours=2)),
        ("us-east-1a", "0.3300", now - dt.timedelta(hours=1)),
        ("us-east-1d", "0.4200", now - dt.timedelta(hours=3)),
    ]
    response = {
        "SpotPriceHistory": [
            {
                "AvailabilityZone": zone,
                "InstanceType": "g6.xlarge",
                "ProductDescription": "Linux/UNIX",
                "SpotPrice": price,
                "Timestamp": stamp,
            }
            for zone, price, stamp in history
        ]
    }
    with Stubber(client) as stub:
        stub.add_response(
            "describe_spot_price_history",
            response,
            {
                "InstanceTypes": ["g6.xlarge"],
                "ProductDescriptions": ["Linux/UNIX"],
                "StartTime": now - dt.timedelta(hours=6),
                "EndTime": now,
            },
        )
        quotes = fetch_spot("g6.xlarge", "us-east-1", client=client, now=now)
    assert [(q.availability_zone, q.usd_per_hour) for q in quotes] == [("us-east-1a", 0.33), ("us-east-1d", 0.42)]
    assert quotes[0].as_of == "2027-01-15T11:00:00+00:00"


@pytest.mark.integration
def test_spot_history_from_a_moto_server_on_loopback(monkeypatch):
    from moto.server import ThreadedMotoServer  # optional: the test extra, integration only

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        client = boto3.client("ec2", region_name="us-east-1", endpoint_url=f"http://{host}:{port}")
        quotes = fetch_spot("g6.xlarge", "us-east-1", client=client)
        with pytest.raises(AnalysisError, match="no spot price history for g9.nothing"):
            fetch_spot("g9.nothing", "us-east-1", client=client)
    finally:
        server.stop()
    zones = [q.availability_zone for q in quotes]
    assert zones and zones == sorted(set(zones))
    assert all(z.startswith("us-east-1") for z in zones)
    assert all(
        q.market == "spot" and q.usd_per_hour > 0 and q.source.endswith("DescribeSpotPriceHistory") for q in quotes
    )


def test_cache_snapshot_round_trip_and_preference_over_bundled(tmp_path):
    cache = tmp_path / "prices.json"
    fresh = bundled_snapshot().quotes[0].model_copy(update={"usd_per_hour": 0.7, "source": "test fetch"})
    save_quotes([fresh], cache)
    save_quotes([fresh.model_copy(update={"usd_per_hour": 0.75})], cache)  # replaces, not duplicates
    snapshot = read_snapshot(cache)
    assert [q.usd_per_hour for q in snapshot.quotes] == [0.75]
    book = PriceBook.default(cache)
    assert book.find(fresh.instance_type, fresh.region, "on-demand").usd_per_hour == 0.75


def test_damaged_cache_is_a_clear_error(tmp_path):
    cache = tmp_path / "prices.json"
    cache.write_text('{"created_at": 1}')
    with pytest.raises(AnalysisError, match="delete it and fetch again"):
        read_snapshot(cache)


def test_bundled_snapshot_carries_design_figures_with_sources():
    book = PriceBook(bundled_snapshot().quotes)
    assert book.find("g6.xlarge", "us-east-1", "on-demand").usd_per_hour == 0.8048
    assert book.find("g6e.2xlarge", "us-west-2", "on-demand").usd_per_hour == 2.24208
    spot = book.find("g6.2xlarge", "us-east-1", "spot", "us-east-1d")
    assert spot.usd_per_hour == 0.8393 and spot.as_of.startswith("2026-10")
    assert all(q.source and q.as_of for q in book.quotes)


def test_the_instance_table_and_the_bundled_snapshot_agree_on_every_known_on_demand_price():
    """Two places hold the us-east-1 on-demand price (infra's estimate reads the table, reports the
    snapshot): they must not drift apart. Every known type has one, the H200's P type included."""
    book = PriceBook(bundled_snapshot().quotes)
    for name, row in INSTANCE_TYPES.items():
        quote = book.find(name, "us-east-1", "on-demand")
        assert quote is not None and row.on_demand_usd_per_hour == quote.usd_per_hour, name
    p5en = book.find("p5en.48xlarge", "us-east-1", "on-demand")
    assert "AWS Price List, on-demand, us-east-1" in p5en.source and "2025" in p5en.as_of
