"""The stacks a cloud loop drives: that they exist, what they ask for, and the config of each attempt.

An attempt in another zone, type or market must not edit the user's ``Pulumi.<stack>.yaml``:
the loop writes a copy with the changed keys into the rig's folder and runs ``pulumi up
--config-file`` on it (secrets stay encrypted as they were, the salt is copied with them), so
the record keeps the exact config every attempt ran with and the user's file is untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from core.errors import CloudError
from core.pulumi_cli import pulumi_json
from core.whole_files import write_whole
from infra.stack_config import PROJECT

REGION_KEY = "aws:region"


def key(name: str) -> str:
    return f"{PROJECT}:{name}"


@dataclass(frozen=True)
class StackSettings:
    """What a stack's config asks for, as far as the loop plans with it."""

    stack: str
    config_file: Path
    instance_type: str
    market: str
    az: str
    region: str | None
    ttl_hours: int
    spot_max_price: float | None
    private_key: str | None
    build_cache_bucket: str | None


def known_stacks(project: Path) -> list[str]:
    listed = pulumi_json(["stack", "ls", "--json"], CloudError, cwd=project)
    if not isinstance(listed, list):
        raise CloudError("`pulumi stack ls --json` did not print a list")
    return sorted(str(entry.get("name", "")).split("/")[-1] for entry in listed if isinstance(entry, dict))


def check_stacks(stacks: list[str], project: Path) -> None:
    """Refuse repeated or unknown stacks before anything is created."""
    if not stacks:
        raise CloudError("--stack: none given; name at least one stack, e.g. --stack g6-xlarge")
    repeated = sorted({name for name in stacks if stacks.count(name) > 1})
    if repeated:
        raise CloudError(f"--stack: {', '.join(repeated)} given twice; each stack is one rig, name it once "
                         "(make a second stack with `pulumi stack init` for a second rig of one type)")
    if not (project / "Pulumi.yaml").is_file():
        raise CloudError(f"--project-dir: no Pulumi.yaml in {project}; run from the rigbench checkout")
    known = known_stacks(project)
    unknown = [name for name in stacks if name not in known]
    if unknown:
        raise CloudError(f"--stack: no stack named {', '.join(unknown)} in {project} (stacks: "
                         f"{', '.join(known) or 'none'}); create it with `pulumi stack init NAME` and set its config "
                         "(docs/cloud.md)")


def read_settings(stack: str, project: Path) -> StackSettings:
    values = config_values(stack, project)
    config_file = project / f"Pulumi.{stack}.yaml"
    if not config_file.is_file():
        raise CloudError(f"--stack {stack}: no {config_file.name} in {project}; the loop copies it for each attempt")

    def text(name: str, default: str | None = None) -> str | None:
        value = values.get(name)
        return default if value in (None, "") else str(value)

    public_key_path = text(key("publicKeyPath"))
    private_key = None
    if public_key_path and public_key_path.endswith(".pub"):
        candidate = Path(public_key_path[: -len(".pub")]).expanduser()
        private_key = str(candidate) if candidate.is_file() else None
    try:
        ttl_hours = int(text(key("ttlHours"), "8") or 8)
        spot_max = text(key("spotMaxPrice"))
        spot_max_price = float(spot_max) if spot_max else None
    except ValueError as error:
        raise CloudError(f"--stack {stack}: {config_file.name}: {error}; run `pulumi preview --stack {stack}` for "
                         "the full check") from None
    return StackSettings(
        stack=stack, config_file=config_file,
        instance_type=text(key("instanceType"), "g6.xlarge") or "g6.xlarge",
        market=text(key("market"), "spot") or "spot",
        az=text(key("az"), "cheapest") or "cheapest",
        region=text(REGION_KEY),
        ttl_hours=ttl_hours, spot_max_price=spot_max_price, private_key=private_key,
        build_cache_bucket=text(key("buildCacheBucket")),
    )


def config_values(stack: str, project: Path) -> dict[str, object]:
    """``pulumi config --json``: key -> value (secrets stay blinded; the loop plans with none of them)."""
    shown = pulumi_json(["config", "--json", "--stack", stack], CloudError, cwd=project)
    if not isinstance(shown, dict):
        raise CloudError(f"`pulumi config --json --stack {stack}` did not print an object")
    return {name: entry.get("value") if isinstance(entry, dict) else entry for name, entry in shown.items()}


def write_attempt_config(settings: StackSettings, target: Path, changes: dict[str, str | None]) -> Path:
    """A copy of the stack's config file with ``changes`` (a None value removes the key)."""
    try:
        document = yaml.safe_load(settings.config_file.read_text()) or {}
    except yaml.YAMLError as error:
        raise CloudError(f"{settings.config_file}: not YAML ({error})") from None
    if not isinstance(document, dict):
        raise CloudError(f"{settings.config_file}: expected a mapping with a config: section")
    config = dict(document.get("config") or {})
    for name, value in changes.items():
        if value is None:
            config.pop(key(name), None)
        else:
            config[key(name)] = value
    document["config"] = config
    target.parent.mkdir(parents=True, exist_ok=True)
    write_whole(target, yaml.safe_dump(document, sort_keys=False))
    return target
