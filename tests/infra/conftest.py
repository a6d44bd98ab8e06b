"""Pulumi mocks for the infra tests: a fake engine and fake AWS look-ups, nothing else.

The Pulumi CLI and the AWS provider plugin cannot run here, so the program runs against
``pulumi.runtime.set_mocks``: ``call()`` answers the invokes the program makes (offerings, spot
prices, default VPC and subnets, the DLAMI SSM parameter, the instance's launch time) and
``new_resource()`` records every resource with its inputs.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pulumi
import pytest
from pulumi.runtime.mocks import MockMonitor

PROJECT = "rigbench"
STACK = "test-stack"
AMI_FROM_SSM = "ami-0d1a2b3c4d5e6f789"
LAUNCH_TIME = "2026-11-30T04:00:00Z"
PUBLIC_IP = "198.51.100.23"
# The program's clock in tests, so the expiry tag is exact.
NOW = datetime(2026, 11, 30, 4, 0, 0, tzinfo=UTC)


def make_public_key(key_type: str = "ssh-ed25519", comment: str = "tester@laptop") -> str:
    """A well-formed OpenSSH public key line (random key bytes; only the format matters here)."""
    name = key_type.encode()
    blob = struct.pack(">I", len(name)) + name + struct.pack(">I", 32) + bytes(range(32))
    return f"{key_type} {base64.b64encode(blob).decode()} {comment}"


@dataclass
class RigMocks(pulumi.runtime.Mocks):
    """Fake AWS: which AZs offer the type, the spot price per AZ, one default subnet per AZ."""

    offered: list[str] = field(default_factory=lambda: ["us-east-1a", "us-east-1b", "us-east-1d"])
    spot_prices: dict[str, float] = field(
        default_factory=lambda: {"us-east-1a": 0.4512, "us-east-1b": 0.3921, "us-east-1d": 0.8393}
    )
    ami_value: str = AMI_FROM_SSM
    subnetless_azs: set[str] = field(default_factory=set)
    calls: list[tuple[str, dict]] = field(default_factory=list)
    resources: list[pulumi.runtime.MockResourceArgs] = field(default_factory=list)

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        self.calls.append((args.token, dict(args.args)))
        a = args.args
        if args.token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted = a["filters"][0]["values"][0]
            return {
                "id": "us-east-1",
                "instanceTypes": [wanted] * len(self.offered),
                "locations": list(self.offered),
                "locationTypes": ["availability-zone"] * len(self.offered),
            }
        if args.token == "aws:ec2/getSpotPrice:getSpotPrice":
            az = a["availabilityZone"]
            price = self.spot_prices.get(az)
            return {
                "id": f"{az}-price",
                "availabilityZone": az,
                "instanceType": a["instanceType"],
                "spotPrice": "" if price is None else f"{price}",
                "spotPriceTimestamp": "2026-11-30T03:55:00Z",
            }
        if args.token == "aws:ec2/getVpc:getVpc":
            return {"id": "vpc-0default", "default": True, "cidrBlock": "172.31.0.0/16"}
        if args.token == "aws:ec2/getSubnets:getSubnets":
            az = next(f["values"][0] for f in a["filters"] if f["name"] == "availability-zone")
            ids = [] if az in self.subnetless_azs else [f"subnet-{az[-2:]}"]
            return {"id": "us-east-1", "ids": ids}
        if args.token == "aws:ssm/getParameter:getParameter":
            return {"id": a["name"], "name": a["name"], "type": "String", "value": self.ami_value}
        if args.token == "aws:ec2/getInstance:getInstance":
            return {"id": a.get("instanceId"), "instanceId": a.get("instanceId"), "launchTime": LAUNCH_TIME}
        raise AssertionError(f"the program made an invoke the mocks do not know: {args.token}")

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        self.resources.append(args)
        state: dict[str, Any] = dict(args.inputs)
        if args.typ == "aws:ec2/instance:Instance":
            state.update(publicIp=PUBLIC_IP, publicDns="ec2-198-51-100-23.compute-1.amazonaws.com")
        if args.typ == "aws:ec2/keyPair:KeyPair":
            state.setdefault("keyName", f"{args.name}-8f2a")
        return f"{args.name}-id", state

    def of_type(self, typ: str) -> list[pulumi.runtime.MockResourceArgs]:
        return [r for r in self.resources if r.typ == typ]

    def one(self, typ: str) -> pulumi.runtime.MockResourceArgs:
        found = self.of_type(typ)
        assert len(found) == 1, f"expected one {typ}, found {[r.name for r in found]}"
        return found[0]

    def tokens(self) -> list[str]:
        return [token for token, _ in self.calls]

    def urns(self) -> list[str]:
        """URNs of everything registered (they show each resource's parent chain)."""
        return list(self.monitor.get_registered_resources())

    monitor: MockMonitor | None = None


@pytest.fixture
def public_key_file(tmp_path: Path) -> Path:
    path = tmp_path / "id_ed25519.pub"
    path.write_text(make_public_key() + "\n")
    return path


@pytest.fixture
def base_config(public_key_file: Path) -> dict[str, str]:
    """The smallest valid stack config (keys without the project prefix)."""
    return {
        "owner": "tester",
        "publicKeyPath": str(public_key_file),
        "allowedCidrs": '["203.0.113.7/32"]',
    }


@pytest.fixture
def use_stack():
    """Install mocks and a stack config; returns the mocks. Call it once per test."""

    def install(config: dict[str, str], mocks: RigMocks | None = None, preview: bool = False) -> RigMocks:
        mocks = mocks or RigMocks()
        mocks.monitor = MockMonitor(mocks)
        pulumi.runtime.set_mocks(mocks, project=PROJECT, stack=STACK, preview=preview, monitor=mocks.monitor)
        pulumi.runtime.set_all_config({f"{PROJECT}:{key}": value for key, value in config.items()})
        return mocks

    yield install
    pulumi.runtime.set_all_config({})


@pytest.fixture
def run_program(use_stack) -> Callable[..., tuple[RigMocks, dict[str, Any]]]:
    """Run infra.program.deploy() under mocks with ``config``; return the mocks and the resolved outputs."""
    from infra.program import deploy

    def run(
        config: dict[str, str], mocks: RigMocks | None = None, preview: bool = False
    ) -> tuple[RigMocks, dict[str, Any]]:
        mocks = use_stack(config, mocks, preview)
        resolved: dict[str, Any] = {}

        @pulumi.runtime.test
        def program():
            outputs = deploy(now=NOW)
            return pulumi.Output.all(**outputs).apply(resolved.update)

        program()
        return mocks, resolved

    return run


@pytest.fixture
def fake() -> SimpleNamespace:
    """The fakes' constants and classes (test modules cannot import conftest in importlib mode)."""
    return SimpleNamespace(
        RigMocks=RigMocks,
        AMI_FROM_SSM=AMI_FROM_SSM,
        LAUNCH_TIME=LAUNCH_TIME,
        PUBLIC_IP=PUBLIC_IP,
        STACK=STACK,
        make_public_key=make_public_key,
    )
