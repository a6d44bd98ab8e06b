"""Config declarations (Pulumi.yaml, example stacks) agree with the one place that reads them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from core.errors import InfraError
from infra.stack_config import RigConfig, config_keys, parse_rig_config

ROOT = Path(__file__).resolve().parents[2]
PROJECT_FILE = ROOT / "Pulumi.yaml"
EXAMPLE_STACKS = {"g6-xlarge": "g6.xlarge", "g6-2xlarge": "g6.2xlarge"}


@pytest.fixture(scope="module")
def project() -> dict:
    return yaml.safe_load(PROJECT_FILE.read_text())


def test_project_runs_the_infra_folder_with_the_virtualenv(project):
    assert project["name"] == "rigbench"
    assert project["main"] == "infra/"
    assert project["runtime"] == {"name": "python", "options": {"toolchain": "pip", "virtualenv": ".venv"}}
    assert (ROOT / "infra" / "__main__.py").is_file()


def test_every_key_the_program_reads_is_declared_with_type_and_description(project):
    declared = project["config"]
    assert list(declared) == config_keys()
    for key, spec in declared.items():
        assert spec.get("description"), f"{key} has no description"
        assert spec.get("type") in {"string", "integer", "boolean", "array"}, key


def test_declared_defaults_are_the_programs_defaults(project):
    fields = {field.alias or name: field for name, field in RigConfig.model_fields.items()}
    for key, spec in project["config"].items():
        field = fields[key]
        if field.is_required():
            assert "default" not in spec, f"{key} is required by the program but has a default in Pulumi.yaml"
            continue
        declared = spec["default"]
        program = field.default
        # Pulumi has no null: an empty string stands for "not set".
        assert declared == ("" if program is None else program), key


def test_allowed_cidrs_and_owner_have_no_default(project):
    assert "default" not in project["config"]["allowedCidrs"]
    assert "default" not in project["config"]["owner"]


@pytest.mark.parametrize(("stack", "instance_type"), EXAMPLE_STACKS.items())
def test_example_stacks_are_valid_and_hold_no_account_data(stack, instance_type):
    path = ROOT / f"Pulumi.{stack}.yaml"
    text = path.read_text()
    assert not re.search(r"\b\d{12}\b", text), "an AWS account id in an example stack"
    assert "secure:" not in text and "encryptionsalt" not in text
    config = yaml.safe_load(text)["config"]
    assert config["aws:region"] == "us-east-1"
    values = {key.removeprefix("rigbench:"): value for key, value in config.items() if key.startswith("rigbench:")}
    assert set(values) <= set(config_keys())
    parsed = parse_rig_config({k: v if isinstance(v, list) else str(v) for k, v in values.items()})
    assert parsed.instance_type == instance_type
    assert parsed.market == "spot"


def test_cidrs_may_be_a_comma_separated_string_and_are_normalised():
    config = parse_rig_config(
        {"owner": "me", "publicKey": "x", "allowedCidrs": "203.0.113.7/24, 2001:db8::1/64"}
    )
    assert config.allowed_cidrs == ["203.0.113.0/24", "2001:db8::/64"]
    assert config.ipv4_cidrs == ["203.0.113.0/24"]
    assert config.ipv6_cidrs == ["2001:db8::/64"]


def test_unknown_key_is_refused():
    with pytest.raises(InfraError, match=r"rigbench:instanceTyp: unknown key; expected one of instanceType"):
        parse_rig_config({"owner": "me", "publicKey": "x", "allowedCidrs": "10.0.0.0/8", "instanceTyp": "g6.xlarge"})


def test_both_public_key_forms_are_refused():
    with pytest.raises(InfraError, match="both are set"):
        parse_rig_config({"owner": "me", "publicKey": "x", "publicKeyPath": "y", "allowedCidrs": "10.0.0.0/8"})


def test_the_docs_way_to_set_cidrs_gives_a_list_the_program_reads():
    """``pulumi config set --path 'allowedCidrs[0]' 203.0.113.7/32`` stores a YAML list (the key is
    declared ``type: array``); Pulumi hands an array to the program as JSON text."""
    docs = (ROOT / "README.md").read_text() + (ROOT / "docs" / "cloud.md").read_text()
    assert "pulumi config set --path 'allowedCidrs[0]' 203.0.113.7/32" in docs
    assert 'pulumi config set allowedCidrs "' not in docs, "a plain string for an array key fails Pulumi's check"
    stored = yaml.safe_load("config:\n  rigbench:allowedCidrs:\n    - 203.0.113.7/32\n")["config"]
    config = parse_rig_config({"owner": "me", "publicKey": "x",
                               "allowedCidrs": json.dumps(stored["rigbench:allowedCidrs"])})
    assert config.allowed_cidrs == ["203.0.113.7/32"]
