"""Bad stack config stops the program before any resource is declared, naming the key and the accepted values."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import InfraError
from infra.program import deploy


def refused(use_stack, config: dict[str, str], mocks=None) -> str:
    """Preview the program with ``config``; assert it raised InfraError and declared nothing; return the message."""
    mocks = use_stack(config, mocks, preview=True)
    with pytest.raises(InfraError) as caught:
        deploy()
    assert mocks.resources == [], f"resources were declared before the refusal: {[r.name for r in mocks.resources]}"
    return str(caught.value)


@pytest.mark.parametrize(
    ("change", "key", "accepted"),
    [
        ({"instanceType": "g7.mega"}, "rigbench:instanceType", "g6.xlarge"),
        ({"instanceType": "t3.micro"}, "rigbench:instanceType", "g4dn.xlarge, g5.12xlarge, g5.2xlarge, g5.48xlarge"),
        ({"market": "reserved"}, "rigbench:market", "spot, on-demand"),
        ({"ttlHours": "0"}, "rigbench:ttlHours", "from 1 to 72"),
        ({"ttlHours": "73"}, "rigbench:ttlHours", "from 1 to 72"),
        ({"ttlHours": "eight"}, "rigbench:ttlHours", "from 1 to 72"),
        ({"allowedCidrs": '["203.0.113.300/32"]'}, "rigbench:allowedCidrs", "203.0.113.7/32"),
        ({"allowedCidrs": "not-a-network"}, "rigbench:allowedCidrs", "203.0.113.7/32"),
        ({"allowedCidrs": '["203.0.113.7/32"'}, "rigbench:allowedCidrs", "JSON list"),
        ({"allowedCidrs": '["0.0.0.0/0"]'}, "rigbench:allowedCidrs", "allowOpenSsh"),
        ({"allowedCidrs": "::/0"}, "rigbench:allowedCidrs", "allowOpenSsh"),
        ({"allowedCidrs": "10.0.0.0/8,0.0.0.0/0", "allowOpenSsh": "false"}, "rigbench:allowedCidrs", "allowOpenSsh"),
        ({"allowedCidrs": "[]"}, "rigbench:allowedCidrs", "at least one"),
        ({"az": "moon-base-1"}, "rigbench:az", "cheapest"),
        ({"rootVolumeGb": "20"}, "rigbench:rootVolumeGb", "from 75 to 4096"),
        ({"spotMaxPrice": "-1"}, "rigbench:spotMaxPrice", "above 0"),
        ({"spotMaxPrice": "0.5", "market": "on-demand"}, "rigbench:spotMaxPrice", "market 'spot'"),
        ({"amiId": "ami-xyz"}, "rigbench:amiId", "ami-0123456789abcdef0"),
        ({"owner": ""}, "rigbench:owner", "non-empty"),
    ],
)
def test_bad_values_are_refused_with_key_and_accepted_values(use_stack, base_config, change, key, accepted):
    message = refused(use_stack, {**base_config, **change})
    assert f"config key {key}" in message
    assert accepted in message


def test_missing_allowed_cidrs_is_refused(use_stack, base_config):
    config = dict(base_config)
    del config["allowedCidrs"]
    message = refused(use_stack, config)
    assert "config key rigbench:allowedCidrs: not set" in message


def test_missing_public_key_is_refused(use_stack, base_config):
    config = dict(base_config)
    del config["publicKeyPath"]
    message = refused(use_stack, config)
    assert "rigbench:publicKey/publicKeyPath: neither is set" in message


def test_unreadable_public_key_path_is_refused(use_stack, base_config, tmp_path: Path):
    message = refused(use_stack, {**base_config, "publicKeyPath": str(tmp_path / "absent.pub")})
    assert "config key rigbench:publicKeyPath: cannot read" in message
    assert "OpenSSH public key file" in message


@pytest.mark.parametrize(
    ("key_text", "problem"),
    [
        ("ssh-ed25519", "not '<type> <base64> [comment]'"),
        ("ssh-dss AAAAB3NzaC1kc3MAAACBAP8= me", "key type 'ssh-dss'"),
        ("ssh-ed25519 !!!notbase64!!! me", "not base64"),
        ("ssh-rsa AAAAC3NzaC1lZDI1NTE5AAAAIA== me", "does not encode a ssh-rsa key"),
        ("-----BEGIN OPENSSH PRIVATE KEY-----", "private key"),
    ],
)
def test_malformed_public_key_is_refused(use_stack, base_config, tmp_path: Path, key_text, problem):
    path = tmp_path / "bad.pub"
    path.write_text(key_text + "\n")
    message = refused(use_stack, {**base_config, "publicKeyPath": str(path)})
    assert "config key rigbench:publicKeyPath" in message
    assert problem in message
    assert "ssh-ed25519, ssh-rsa" in message


def test_malformed_public_key_value_is_refused(use_stack, base_config):
    config = {**base_config, "publicKey": "hello world"}
    del config["publicKeyPath"]
    message = refused(use_stack, config)
    assert "config key rigbench:publicKey:" in message


def test_type_not_offered_in_the_region_is_refused(use_stack, base_config, fake):
    message = refused(use_stack, {**base_config, "instanceType": "g6e.xlarge"}, fake.RigMocks(offered=[]))
    assert "config key rigbench:instanceType: g6e.xlarge is not offered in this region" in message


def test_az_that_does_not_offer_the_type_is_refused(use_stack, base_config, fake):
    message = refused(use_stack, {**base_config, "az": "us-east-1c"})
    assert "config key rigbench:az: us-east-1c does not offer g6.xlarge" in message
    assert "accepted values: best, cheapest, us-east-1a, us-east-1b, us-east-1d" in message


def test_spot_without_any_published_price_is_refused(use_stack, base_config, fake):
    message = refused(use_stack, base_config, fake.RigMocks(spot_prices={}))
    assert "config key rigbench:az: no spot price is published" in message


def test_spot_max_price_below_the_current_price_is_refused(use_stack, base_config):
    message = refused(use_stack, {**base_config, "spotMaxPrice": "0.2"})
    assert "config key rigbench:spotMaxPrice: 0.2 USD/h is below the current spot price 0.3921" in message


def test_az_without_a_default_subnet_is_refused(use_stack, base_config, fake):
    message = refused(use_stack, {**base_config, "az": "us-east-1d"}, fake.RigMocks(subnetless_azs={"us-east-1d"}))
    assert "has no default subnet in us-east-1d" in message


def test_ssm_parameter_without_an_ami_is_refused(use_stack, base_config, fake):
    message = refused(use_stack, base_config, fake.RigMocks(ami_value="not-an-ami"))
    assert "config key rigbench:amiSsmParameter" in message


def test_ecdsa_keys_are_refused_because_ec2_cannot_import_them(use_stack, base_config, fake, tmp_path: Path):
    path = tmp_path / "id_ecdsa.pub"
    path.write_text(fake.make_public_key("ecdsa-sha2-nistp256") + "\n")
    message = refused(use_stack, {**base_config, "publicKeyPath": str(path)})
    assert "found key type 'ecdsa-sha2-nistp256'" in message
