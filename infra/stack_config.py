"""The stack configuration, read and checked in one place.

Every key the program reads is a field of ``RigConfig`` (its alias is the ``pulumi config`` key,
declared with the same default in Pulumi.yaml). Reading happens before any resource is
declared, so a bad value stops ``pulumi preview`` with one message that names the key and the
accepted values, and nothing is created.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import json
import re
import struct
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from core.errors import InfraError
from core.instance_types import InstanceType, get_instance_type, known_instance_type_names
from core.strict import Strict

PROJECT = "rigbench"
DLAMI_SSM_PARAMETER = "/aws/service/deeplearning/ami/x86_64/base-oss-nvidia-driver-gpu-ubuntu-24.04/latest/ami-id"
TTL_HOURS_RANGE = (1, 72)
ROOT_VOLUME_GB_RANGE = (75, 4096)
# The key types EC2's ImportKeyPair accepts (no ECDSA, no DSA).
PUBLIC_KEY_TYPES = ("ssh-ed25519", "ssh-rsa")
# best: the highest spot placement score; cheapest: the lowest spot price (both among offering AZs).
AZ_CHOICES = ("best", "cheapest")
AZ_PATTERN = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d+[a-z]$")
AMI_ID_PATTERN = re.compile(r"^ami-[0-9a-f]{8,17}$")
# S3's general purpose bucket naming rules.
BUCKET_NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
BUCKET_NAME_RULE = "3 to 63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or digit"


class RigConfig(Strict):
    """What the stack asks for. Field aliases are the config keys users set."""

    model_config = ConfigDict(populate_by_name=True, frozen=True)

    instance_type: str = Field("g6.xlarge", alias="instanceType")
    market: Literal["spot", "on-demand"] = "spot"
    spot_max_price: float | None = Field(None, alias="spotMaxPrice", gt=0)
    az: str = "cheapest"
    ami_ssm_parameter: str = Field(DLAMI_SSM_PARAMETER, alias="amiSsmParameter")
    ami_id: str | None = Field(None, alias="amiId")
    public_key: str | None = Field(None, alias="publicKey")
    public_key_path: str | None = Field(None, alias="publicKeyPath")
    allowed_cidrs: list[str] = Field(alias="allowedCidrs")
    allow_open_ssh: bool = Field(False, alias="allowOpenSsh")
    root_volume_gb: int = Field(200, alias="rootVolumeGb", ge=ROOT_VOLUME_GB_RANGE[0], le=ROOT_VOLUME_GB_RANGE[1])
    ttl_hours: int = Field(8, alias="ttlHours", ge=TTL_HOURS_RANGE[0], le=TTL_HOURS_RANGE[1])
    owner: str = Field(min_length=1)
    ssh_user: str = Field("ubuntu", alias="sshUser", pattern=r"^[a-z_][a-z0-9_-]*$")
    nvme_path: str = Field("/opt/dlami/nvme", alias="nvmePath", pattern=r"^/[A-Za-z0-9_./-]+$")
    build_cache_bucket: str | None = Field(None, alias="buildCacheBucket")
    build_cache_bucket_create: bool = Field(False, alias="buildCacheBucketCreate")

    @field_validator("instance_type")
    @classmethod
    def _known_gpu_type(cls, value: str) -> str:
        try:
            return get_instance_type(value).name
        except InfraError as error:
            raise ValueError(str(error)) from None

    @field_validator("az")
    @classmethod
    def _az_shape(cls, value: str) -> str:
        if value not in AZ_CHOICES and not AZ_PATTERN.match(value):
            raise ValueError(
                f"{value!r} is neither 'best', 'cheapest' nor an availability zone name such as 'us-east-1d'"
            )
        return value

    @field_validator("ami_id")
    @classmethod
    def _ami_shape(cls, value: str | None) -> str | None:
        if value and not AMI_ID_PATTERN.match(value):
            raise ValueError(f"{value!r} is not an AMI id such as 'ami-0123456789abcdef0'")
        return value or None

    @field_validator("build_cache_bucket")
    @classmethod
    def _bucket_name_shape(cls, value: str | None) -> str | None:
        if value is None:
            return None
        problem = bucket_name_problem(value)
        if problem:
            raise ValueError(f"{value!r} is not an S3 bucket name: {problem}")
        return value

    @field_validator("ami_ssm_parameter")
    @classmethod
    def _ssm_path_shape(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"{value!r} is not an SSM parameter path; expected one starting with '/'")
        return value

    @field_validator("allowed_cidrs", mode="before")
    @classmethod
    def _cidr_list(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            value = [piece.strip() for piece in value.split(",") if piece.strip()]
        if not value:
            raise ValueError("no CIDR given; expected at least one, e.g. '203.0.113.7/32' (your address)")
        normalised = []
        for cidr in value:
            try:
                normalised.append(str(ipaddress.ip_network(str(cidr).strip(), strict=False)))
            except ValueError:
                raise ValueError(
                    f"{cidr!r} is not a CIDR; expected IPv4 or IPv6 networks such as '203.0.113.7/32'"
                ) from None
        return normalised

    @model_validator(mode="after")
    def _cross_checks(self) -> RigConfig:
        open_cidrs = [c for c in self.allowed_cidrs if ipaddress.ip_network(c).prefixlen == 0]
        if open_cidrs and not self.allow_open_ssh:
            raise ValueError(
                f"allowedCidrs: {', '.join(open_cidrs)} opens SSH to the whole internet; "
                "expected your own address (e.g. '203.0.113.7/32'), or set allowOpenSsh to true to accept that"
            )
        if self.spot_max_price is not None and self.market != "spot":
            raise ValueError("spotMaxPrice: set, but market is 'on-demand'; expected market 'spot' or no spotMaxPrice")
        if not (self.public_key or self.public_key_path):
            raise ValueError(
                "publicKey/publicKeyPath: neither is set; expected one of them, "
                "e.g. `pulumi config set publicKeyPath ~/.ssh/id_ed25519.pub`"
            )
        if self.public_key and self.public_key_path:
            raise ValueError("publicKey/publicKeyPath: both are set; expected only one of them")
        if self.build_cache_bucket_create and not self.build_cache_bucket:
            raise ValueError(
                "buildCacheBucketCreate/buildCacheBucket: buildCacheBucketCreate is true but buildCacheBucket is not "
                "set; expected the bucket's name, e.g. `pulumi config set buildCacheBucket my-rigbench-builds`"
            )
        return self

    @property
    def gpu(self) -> InstanceType:
        return get_instance_type(self.instance_type)

    @property
    def ipv4_cidrs(self) -> list[str]:
        return [c for c in self.allowed_cidrs if ipaddress.ip_network(c).version == 4]

    @property
    def ipv6_cidrs(self) -> list[str]:
        return [c for c in self.allowed_cidrs if ipaddress.ip_network(c).version == 6]

    @property
    def private_key_hint(self) -> str | None:
        """The private key beside ``publicKeyPath`` (``~/.ssh/id_ed25519`` for ``id_ed25519.pub``), if named so."""
        if self.public_key_path and self.public_key_path.endswith(".pub"):
            return self.public_key_path[: -len(".pub")]
        return None


def bucket_name_problem(name: str) -> str | None:
    """What breaks S3's bucket naming rules in ``name``, or None."""
    if not BUCKET_NAME_PATTERN.match(name):
        return f"expected {BUCKET_NAME_RULE}"
    if ".." in name or ".-" in name or "-." in name:
        return "a dot next to another dot or a hyphen"
    if re.fullmatch(r"\d+\.\d+\.\d+\.\d+", name):
        return "formatted like an IP address"
    reserved = [p for p in BUCKET_RESERVED_PREFIXES if name.startswith(p)]
    reserved += [s for s in BUCKET_RESERVED_SUFFIXES if name.endswith(s)]
    if reserved:
        return f"{reserved[0]!r} is reserved by S3"
    return None


def config_keys() -> list[str]:
    """The config keys the program reads, in declaration order."""
    return [field.alias or name for name, field in RigConfig.model_fields.items()]


def parse_rig_config(raw: Mapping[str, Any]) -> RigConfig:
    """Check raw config values (strings, as Pulumi hands them over) and return the validated config."""
    values = {key: _decode(key, value) for key, value in raw.items() if value is not None and value != ""}
    try:
        return RigConfig.model_validate(values)
    except ValidationError as error:
        raise InfraError(_describe(error)) from None


def read_public_key(config: RigConfig) -> str:
    """The OpenSSH public key line, from ``publicKey`` or the file at ``publicKeyPath``, checked."""
    key_name = "publicKey" if config.public_key else "publicKeyPath"
    if config.public_key:
        text = config.public_key
    else:
        path = Path(config.public_key_path or "").expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise InfraError(
                f"config key {PROJECT}:publicKeyPath: cannot read {path} ({error.strerror}); "
                "expected the path of an OpenSSH public key file such as ~/.ssh/id_ed25519.pub"
            ) from None
    line = text.strip()
    problem = _public_key_problem(line)
    if problem:
        raise InfraError(
            f"config key {PROJECT}:{key_name}: {problem}; expected one OpenSSH public key line of type "
            f"{', '.join(PUBLIC_KEY_TYPES)} (the contents of a .pub file, not a private key)"
        )
    return line


def load_rig_config(get: Callable[[str], str | None] | None = None) -> RigConfig:
    """Read every key from the project's Pulumi config (or from ``get``) and validate it."""
    if get is None:
        import pulumi

        get = pulumi.Config(PROJECT).get
    return parse_rig_config({key: get(key) for key in config_keys()})


def _decode(key: str, value: Any) -> Any:
    """Pulumi passes arrays and objects as JSON text; turn such values back into lists."""
    if key == "allowedCidrs" and isinstance(value, str) and value.strip().startswith("["):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            raise InfraError(
                f"config key {PROJECT}:allowedCidrs: {value!r} is not a JSON list; "
                "expected e.g. '[\"203.0.113.7/32\"]' or '203.0.113.7/32,198.51.100.0/24'"
            ) from None
    return value


def _public_key_problem(line: str) -> str | None:
    if "PRIVATE KEY" in line:
        return "found a private key"
    parts = line.split()
    if len(parts) < 2:
        return f"found {line[:40]!r}, which is not '<type> <base64> [comment]'"
    key_type, blob = parts[0], parts[1]
    if key_type not in PUBLIC_KEY_TYPES:
        return f"found key type {key_type!r}"
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        return "its key data is not base64"
    # The blob starts with the key type again, as a length-prefixed string (RFC 4253 6.6).
    if len(raw) < 4:
        return "its key data is truncated"
    (length,) = struct.unpack(">I", raw[:4])
    if raw[4 : 4 + length] != key_type.encode():
        return f"its key data does not encode a {key_type} key"
    return None


def _accepted_values(key: str) -> str:
    """What a key accepts, for the error message."""
    accepted = {
        "instanceType": ", ".join(known_instance_type_names()),
        "market": "spot, on-demand",
        "az": "best, cheapest, or an availability zone of the region such as us-east-1d",
        "ttlHours": f"an integer from {TTL_HOURS_RANGE[0]} to {TTL_HOURS_RANGE[1]}",
        "rootVolumeGb": f"an integer from {ROOT_VOLUME_GB_RANGE[0]} to {ROOT_VOLUME_GB_RANGE[1]}",
        "allowOpenSsh": "true, false",
        "spotMaxPrice": "a price in USD per hour above 0, e.g. 0.6",
        "allowedCidrs": "a list of CIDRs such as 203.0.113.7/32",
        "owner": "a non-empty name, e.g. your user name",
        "amiId": "an AMI id such as ami-0123456789abcdef0",
        "buildCacheBucket": "an S3 bucket name such as my-rigbench-builds",
        "buildCacheBucketCreate": "true, false",
    }
    return accepted.get(key, "")


def _describe(error: ValidationError) -> str:
    """One line per problem: the full config key, what was wrong, and what the key accepts."""
    parts = []
    for problem in error.errors():
        key = str(problem["loc"][0]) if problem["loc"] else ""
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "missing":
            message = "not set"
        elif problem["type"] == "extra_forbidden":
            message = "unknown key; expected one of " + ", ".join(config_keys())
        message = message.rstrip(".")
        accepted = _accepted_values(key)
        if accepted and problem["type"] != "extra_forbidden" and accepted not in message:
            message += f" (accepted: {accepted})"
        # Cross-key checks carry no location; their messages start with the key themselves.
        parts.append(f"config key {PROJECT}:{key}: {message}" if key else f"config key {PROJECT}:{message}")
    return "; ".join(parts) + ". Fix it with `pulumi config set <key> <value>` and run the preview again."
