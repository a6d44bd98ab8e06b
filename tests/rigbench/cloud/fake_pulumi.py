"""A fake ``pulumi`` CLI for the cloud loop's tests: ``up`` "creates" a rig that is really a
network namespace with its own sshd (tests/rigbench/cloud/conftest.py), ``destroy`` kills it.

Why a fake executable and not a mock: the cloud loop runs the real CLI as a subprocess, in
parallel per stack, and must cope with its exit codes, its stderr and its timing. This script
answers exactly the invocations the loop makes and refuses anything else (exit 2), so a new
call in the loop shows up as a test failure instead of silently "working".

Inputs, both from the environment (the wrapper ``install_fake_pulumi`` writes bakes them in):

* ``FAKE_PULUMI_WORLD``: a JSON file describing the world: each stack's outputs and teardown
  command, spot prices, delays and failure rules (``fail_up``, ``fail_destroy``);
  ``stacks.<S>``: ``outputs`` (publicIp, sshUser, sshKeyPath, nvmePath, setupMarker), ``teardown``
  (shell, run by a successful destroy: the instance is terminated) and ``setup`` (shell, run by
  a successful up: the instance boots; optional). ``fail_up``: rules ``{stack, az, instanceType,
  market, code, message, times (-1 = always), partial}``, a rule matching when every one of the
  first four it names matches; ``fail_destroy``: ``{S: n}``, the first n destroys of S fail;
* ``FAKE_PULUMI_STATE``: a folder with one JSON file per stack (status, outputs, history) and
  the failure rules' remaining counts; written atomically under an fcntl lock, because two
  loops call pulumi at the same time.

Invocations (options may come anywhere; ``--non-interactive``, ``--color never``, ``--yes``,
``-y``, ``--skip-preview``, ``--show-secrets``, ``--suppress-progress`` are accepted and
ignored; ``--cwd DIR`` / ``-C DIR`` changes folder first):

    pulumi version
    pulumi stack ls --json
    pulumi stack --show-name
    pulumi stack output --json --stack S
    pulumi config --json --stack S [--config-file F]
    pulumi up --stack S [--config-file F]
    pulumi destroy --stack S [--config-file F]
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

import yaml

VERSION = "v3.150.0-fake"
THIS_FILE = Path(__file__).resolve()
ON_DEMAND_USD_PER_HOUR = {"g6.xlarge": 0.8048, "g6.2xlarge": 0.9776, "g4dn.xlarge": 0.526, "g5.xlarge": 1.006}
DEFAULT_ON_DEMAND = 1.0
DEFAULT_SPOT_PRICE = 0.3
RESOURCES_UP = 4  # key pair, security group, instance, the GpuRig component
RESOURCES_PARTIAL = 2  # key pair and security group: created before RunInstances failed
RULES_FILE = "_rule_counts.json"
LOCK_FILE = ".lock"
MARKER_WRITER = "__write-marker"  # internal: the detached process that plays the rig's user data


# ---------------------------------------------------------------- for tests


def install_fake_pulumi(bin_dir: Path, world: Path, state_dir: Path) -> Path:
    """Write ``bin_dir/pulumi``: a sh wrapper running this file with the venv's python (a
    ``#!/usr/bin/env python3`` shebang would find a python without PyYAML) and the world and
    state paths baked in, so subprocesses the loop starts need nothing else in their env."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    state_dir.mkdir(parents=True, exist_ok=True)
    wrapper = bin_dir / "pulumi"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"FAKE_PULUMI_WORLD={shlex.quote(str(world))}\n"
        f"FAKE_PULUMI_STATE={shlex.quote(str(state_dir))}\n"
        "export FAKE_PULUMI_WORLD FAKE_PULUMI_STATE\n"
        f'exec {shlex.quote(sys.executable)} {shlex.quote(str(THIS_FILE))} "$@"\n'
    )
    wrapper.chmod(0o755)
    return wrapper


def read_state(state_dir: Path, stack: str) -> dict[str, Any]:
    """The stack's state: status never|up|partial|destroyed, outputs and history."""
    path = Path(state_dir) / f"{stack}.json"
    if not path.exists():
        return {"status": "never", "outputs": {}, "history": []}
    return json.loads(path.read_text())


def running_stacks(state_dir: Path) -> list[str]:
    """Stacks with something still billing (status up or partial): what a test asserts is empty."""
    names = sorted(path.stem for path in Path(state_dir).glob("*.json") if not path.name.startswith("_"))
    return [name for name in names if read_state(state_dir, name)["status"] in ("up", "partial")]


# ---------------------------------------------------------------- state


def write_json_atomic(path: Path, value: Any) -> None:
    """Temp file + rename: a reader in another process never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    with os.fdopen(handle, "w") as out:
        json.dump(value, out, indent=2, sort_keys=True)
    os.replace(temp, path)


@contextlib.contextmanager
def locked(state_dir: Path) -> Iterator[None]:
    """One lock for the whole state folder, held only for read-modify-write (never while sleeping)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / LOCK_FILE, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def save_state(state_dir: Path, stack: str, state: dict[str, Any]) -> None:
    write_json_atomic(state_dir / f"{stack}.json", state)


def pid_alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rule_key(kind: str, index: int, rule: Any) -> str:
    """A rule's count is keyed by its content too: a rewritten world file starts fresh counts."""
    return f"{kind}:{index}:{hashlib.sha256(json.dumps(rule, sort_keys=True).encode()).hexdigest()[:12]}"


def take_rule(state_dir: Path, kind: str, index: int, rule: Any, times: int) -> bool:
    """Use one of the rule's ``times`` (-1: always); False once it is used up. Call under the lock."""
    if times < 0:
        return True
    path = state_dir / RULES_FILE
    counts = json.loads(path.read_text()) if path.exists() else {}
    key = rule_key(kind, index, rule)
    left = counts.get(key, times)
    if left <= 0:
        return False
    counts[key] = left - 1
    write_json_atomic(path, counts)
    return True


# ---------------------------------------------------------------- inputs


def fail(message: str, code: int = 255) -> NoReturn:
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def world_path() -> Path:
    value = os.environ.get("FAKE_PULUMI_WORLD")
    if not value:
        fail("fake pulumi: FAKE_PULUMI_WORLD is not set (install it with install_fake_pulumi)", 2)
    return Path(value)


def state_path() -> Path:
    value = os.environ.get("FAKE_PULUMI_STATE")
    if not value:
        fail("fake pulumi: FAKE_PULUMI_STATE is not set (install it with install_fake_pulumi)", 2)
    return Path(value)


def load_world() -> dict[str, Any]:
    path = world_path()
    world = json.loads(path.read_text()) if path.exists() else {}
    world.setdefault("default_zone", "us-east-1a")
    world.setdefault("up_delay_s", 0.0)
    world.setdefault("setup_delay_s", 0.0)
    world.setdefault("stacks", {})
    world.setdefault("spot_prices", {})
    world.setdefault("fail_up", [])
    world.setdefault("fail_destroy", {})
    return world


def local_stacks() -> list[str]:
    """Stacks with a ``Pulumi.<S>.yaml`` in the current folder, as ``pulumi stack ls`` would list them."""
    return sorted(path.name[len("Pulumi."):-len(".yaml")] for path in Path.cwd().glob("Pulumi.*.yaml"))


def check_stack(stack: str | None, world: dict[str, Any]) -> str:
    """The stack must exist: a stack file here or an entry in the world (the real backend's list)."""
    if not stack:
        fail("error: no stack selected; use `pulumi stack select` or pass --stack")
    if stack not in local_stacks() and stack not in world["stacks"]:
        fail(f"error: no stack named '{stack}' found")
    return stack


def read_config(stack: str, config_file: str | None) -> dict[str, Any]:
    """The ``config:`` mapping of the stack file (or ``--config-file``), keys like ``rigbench:az``."""
    path = Path(config_file) if config_file else Path(f"Pulumi.{stack}.yaml")
    if not path.exists():
        if config_file:
            fail(f"error: could not read config file {config_file}: open {config_file}: no such file or directory")
        return {}
    document = yaml.safe_load(path.read_text()) or {}
    config = document.get("config") or {}
    if not isinstance(config, dict):
        fail(f"error: {path}: config must be a mapping")
    return {str(key): value for key, value in config.items()}


def config_json(config: dict[str, Any]) -> dict[str, Any]:
    """The shape of ``pulumi config --json``: every value as text, objects also as ``objectValue``."""
    shown: dict[str, Any] = {}
    for key, value in config.items():
        if isinstance(value, dict) and set(value) == {"secure"}:
            shown[key] = {"value": "[secret]", "secret": True}
        elif isinstance(value, (list, dict)):
            shown[key] = {"value": json.dumps(value), "objectValue": value, "secret": False}
        elif isinstance(value, bool):
            shown[key] = {"value": "true" if value else "false", "secret": False}
        else:
            shown[key] = {"value": "" if value is None else str(value), "secret": False}
    return shown


def rig_settings(config: dict[str, Any], world: dict[str, Any]) -> dict[str, Any]:
    """What ``up`` decides from the config: type, market and zone (best/cheapest = the world's default)."""
    az = str(config.get("rigbench:az") or "cheapest")
    if az in ("best", "cheapest"):
        az = world["default_zone"]
    return {
        "instanceType": str(config.get("rigbench:instanceType") or "g6.xlarge"),
        "market": str(config.get("rigbench:market") or "spot"),
        "az": az,
        "ttlHours": int(config.get("rigbench:ttlHours") or 8),
    }


# ---------------------------------------------------------------- commands


def cmd_stack_ls() -> None:
    names = local_stacks()
    print(json.dumps([{"name": name, "current": False, "updateInProgress": updating(name)} for name in names],
                     indent=4))


def updating(stack: str) -> bool:
    return pid_alive(read_state(state_path(), stack).get("updatePid"))


def cmd_show_name(stack: str | None) -> None:
    names = [stack] if stack else local_stacks()
    if not names:
        fail("error: no stack selected; please use `pulumi stack select`")
    print(names[0])


def cmd_config(stack: str | None, config_file: str | None) -> None:
    world = load_world()
    stack = check_stack(stack, world)
    print(json.dumps(config_json(read_config(stack, config_file)), indent=4))


def cmd_output(stack: str | None) -> None:
    world = load_world()
    stack = check_stack(stack, world)
    state = read_state(state_path(), stack)
    print(json.dumps(state["outputs"] if state["status"] == "up" else {}, indent=4))


def begin_update(stack: str, command: str) -> dict[str, Any]:
    """Take the stack's update lock the way the real backend does: a second update at once fails."""
    states = state_path()
    with locked(states):
        state = read_state(states, stack)
        if pid_alive(state.get("updatePid")) and state.get("updatePid") != os.getpid():
            fail(f"error: the stack is currently locked by 1 lock(s). Either wait for the other process(es) "
                 f"to end or delete the lock file with `pulumi cancel`.\n  {stack}: {command} by pid "
                 f"{state['updatePid']}", 255)
        state["updatePid"] = os.getpid()
        save_state(states, stack, state)
        return state


def end_update(stack: str, change: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """Apply ``change`` to the state, append the history entry and release the update lock."""
    states = state_path()
    with locked(states):
        state = read_state(states, stack)
        state.update(change)
        state.pop("updatePid", None)
        state.setdefault("history", []).append(entry)
        save_state(states, stack, state)
        return state


def matching_up_rule(stack: str, settings: dict[str, Any], world: dict[str, Any]) -> dict[str, Any] | None:
    """The first ``fail_up`` rule naming only fields that match, and with times left (used up here)."""
    fields = {"stack": stack, "az": settings["az"], "instanceType": settings["instanceType"],
              "market": settings["market"]}
    with locked(state_path()):
        for index, rule in enumerate(world["fail_up"]):
            if all(rule[name] == value for name, value in fields.items() if name in rule) and take_rule(
                    state_path(), "up", index, rule, int(rule.get("times", -1))):
                return rule
    return None


def capacity_error(rule: dict[str, Any], settings: dict[str, Any]) -> str:
    code = rule.get("code", "InsufficientInstanceCapacity")
    message = rule.get("message") or (
        f"We currently do not have sufficient {settings['instanceType']} capacity in the Availability Zone you "
        f"requested ({settings['az']}). Our system will be working on provisioning additional capacity.")
    return (
        "error: 1 error occurred:\n"
        f"\t* creating EC2 Instance: operation error EC2: RunInstances, https response error StatusCode: 500, "
        f"RequestID: 1234, api error {code}: {message}"
    )


def stack_hash(stack: str) -> str:
    return hashlib.sha256(stack.encode()).hexdigest()[:8]


def cmd_up(stack: str | None, config_file: str | None) -> None:
    world = load_world()
    stack = check_stack(stack, world)
    config = read_config(stack, config_file)
    if stack not in world["stacks"]:
        fail(f"fake pulumi: stack '{stack}' has no entry in the world file {world_path()}", 2)
    settings = rig_settings(config, world)
    state = begin_update(stack, "update")
    print(f"Updating ({stack})\n\nView in Browser (Ctrl+O): https://app.pulumi.com/fake/rigbench/{stack}/updates\n",
          flush=True)
    print("     Type                   Name          Status", flush=True)
    print(f" +   pulumi:pulumi:Stack    rigbench-{stack}  creating (0s)", flush=True)
    time.sleep(float(world["up_delay_s"]))
    attempt = sum(1 for entry in state.get("history", []) if entry["command"] == "up") + 1
    rule = matching_up_rule(stack, settings, world)
    entry = {"command": "up", "config": config, "ok": rule is None, "at": time.time(),
             "code": None if rule is None else rule.get("code", "InsufficientInstanceCapacity")}
    if rule is not None:
        change: dict[str, Any] = {}
        if rule.get("partial", True):
            change = {"status": "partial", "outputs": {}}
        end_update(stack, change, entry)
        print(" +   rigbench:infra:GpuRig  rig           creating failed 1 error", flush=True)
        fail(capacity_error(rule, settings) + f"\n\nResources:\n    + {RESOURCES_PARTIAL} created\n"
             "    1 errored\n\nDuration: 3s")
    outputs = rig_outputs(stack, settings, world, attempt)
    if world["stacks"][stack].get("setup"):  # the new instance boots: e.g. start the rig's sshd again
        subprocess.run(world["stacks"][stack]["setup"], shell=True, check=False, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end_update(stack, {"status": "up", "outputs": outputs}, entry)
    print(" +   rigbench:infra:GpuRig  rig           created (2s)\n", flush=True)
    print("Outputs:")
    for key in sorted(outputs):
        print(f"    {key:<20}: {json.dumps(outputs[key])}")
    print(f"\nResources:\n    + {RESOURCES_UP} created\n\nDuration: 3s", flush=True)
    if outputs.get("setupMarker"):
        start_marker_writer(stack, outputs["instanceId"], outputs["setupMarker"], float(world["setup_delay_s"]))


def rig_outputs(stack: str, settings: dict[str, Any], world: dict[str, Any], attempt: int) -> dict[str, Any]:
    """The stack's outputs from the world plus what a launch decides (id, zone, prices, time)."""
    outputs = dict(world["stacks"][stack].get("outputs", {}))
    instance_type = settings["instanceType"]
    host = outputs.get("publicIp", "")
    outputs.update(
        instanceId=f"i-fake{stack_hash(stack)}{attempt}",
        availabilityZone=settings["az"],
        instanceType=instance_type,
        market=settings["market"],
        launchTime=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z"),
        ttlHours=settings["ttlHours"],
        onDemandUsdPerHour=ON_DEMAND_USD_PER_HOUR.get(instance_type, DEFAULT_ON_DEMAND),
        amiId="ami-0fake0000000000000",
    )
    outputs.setdefault("publicDns", f"ec2-{host.replace('.', '-')}.compute-1.amazonaws.com" if host else "")
    user = outputs.get("sshUser", "ubuntu")
    outputs.setdefault("sshCommand", f"ssh -o StrictHostKeyChecking=accept-new {user}@{host}")
    if settings["market"] == "spot":
        prices = world["spot_prices"].get(instance_type, {})
        outputs["spotPriceAtLaunch"] = prices.get(settings["az"], DEFAULT_SPOT_PRICE)
    return outputs


def start_marker_writer(stack: str, instance_id: str, marker: str, delay: float) -> None:
    """Play the rig's user data: a detached process writes the set-up marker ``delay`` s later."""
    subprocess.Popen(
        [sys.executable, str(THIS_FILE), MARKER_WRITER, stack, instance_id, marker, str(delay)],
        start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env=os.environ.copy(),
    )


def write_marker_later(stack: str, instance_id: str, marker: str, delay: float) -> None:
    """Write the marker unless the instance it belongs to was destroyed (or replaced) meanwhile."""
    time.sleep(delay)
    states = state_path()
    with locked(states):
        state = read_state(states, stack)
        if state["status"] != "up" or state["outputs"].get("instanceId") != instance_id:
            return
        write_json_atomic(Path(marker), {"ok": True, "instanceId": instance_id})


def cmd_destroy(stack: str | None, config_file: str | None) -> None:
    world = load_world()
    stack = check_stack(stack, world)
    config = read_config(stack, config_file)
    state = begin_update(stack, "destroy")
    print(f"Destroying ({stack})\n\nView in Browser (Ctrl+O): https://app.pulumi.com/fake/rigbench/{stack}/updates\n",
          flush=True)
    time.sleep(float(world["up_delay_s"]) / 2)
    with locked(state_path()):
        failing = take_rule(state_path(), "destroy", 0, {"stack": stack, "times": world["fail_destroy"].get(stack)},
                            int(world["fail_destroy"].get(stack, 0)))
    instance = state.get("outputs", {}).get("instanceId", "i-fake")
    if failing:
        end_update(stack, {}, {"command": "destroy", "config": config, "ok": False, "code": "RequestLimitExceeded",
                               "at": time.time()})
        fail(f"error: deleting urn:pulumi:{stack}::rigbench::rigbench:infra:GpuRig$aws:ec2/instance:Instance::rig: "
             "1 error occurred:\n"
             f"\t* deleting EC2 Instance ({instance}): operation error EC2: TerminateInstances, https response error "
             "StatusCode: 503, RequestID: 5678, api error RequestLimitExceeded: Request limit exceeded.\n\n"
             "Resources:\n    1 errored\n\nDuration: 2s")
    deleted = {"up": RESOURCES_UP, "partial": RESOURCES_PARTIAL}.get(state["status"], 0)
    entry_stack = world["stacks"].get(stack, {})
    marker = state.get("outputs", {}).get("setupMarker") or entry_stack.get("outputs", {}).get("setupMarker")
    end_update(stack, {"status": "destroyed", "outputs": {}},
               {"command": "destroy", "config": config, "ok": True, "code": None, "at": time.time()})
    if marker:
        with contextlib.suppress(FileNotFoundError):
            Path(marker).unlink()
    if entry_stack.get("teardown"):
        subprocess.run(entry_stack["teardown"], shell=True, check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    if deleted:
        print(" -   rigbench:infra:GpuRig  rig           deleted (2s)\n", flush=True)
    print(f"Resources:\n    - {deleted} deleted\n\nDuration: 2s\n", flush=True)
    print("The resources in the stack have been deleted, but the history and configuration associated with the "
          "stack are still maintained.", flush=True)


# ---------------------------------------------------------------- arguments


class StrictParser(argparse.ArgumentParser):
    """Unknown options are a loud exit 2 naming the whole command line, not argparse's usage text."""

    def error(self, message: str) -> NoReturn:
        fail(f"fake pulumi: unexpected arguments {sys.argv[1:]!r} ({message})", 2)


def parser() -> StrictParser:
    p = StrictParser(prog="pulumi", add_help=False)
    p.add_argument("words", nargs="*")
    p.add_argument("--non-interactive", action="store_true")
    p.add_argument("--color")
    p.add_argument("--yes", "-y", action="store_true")
    p.add_argument("--skip-preview", action="store_true")
    p.add_argument("--show-secrets", action="store_true")
    p.add_argument("--suppress-progress", action="store_true")
    p.add_argument("--cwd", "-C")
    p.add_argument("--stack", "-s")
    p.add_argument("--config-file")
    p.add_argument("--json", "-j", action="store_true")
    p.add_argument("--show-name", action="store_true")
    return p


def main(argv: list[str]) -> None:
    if argv[:1] == [MARKER_WRITER] and len(argv) == 5:
        write_marker_later(argv[1], argv[2], argv[3], float(argv[4]))
        return
    args = parser().parse_intermixed_args(argv)
    if args.cwd:
        os.chdir(args.cwd)
    words = args.words
    if words == ["version"]:
        print(VERSION)
    elif words == ["stack", "ls"] and args.json:
        cmd_stack_ls()
    elif words == ["stack"] and args.show_name:
        cmd_show_name(args.stack)
    elif words == ["stack", "output"] and args.json:
        cmd_output(args.stack)
    elif words == ["config"] and args.json:
        cmd_config(args.stack, args.config_file)
    elif words == ["up"]:
        cmd_up(args.stack, args.config_file)
    elif words == ["destroy"]:
        cmd_destroy(args.stack, args.config_file)
    else:
        fail(f"fake pulumi: unexpected arguments {argv!r}", 2)


if __name__ == "__main__":
    main(sys.argv[1:])
