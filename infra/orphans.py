"""Find (and end) rigbench instances that outlived their purpose: the cost safety net.

A rig is supposed to end two ways: ``pulumi destroy``, or the TTL guard on the instance halting
it at its deadline. Either can fail (a laptop closed mid-destroy, a stack removed with
``pulumi stack rm --force``, a guard that never ran), and a GPU instance then bills by the hour
with nobody looking. This module looks from the outside, with the tags the Pulumi program puts
on every resource (``infra/program.py``'s ``rig_tags``):

- ``project=rigbench``            marks the instance as ours (the only filter sent to EC2),
- ``stack=<name>``                the Pulumi stack that owns it,
- ``rigbench:expires-at=<UTC>``   when its TTL ends (fixed at creation).

An instance is an orphan when it is still alive (pending, running, stopping or stopped: a
stopped one still bills its volumes) and either its TTL has passed, its expiry tag is missing
or unreadable, or its stack is not among the stacks that exist. Instances without the project
tag are never looked at, so nothing else in the account can be touched.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.errors import InfraError
from infra.ec2_calls import ec2_call
from infra.stack_config import PROJECT

PROJECT_TAG = "project"
STACK_TAG = "stack"
OWNER_TAG = "owner"
EXPIRES_AT_TAG = "rigbench:expires-at"
EXPIRES_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
# Stopped instances still bill their EBS volumes; terminated ones are gone.
LIVE_STATES = ("pending", "running", "stopping", "stopped")
REGION_PATTERN = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+$")

Ec2ClientFactory = Callable[[str], Any]


@dataclass(frozen=True)
class RigInstance:
    """One live EC2 instance carrying rigbench's project tag."""

    region: str
    instance_id: str
    instance_type: str
    state: str
    launch_time: datetime | None
    tags: dict[str, str]

    @property
    def stack(self) -> str | None:
        return self.tags.get(STACK_TAG)

    @property
    def owner(self) -> str | None:
        return self.tags.get(OWNER_TAG)

    @property
    def expires_at(self) -> datetime | None:
        """The expiry tag as a UTC time; None when missing or not in the program's format."""
        text = self.tags.get(EXPIRES_AT_TAG)
        if not text:
            return None
        try:
            return datetime.strptime(text, EXPIRES_AT_FORMAT).replace(tzinfo=UTC)
        except ValueError:
            return None


@dataclass(frozen=True)
class Orphan:
    instance: RigInstance
    reasons: list[str] = field(default_factory=list)


def check_regions(regions: Iterable[str]) -> list[str]:
    """The named regions, deduplicated in order; refuses none or a malformed name."""
    named = list(dict.fromkeys(r.strip() for r in regions if r.strip()))
    if not named:
        raise InfraError("no region named; pass --region us-east-1 (repeat it for every region your rigs may be in)")
    for region in named:
        if not REGION_PATTERN.match(region):
            raise InfraError(f"{region!r} is not an AWS region name such as 'us-east-1'; check --region")
    return named


def default_client_factory(endpoint_url: str | None = None) -> Ec2ClientFactory:
    """EC2 clients per region, from the user's usual AWS credentials (or a compatible endpoint)."""
    import boto3

    def make(region: str) -> Any:
        return boto3.client("ec2", region_name=region, endpoint_url=endpoint_url)

    return make


def _aws_call(region: str, action: str, call: Callable[[], Any]) -> Any:
    return ec2_call(region, action, call, f"ec2:{action}")


def list_rig_instances(region: str, client: Any) -> list[RigInstance]:
    """Live instances in one region with ``project=rigbench``; nothing else is returned."""
    filters = [
        {"Name": f"tag:{PROJECT_TAG}", "Values": [PROJECT]},
        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
    ]

    def describe() -> list[RigInstance]:
        found = []
        for page in client.get_paginator("describe_instances").paginate(Filters=filters):
            for reservation in page.get("Reservations", []):
                for item in reservation.get("Instances", []):
                    found.append(
                        RigInstance(
                            region=region,
                            instance_id=item["InstanceId"],
                            instance_type=item.get("InstanceType", "?"),
                            state=item.get("State", {}).get("Name", "?"),
                            launch_time=item.get("LaunchTime"),
                            tags={t["Key"]: t["Value"] for t in item.get("Tags", [])},
                        )
                    )
        return found

    return _aws_call(region, "DescribeInstances", describe)


def orphan_reasons(instance: RigInstance, now: datetime, known_stacks: set[str] | None) -> list[str]:
    """Why this instance should not be alive; empty when it is within its TTL and its stack exists."""
    reasons = []
    expires_at = instance.expires_at
    if expires_at is None:
        found = instance.tags.get(EXPIRES_AT_TAG)
        reasons.append(
            f"{EXPIRES_AT_TAG} tag missing" if found is None else f"{EXPIRES_AT_TAG} tag {found!r} is not a UTC time"
        )
    elif expires_at <= now:
        reasons.append(f"TTL ended {_duration(now - expires_at)} ago")
    if known_stacks is not None:
        if instance.stack is None:
            reasons.append(f"no {STACK_TAG} tag")
        elif instance.stack not in known_stacks:
            reasons.append(f"stack {instance.stack!r} is gone")
    return reasons


def find_orphans(
    regions: Iterable[str],
    client_factory: Ec2ClientFactory,
    known_stacks: set[str] | None,
    now: datetime | None = None,
) -> list[Orphan]:
    """Orphans in every named region; ``known_stacks=None`` skips the stack check (TTL only)."""
    now = now or datetime.now(UTC)
    orphans = []
    for region in check_regions(regions):
        for instance in list_rig_instances(region, client_factory(region)):
            reasons = orphan_reasons(instance, now, known_stacks)
            if reasons:
                orphans.append(Orphan(instance, reasons))
    return orphans


def terminate_orphans(orphans: Iterable[Orphan], client_factory: Ec2ClientFactory) -> list[str]:
    """Terminate the orphans, one call per region; returns the ids EC2 accepted."""
    by_region: dict[str, list[str]] = {}
    for orphan in orphans:
        by_region.setdefault(orphan.instance.region, []).append(orphan.instance.instance_id)
    ended = []
    for region, ids in by_region.items():
        client = client_factory(region)
        answer = _aws_call(region, "TerminateInstances", lambda c=client, i=ids: c.terminate_instances(InstanceIds=i))
        ended.extend(item["InstanceId"] for item in answer.get("TerminatingInstances", []))
    return ended


def pulumi_stack_names(project_dir: Path, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> set[str]:
    """Stack names of this project from ``pulumi stack ls --json`` (org/project prefixes dropped)."""
    binary = shutil.which("pulumi")
    if binary is None:
        raise InfraError(
            "the pulumi CLI is not on PATH, so the stacks that exist are unknown; pass --known-stacks a,b "
            "or --skip-stack-check (TTL check only)"
        )
    try:
        result = run(
            [binary, "stack", "ls", "--json"], cwd=project_dir, capture_output=True, text=True, timeout=60, check=False
        )
    except subprocess.TimeoutExpired:
        raise InfraError("`pulumi stack ls --json` took over 60 s; pass --known-stacks a,b instead") from None
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise InfraError(
            f"`pulumi stack ls --json` failed in {project_dir}: {detail[-1] if detail else 'no output'}; "
            "log in (`pulumi login`) or pass --known-stacks a,b"
        )
    try:
        stacks = json.loads(result.stdout)
        return {str(entry["name"]).rsplit("/", 1)[-1] for entry in stacks}
    except (json.JSONDecodeError, TypeError, KeyError):
        raise InfraError(
            "`pulumi stack ls --json` printed something other than a list of stacks; pass --known-stacks a,b"
        ) from None


def orphan_rows(orphans: Iterable[Orphan]) -> list[list[str]]:
    """Table rows: region, instance, type, state, stack, owner, expires at, why."""
    rows = []
    for orphan in orphans:
        instance = orphan.instance
        rows.append(
            [
                instance.region,
                instance.instance_id,
                instance.instance_type,
                instance.state,
                instance.stack or "-",
                instance.owner or "-",
                instance.tags.get(EXPIRES_AT_TAG, "-"),
                "; ".join(orphan.reasons),
            ]
        )
    return rows


def _duration(delta: Any) -> str:
    minutes = int(delta.total_seconds() // 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"
