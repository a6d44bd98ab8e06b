"""The shared llama.cpp build cache bucket in the stack: named, declared by one stack, kept on destroy."""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pytest

from core.errors import InfraError
from infra.stack_config import parse_rig_config

BUCKET = "aws:s3/bucket:Bucket"
PUBLIC_ACCESS_BLOCK = "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock"


@pytest.fixture
def kept_options(monkeypatch) -> dict[str, pulumi.ResourceOptions]:
    """The options each S3 resource was declared with (the mocks see inputs only)."""
    seen: dict[str, pulumi.ResourceOptions] = {}
    for name in ("Bucket", "BucketPublicAccessBlock"):
        real = getattr(aws.s3, name)

        def record(resource_name, *args, _real=real, opts=None, **kwargs):
            seen[resource_name] = opts
            return _real(resource_name, *args, opts=opts, **kwargs)

        monkeypatch.setattr(aws.s3, name, record)
    return seen


def test_a_named_bucket_is_exported_and_not_declared(run_program, base_config):
    mocks, outputs = run_program({**base_config, "buildCacheBucket": "team-rigbench-builds"})
    assert outputs["buildCacheBucket"] == "team-rigbench-builds"
    assert not [r for r in mocks.resources if r.typ.startswith("aws:s3/")]


def test_without_the_key_there_is_no_bucket_and_no_output(run_program, base_config):
    mocks, outputs = run_program(base_config)
    assert "buildCacheBucket" not in outputs
    assert not [r for r in mocks.resources if r.typ.startswith("aws:s3/")]


def test_create_declares_a_private_bucket_kept_on_destroy(fake, run_program, base_config, kept_options):
    config = {**base_config, "buildCacheBucket": "team-rigbench-builds", "buildCacheBucketCreate": "true"}
    mocks, outputs = run_program(config)
    bucket = mocks.one(BUCKET)
    assert bucket.inputs["bucket"] == "team-rigbench-builds"
    assert {"project": "rigbench", "stack": fake.STACK, "owner": "tester"}.items() <= bucket.inputs["tags"].items()
    block = mocks.one(PUBLIC_ACCESS_BLOCK).inputs
    assert block["bucket"] == f"{bucket.name}-id"
    for flag in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"):
        assert block[flag] is True, flag
    assert {name: opts.retain_on_delete for name, opts in kept_options.items()} == {
        "build-cache": True, "build-cache-private": True
    }
    assert outputs["buildCacheBucket"] == "team-rigbench-builds"
    # the rig is the same three EC2 resources under its component
    assert len([urn for urn in mocks.urns() if "aws:ec2/" in urn]) == 3


def test_create_without_a_bucket_name_is_refused_naming_both_keys(base_config):
    with pytest.raises(InfraError, match=r"rigbench:buildCacheBucketCreate/buildCacheBucket: .* is not set"):
        parse_rig_config({**base_config, "buildCacheBucketCreate": "true"})


@pytest.mark.parametrize("name", ["ab", "Team-Builds", "team_builds", "team..builds", "-team", "192.168.5.4",
                                  "xn--team", "team-s3alias", "a" * 64])
def test_a_bad_bucket_name_is_refused_naming_the_key(base_config, name):
    with pytest.raises(InfraError, match=r"config key rigbench:buildCacheBucket: .* is not an S3 bucket name"):
        parse_rig_config({**base_config, "buildCacheBucket": name})


@pytest.mark.parametrize("name", ["abc", "team-rigbench-builds", "builds.example.com", "a" * 63])
def test_good_bucket_names_pass(base_config, name):
    assert parse_rig_config({**base_config, "buildCacheBucket": name}).build_cache_bucket == name
