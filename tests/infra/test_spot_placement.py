"""Spot placement scores: zone ranking against botocore's Stubber, retry codes, and ``az: best`` in the program.

moto (5.2.5 here) does not implement GetSpotPlacementScores, so the EC2 answers are stubbed with
the shapes of the EC2 API reference on a real boto3 client.
"""

from __future__ import annotations

from datetime import UTC, datetime

import boto3
import pulumi
import pytest
from botocore.stub import ANY, Stubber

from core.errors import InfraError
from infra import placement
from infra.spot_placement import (
    SPOT_RETRY_CODES,
    ZoneOption,
    failure_scope,
    rank_zones,
    retryable_failure,
)

REGION = "us-east-1"
TYPE = "g6.xlarge"
# Zone ids differ from names per account; these deliberately do not follow the names' order.
ZONE_IDS = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2", "us-east-1d": "use1-az4"}
AT = datetime(2026, 11, 30, 3, 55, tzinfo=UTC)


@pytest.fixture
def ec2():
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    with Stubber(client) as stubber:
        client.stubber = stubber
        yield client
        stubber.assert_no_pending_responses()


def offerings(zones: list[str], token: str | None = None) -> dict:
    page: dict = {
        "InstanceTypeOfferings": [
            {"InstanceType": TYPE, "LocationType": "availability-zone", "Location": zone} for zone in zones
        ]
    }
    if token:
        page["NextToken"] = token
    return page


def availability_zones() -> dict:
    return {
        "AvailabilityZones": [
            {
                "ZoneName": name,
                "ZoneId": zone_id,
                "RegionName": REGION,
                "State": "available",
                "ZoneType": "availability-zone",
            }
            for name, zone_id in ZONE_IDS.items()
        ]
    }


def scores(by_zone: dict[str, int], token: str | None = None) -> dict:
    page: dict = {
        "SpotPlacementScores": [
            {"Region": REGION, "AvailabilityZoneId": ZONE_IDS[zone], "Score": score} for zone, score in by_zone.items()
        ]
    }
    if token:
        page["NextToken"] = token
    return page


def prices(by_zone: dict[str, str], at: datetime = AT, token: str | None = None) -> dict:
    page: dict = {
        "SpotPriceHistory": [
            {
                "AvailabilityZone": zone,
                "SpotPrice": price,
                "Timestamp": at,
                "InstanceType": TYPE,
                "ProductDescription": "Linux/UNIX",
            }
            for zone, price in by_zone.items()
        ]
    }
    if token:
        page["NextToken"] = token
    return page


OFFERING_PARAMS = {
    "LocationType": "availability-zone",
    "Filters": [{"Name": "instance-type", "Values": [TYPE]}],
}
PRICE_PARAMS = {"InstanceTypes": [TYPE], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY}


def score_params(count: int = 1) -> dict:
    return {
        "InstanceTypes": [TYPE],
        "TargetCapacity": count,
        "TargetCapacityUnitType": "units",
        "SingleAvailabilityZone": True,
        "RegionNames": [REGION],
    }


def stub_all(ec2, offered: list[str], score_by_zone: dict[str, int], price_by_zone: dict[str, str], count: int = 1):
    stubber = ec2.stubber
    stubber.add_response("describe_instance_type_offerings", offerings(offered), OFFERING_PARAMS)
    stubber.add_response("describe_availability_zones", availability_zones(), {})
    stubber.add_response("get_spot_placement_scores", scores(score_by_zone), score_params(count))
    stubber.add_response("describe_spot_price_history", prices(price_by_zone), PRICE_PARAMS)


# The cheapest zone (1b) has the lowest score: best must not put it first.
SCORES = {"us-east-1a": 9, "us-east-1b": 1, "us-east-1d": 6}
PRICES = {"us-east-1a": "0.4512", "us-east-1b": "0.3561", "us-east-1d": "0.3921"}


def test_best_orders_by_score_then_price(ec2):
    stub_all(ec2, ["us-east-1a", "us-east-1b", "us-east-1d"], SCORES, PRICES)
    ranked = rank_zones(ec2, TYPE, 1, "best")
    assert ranked == [
        ZoneOption("us-east-1a", "use1-az6", 9, 0.4512),
        ZoneOption("us-east-1d", "use1-az4", 6, 0.3921),
        ZoneOption("us-east-1b", "use1-az1", 1, 0.3561),
    ]


def test_cheapest_orders_by_price_then_score(ec2):
    stub_all(ec2, ["us-east-1a", "us-east-1b", "us-east-1d"], SCORES, PRICES)
    assert [o.zone for o in rank_zones(ec2, TYPE, by="cheapest")] == ["us-east-1b", "us-east-1d", "us-east-1a"]


def test_equal_scores_go_to_the_lower_price_and_the_count_is_asked_for(ec2):
    stub_all(ec2, ["us-east-1a", "us-east-1d"], {"us-east-1a": 7, "us-east-1d": 7}, PRICES, count=3)
    assert [o.zone for o in rank_zones(ec2, TYPE, 3)] == ["us-east-1d", "us-east-1a"]


def test_a_zone_without_a_score_or_price_comes_last_and_unoffered_zones_are_left_out(ec2):
    # 1c is scored and priced but does not offer the type; 1d offers it but has no score.
    stub_all(
        ec2,
        ["us-east-1a", "us-east-1b", "us-east-1d"],
        {"us-east-1a": 3, "us-east-1b": 2, "us-east-1c": 10},
        {"us-east-1a": "0.50", "us-east-1c": "0.10", "us-east-1d": "0.20"},
    )
    ranked = rank_zones(ec2, TYPE)
    assert [(o.zone, o.score, o.spot_usd_per_hour) for o in ranked] == [
        ("us-east-1a", 3, 0.5),
        ("us-east-1b", 2, None),
        ("us-east-1d", None, 0.2),
    ]
    # By price, the zone without a price goes last.
    stub_all(
        ec2, ["us-east-1a", "us-east-1b", "us-east-1d"], {"us-east-1b": 2}, {"us-east-1a": "0.50", "us-east-1d": "0.20"}
    )
    assert [o.zone for o in rank_zones(ec2, TYPE, by="cheapest")] == ["us-east-1d", "us-east-1a", "us-east-1b"]


def test_every_call_is_paginated_and_the_newest_price_wins(ec2):
    stubber = ec2.stubber
    stubber.add_response("describe_instance_type_offerings", offerings(["us-east-1a"], token="o2"), OFFERING_PARAMS)
    stubber.add_response(
        "describe_instance_type_offerings", offerings(["us-east-1d"]), {**OFFERING_PARAMS, "NextToken": "o2"}
    )
    stubber.add_response("describe_availability_zones", availability_zones(), {})
    stubber.add_response("get_spot_placement_scores", scores({"us-east-1a": 4}, token="s2"), score_params())
    stubber.add_response("get_spot_placement_scores", scores({"us-east-1d": 8}), {**score_params(), "NextToken": "s2"})
    older = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    first = prices({"us-east-1a": "0.41", "us-east-1d": "0.99"}, at=older, token="p2")
    first["SpotPriceHistory"][0]["Timestamp"] = AT
    stubber.add_response("describe_spot_price_history", first, PRICE_PARAMS)
    stubber.add_response(
        "describe_spot_price_history", prices({"us-east-1d": "0.38"}), {**PRICE_PARAMS, "NextToken": "p2"}
    )
    ranked = rank_zones(ec2, TYPE)
    assert [(o.zone, o.score, o.spot_usd_per_hour) for o in ranked] == [
        ("us-east-1d", 8, 0.38),
        ("us-east-1a", 4, 0.41),
    ]


def test_an_older_price_in_a_later_page_does_not_replace_the_newer(ec2):
    older = datetime(2026, 11, 30, 1, 0, tzinfo=UTC)
    stubber = ec2.stubber
    stubber.add_response("describe_instance_type_offerings", offerings(["us-east-1a"]), OFFERING_PARAMS)
    stubber.add_response("describe_availability_zones", availability_zones(), {})
    stubber.add_response("get_spot_placement_scores", scores({"us-east-1a": 5}), score_params())
    stubber.add_response("describe_spot_price_history", prices({"us-east-1a": "0.41"}, token="p2"), PRICE_PARAMS)
    stubber.add_response(
        "describe_spot_price_history", prices({"us-east-1a": "0.11"}, at=older), {**PRICE_PARAMS, "NextToken": "p2"}
    )
    [option] = rank_zones(ec2, TYPE)
    assert option.spot_usd_per_hour == 0.41


def test_no_zone_offering_the_type_names_type_and_region(ec2):
    ec2.stubber.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": []}, OFFERING_PARAMS)
    with pytest.raises(InfraError) as error:
        rank_zones(ec2, TYPE)
    assert "g6.xlarge" in str(error.value)
    assert "us-east-1" in str(error.value)


@pytest.mark.parametrize("code", ["UnauthorizedOperation", "AccessDenied"])
def test_missing_placement_score_permission_is_named(ec2, code):
    stubber = ec2.stubber
    stubber.add_response("describe_instance_type_offerings", offerings(["us-east-1a"]), OFFERING_PARAMS)
    stubber.add_response("describe_availability_zones", availability_zones(), {})
    stubber.add_client_error(
        "get_spot_placement_scores",
        service_error_code=code,
        service_message="You are not authorized to perform this operation.",
        http_status_code=403,
        expected_params=score_params(),
    )
    with pytest.raises(InfraError) as error:
        rank_zones(ec2, TYPE)
    message = str(error.value)
    assert message.startswith(f"GetSpotPlacementScores in us-east-1 refused ({code})")
    assert "lack the IAM permission ec2:GetSpotPlacementScores" in message
    assert "az: cheapest" in message


def test_another_client_error_names_the_call(ec2):
    ec2.stubber.add_client_error(
        "describe_instance_type_offerings",
        service_error_code="RequestLimitExceeded",
        service_message="Request limit exceeded.",
    )
    with pytest.raises(InfraError, match="DescribeInstanceTypeOfferings in us-east-1 refused: RequestLimitExceeded"):
        rank_zones(ec2, TYPE)


PULUMI_FAILURES = {
    "InsufficientInstanceCapacity": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 500, "
        "RequestID: 5e2c1a9f-0b7d-4c1e-9a51-2f7f3c9d1e20, api error InsufficientInstanceCapacity: We currently "
        "do not have sufficient g6.xlarge capacity in the Availability Zone you requested (us-east-1a)."
    ),
    "UnfulfillableCapacity": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 500, "
        "api error UnfulfillableCapacity: At this time there isn't enough spare capacity to fulfill your request "
        "for Spot Instances."
    ),
    "SpotMaxPriceTooLow": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
        "api error SpotMaxPriceTooLow: Your Spot request price of 0.3 is lower than the minimum required Spot request "
        "fulfillment price of 0.3921."
    ),
    "MaxSpotInstanceCountExceeded": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
        "api error MaxSpotInstanceCountExceeded: Max spot instance count exceeded"
    ),
    "VcpuLimitExceeded": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
        "api error VcpuLimitExceeded: You have requested more vCPU capacity than your current vCPU limit of 0 allows "
        "for the instance bucket that the specified instance type belongs to."
    ),
    "InstanceLimitExceeded": (
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
        "api error InstanceLimitExceeded: You have requested more instances than your current instance limit allows."
    ),
}


def pulumi_up_output(detail: str) -> str:
    return (
        "Updating (g6-xlarge):\n     Type                     Name   Status\n"
        " +   rigbench:infra:GpuRig   rig    created\n"
        " +   └─ aws:ec2:Instance     rig-instance  **creating failed**     1 error\n\n"
        "Diagnostics:\n  aws:ec2:Instance (rig-instance):\n"
        f"    error: sdk-v2/provider2.go:520: sdk.helper_schema: {detail}: provider=aws@6.83.0\n"
        "    error: 1 error occurred:\n"
    )


@pytest.mark.parametrize("code", SPOT_RETRY_CODES)
def test_retryable_failure_finds_each_code_in_pulumi_output(code):
    assert retryable_failure(pulumi_up_output(PULUMI_FAILURES[code])) == code


def test_retryable_failure_is_none_for_other_failures():
    unrelated = pulumi_up_output(
        "creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 400, "
        "api error InvalidAMIID.NotFound: The image id '[ami-0123456789abcdef0]' does not exist"
    )
    assert retryable_failure(unrelated) is None
    assert retryable_failure("") is None
    # A code must be the whole word, as the provider prints it.
    assert retryable_failure("api error insufficientinstancecapacity: lower case is not EC2's spelling") is None


def test_retryable_failure_returns_the_first_code_printed():
    text = PULUMI_FAILURES["VcpuLimitExceeded"] + "\n" + PULUMI_FAILURES["InsufficientInstanceCapacity"]
    assert retryable_failure(text) == "VcpuLimitExceeded"


@pytest.mark.parametrize(
    ("code", "scope"),
    [
        ("InsufficientInstanceCapacity", "zone"),
        ("UnfulfillableCapacity", "zone"),
        ("SpotMaxPriceTooLow", "zone"),
        ("MaxSpotInstanceCountExceeded", "type"),
        ("VcpuLimitExceeded", "type"),
        ("InstanceLimitExceeded", "type"),
    ],
)
def test_failure_scope(code, scope):
    assert failure_scope(code) == scope


def test_failure_scope_refuses_a_code_that_is_not_a_retry_code():
    with pytest.raises(ValueError, match="InvalidAMIID.NotFound"):
        failure_scope("InvalidAMIID.NotFound")


# --- az: best in the Pulumi program ---


@pytest.fixture
def best_client(monkeypatch):
    """Serve ``az: best`` from a stubbed client; records the region and profile it was made for."""
    made: list[tuple[str | None, str | None]] = []
    client = boto3.client("ec2", region_name=REGION, aws_access_key_id="testing", aws_secret_access_key="testing")
    stubber = Stubber(client)

    def make(region, profile):
        made.append((region, profile))
        return client

    monkeypatch.setattr(placement, "make_ec2_client", make)
    with stubber:
        client.stubber = stubber
        client.made = made
        yield client


def test_az_best_picks_the_highest_score_and_exports_it(run_program, base_config, best_client, monkeypatch):
    monkeypatch.setenv("AWS_REGION", REGION)
    stub_all(
        best_client,
        ["us-east-1a", "us-east-1b", "us-east-1d"],
        {"us-east-1a": 3, "us-east-1b": 2, "us-east-1d": 9},
        PRICES,
    )
    mocks, outputs = run_program({**base_config, "az": "best"})
    assert outputs["availabilityZone"] == "us-east-1d"
    assert outputs["spotPlacementScore"] == 9
    assert outputs["spotPriceAtLaunch"] == 0.3921
    assert mocks.one("aws:ec2/instance:Instance").inputs["subnetId"] == "subnet-1d"
    # The prices came with the ranking: no per-AZ price invoke.
    assert "aws:ec2/getSpotPrice:getSpotPrice" not in mocks.tokens()
    assert best_client.made == [(REGION, None)]
    best_client.stubber.assert_no_pending_responses()


def test_az_best_skips_zones_above_spot_max_price(run_program, base_config, best_client):
    stub_all(best_client, ["us-east-1a", "us-east-1b", "us-east-1d"], SCORES, PRICES)
    _, outputs = run_program({**base_config, "az": "best", "spotMaxPrice": "0.4"})
    assert outputs["availabilityZone"] == "us-east-1d"
    assert outputs["spotPlacementScore"] == 6


def test_az_best_on_demand_takes_the_first_offering_zone_without_scores(run_program, base_config, best_client):
    _, outputs = run_program({**base_config, "az": "best", "market": "on-demand"})
    assert outputs["availabilityZone"] == "us-east-1a"
    assert "spotPlacementScore" not in outputs
    assert best_client.made == []


def test_az_cheapest_exports_no_placement_score(run_program, base_config, best_client):
    _, outputs = run_program(base_config)
    assert outputs["availabilityZone"] == "us-east-1b"
    assert "spotPlacementScore" not in outputs
    assert best_client.made == []


def test_az_best_refuses_a_spot_max_price_below_every_zone(use_stack, base_config, best_client):
    from infra.program import deploy

    stub_all(best_client, ["us-east-1a", "us-east-1b", "us-east-1d"], SCORES, PRICES)
    use_stack({**base_config, "az": "best", "spotMaxPrice": "0.3"})

    @pulumi.runtime.test
    def program():
        deploy()

    cheapest = "0.3561 USD/h in us-east-1b"
    with pytest.raises(
        InfraError, match=rf"config key rigbench:spotMaxPrice: 0.3 USD/h is below the current spot price {cheapest}"
    ):
        program()


def test_the_real_client_factory_uses_the_stack_region(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    assert placement.make_ec2_client("us-west-2", None).meta.region_name == "us-west-2"


def test_the_real_client_factory_without_a_region_names_aws_region(monkeypatch, tmp_path):
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    with pytest.raises(InfraError, match="config key aws:region"):
        placement.make_ec2_client(None, None)
