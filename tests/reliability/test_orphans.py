"""``rigbench orphans`` against moto's EC2 server on 127.0.0.1: what is found, what is ended, what is left alone."""

from __future__ import annotations

import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import httpx
import pytest
from typer.testing import CliRunner

from core.errors import InfraError
from infra.orphans import (
    EXPIRES_AT_TAG,
    PROJECT_TAG,
    STACK_TAG,
    Orphan,
    RigInstance,
    check_regions,
    default_client_factory,
    find_orphans,
    orphan_reasons,
    pulumi_stack_names,
    terminate_orphans,
)
from infra.program import rig_tags
from infra.stack_config import RigConfig
from rigbench.cli import app

NOW = datetime(2026, 11, 30, 4, 0, 0, tzinfo=UTC)
IN_1H = (NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
IMAGE = "ami-12c6146b"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def instance(**tags: str) -> RigInstance:
    return RigInstance("us-east-1", "i-0abc", "g6.xlarge", "running", None, {PROJECT_TAG: "rigbench", **tags})


def test_tag_keys_are_the_ones_the_pulumi_program_writes():
    config = RigConfig(allowedCidrs=["203.0.113.0/24"], owner="tester", publicKeyPath="~/.ssh/id_ed25519.pub")
    tags = rig_tags(config, "dev", NOW)
    assert tags[PROJECT_TAG] == "rigbench"
    assert tags[STACK_TAG] == "dev"
    parsed = instance(**{EXPIRES_AT_TAG: tags[EXPIRES_AT_TAG]}).expires_at
    assert parsed == NOW + timedelta(hours=config.ttl_hours)


@pytest.mark.parametrize(
    ("tags", "known", "expected"),
    [
        ({EXPIRES_AT_TAG: IN_1H, STACK_TAG: "dev"}, {"dev"}, []),
        (
            {EXPIRES_AT_TAG: stamp(NOW - timedelta(hours=2, minutes=5)), STACK_TAG: "dev"},
            {"dev"},
            ["TTL ended 2 h 5 min ago"],
        ),
        ({EXPIRES_AT_TAG: stamp(NOW - timedelta(minutes=7)), STACK_TAG: "dev"}, None, ["TTL ended 7 min ago"]),
        ({EXPIRES_AT_TAG: IN_1H, STACK_TAG: "old"}, {"dev"}, ["stack 'old' is gone"]),
        ({EXPIRES_AT_TAG: IN_1H, STACK_TAG: "old"}, None, []),
        ({EXPIRES_AT_TAG: IN_1H}, {"dev"}, ["no stack tag"]),
        ({STACK_TAG: "dev"}, {"dev"}, ["rigbench:expires-at tag missing"]),
        (
            {EXPIRES_AT_TAG: "tomorrow", STACK_TAG: "dev"},
            {"dev"},
            ["rigbench:expires-at tag 'tomorrow' is not a UTC time"],
        ),
        (
            {EXPIRES_AT_TAG: stamp(NOW - timedelta(hours=3)), STACK_TAG: "old"},
            set(),
            ["TTL ended 3 h 0 min ago", "stack 'old' is gone"],
        ),
    ],
)
def test_orphan_reasons(tags, known, expected):
    assert orphan_reasons(instance(**tags), NOW, known) == expected


@pytest.mark.parametrize(
    ("regions", "message"),
    [
        ([], "no region named; pass --region us-east-1"),
        (["us-east-1", "useast1"], "'useast1' is not an AWS region name such as 'us-east-1'; check --region"),
        (["us-east-1a"], "'us-east-1a' is not an AWS region name"),
    ],
)
def test_bad_regions_are_refused(regions, message):
    with pytest.raises(InfraError, match=message):
        check_regions(regions)


def test_regions_deduplicated_in_order():
    assert check_regions(["us-west-2", " us-east-1", "us-west-2"]) == ["us-west-2", "us-east-1"]


def fake_pulumi(folder: Path, body: str) -> None:
    script = folder / "pulumi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)


def test_stack_names_from_the_pulumi_cli(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, """echo '[{"name": "dev", "current": true}, {"name": "acme/rigbench/g6-xlarge"}]'""")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert pulumi_stack_names(tmp_path) == {"dev", "g6-xlarge"}


def test_failing_pulumi_cli_says_what_to_do(tmp_path, monkeypatch):
    fake_pulumi(tmp_path, "echo 'error: PULUMI_ACCESS_TOKEN must be set' >&2; exit 255")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    with pytest.raises(InfraError, match=r"PULUMI_ACCESS_TOKEN must be set; log in .* or pass --known-stacks a,b"):
        pulumi_stack_names(tmp_path)


def test_missing_pulumi_cli_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="pulumi CLI is not on PATH"):
        pulumi_stack_names(tmp_path)


@pytest.fixture
def ec2_endpoint(monkeypatch):
    from moto.server import ThreadedMotoServer

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(key, "testing")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    httpx.post(f"{endpoint}/moto-api/reset").raise_for_status()  # moto keeps state per process, not per server
    try:
        yield endpoint
    finally:
        server.stop()


def launch(endpoint: str, region: str, tags: dict[str, str]) -> str:
    client = boto3.client("ec2", region_name=region, endpoint_url=endpoint)
    spec = [{"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}] if tags else []
    answer = client.run_instances(
        ImageId=IMAGE, InstanceType="g6.xlarge", MinCount=1, MaxCount=1, TagSpecifications=spec
    )
    return answer["Instances"][0]["InstanceId"]


def states(endpoint: str, region: str) -> dict[str, str]:
    client = boto3.client("ec2", region_name=region, endpoint_url=endpoint)
    return {
        item["InstanceId"]: item["State"]["Name"]
        for page in client.get_paginator("describe_instances").paginate()
        for reservation in page["Reservations"]
        for item in reservation["Instances"]
    }


@pytest.fixture
def fleet(ec2_endpoint):
    """Instances in two regions: two expired, one of a gone stack, and four that must be left alone."""
    now = datetime.now(UTC)
    past, future = stamp(now - timedelta(hours=3)), stamp(now + timedelta(hours=5))
    rig = {PROJECT_TAG: "rigbench", "owner": "tester"}
    ids = {
        "expired": launch(ec2_endpoint, "us-east-1", {**rig, STACK_TAG: "dev", EXPIRES_AT_TAG: past}),
        "gone": launch(ec2_endpoint, "us-east-1", {**rig, STACK_TAG: "old", EXPIRES_AT_TAG: future}),
        "healthy": launch(ec2_endpoint, "us-east-1", {**rig, STACK_TAG: "dev", EXPIRES_AT_TAG: future}),
        "untagged": launch(ec2_endpoint, "us-east-1", {}),
        "other-project": launch(ec2_endpoint, "us-east-1", {PROJECT_TAG: "web", EXPIRES_AT_TAG: past}),
        "west-expired": launch(ec2_endpoint, "us-west-2", {**rig, STACK_TAG: "dev", EXPIRES_AT_TAG: past}),
        "unnamed-region": launch(ec2_endpoint, "eu-west-1", {**rig, STACK_TAG: "old", EXPIRES_AT_TAG: past}),
    }
    return ec2_endpoint, ids


@pytest.mark.integration
def test_find_orphans_in_every_named_region(fleet):
    endpoint, ids = fleet
    found = find_orphans(["us-east-1", "us-west-2"], default_client_factory(endpoint), {"dev"})
    by_id = {orphan.instance.instance_id: orphan for orphan in found}
    assert set(by_id) == {ids["expired"], ids["gone"], ids["west-expired"]}
    assert by_id[ids["expired"]].reasons[0] in ("TTL ended 2 h 59 min ago", "TTL ended 3 h 0 min ago")
    assert by_id[ids["gone"]].reasons == ["stack 'old' is gone"]
    assert by_id[ids["west-expired"]].instance.region == "us-west-2"
    assert by_id[ids["gone"]].instance.owner == "tester"

    ttl_only = find_orphans(["us-east-1"], default_client_factory(endpoint), None)
    assert [o.instance.instance_id for o in ttl_only] == [ids["expired"]]


@pytest.mark.integration
def test_cli_lists_then_terminates_only_after_confirmation(fleet):
    endpoint, ids = fleet
    runner = CliRunner()
    base = ["cloud", "orphans", "-r", "us-east-1", "-r", "us-west-2", "--known-stacks", "dev",
            "--endpoint-url", endpoint]

    listed = runner.invoke(app, base)
    assert listed.exit_code == 0, listed.output
    for name in ("expired", "gone", "west-expired"):
        assert ids[name] in listed.output
    for name in ("healthy", "untagged", "other-project", "unnamed-region"):
        assert ids[name] not in listed.output
    assert "3 orphaned rigbench instances in us-east-1, us-west-2" in listed.output
    assert "stack 'old' is gone" in listed.output
    assert set(states(endpoint, "us-east-1").values()) == {"running"}

    declined = runner.invoke(app, [*base, "--terminate"], input="n\n")
    assert declined.exit_code == 1
    assert "nothing terminated" in declined.output
    assert set(states(endpoint, "us-east-1").values()) == {"running"}

    accepted = runner.invoke(app, [*base, "--terminate"], input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "terminated 3 instances" in accepted.output
    east, west = states(endpoint, "us-east-1"), states(endpoint, "us-west-2")
    for name in ("expired", "gone"):
        assert east[ids[name]] in ("shutting-down", "terminated")
    assert west[ids["west-expired"]] in ("shutting-down", "terminated")
    for name in ("healthy", "untagged", "other-project"):
        assert east[ids[name]] == "running"
    assert states(endpoint, "eu-west-1")[ids["unnamed-region"]] == "running"

    again = runner.invoke(app, base)
    assert again.exit_code == 0
    assert "no orphaned rigbench instances in us-east-1, us-west-2" in again.output


@pytest.mark.integration
def test_cli_yes_skips_the_question_and_ttl_only_mode(fleet):
    endpoint, ids = fleet
    result = CliRunner().invoke(
        app, ["cloud", "orphans", "-r", "us-west-2", "--skip-stack-check", "--terminate", "--yes",
              "--endpoint-url", endpoint]
    )
    assert result.exit_code == 0, result.output
    assert "(TTL check only)" in result.output
    assert f"terminated 1 instance: {ids['west-expired']}" in result.output


@pytest.mark.integration
def test_refused_call_gives_one_clear_error(ec2_endpoint):
    ghost = Orphan(RigInstance("us-east-1", "i-0123456789abcdef0", "g6.xlarge", "running", None, {}), ["test"])
    with pytest.raises(InfraError, match=r"TerminateInstances in us-east-1 refused: InvalidInstanceID.NotFound"):
        terminate_orphans([ghost], default_client_factory(ec2_endpoint))
