"""The cloud loop's test harness itself: the fake ``pulumi`` answers like the real CLI (and
refuses what it does not know), and the namespace rigs behave like separate instances. The
loop's own tests trust both, so both are pinned here."""

from __future__ import annotations

import json
import shlex
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from provision.connection import connect, run

pytestmark = pytest.mark.integration

STACK = "g6-xlarge"
OTHER = "g6-2xlarge"


def fake_outputs(tmp_path: Path, stack: str) -> dict:
    """Outputs for a stack with no rig behind it (the fake never connects anywhere)."""
    return {"publicIp": "10.213.250.2", "sshUser": "root", "sshKeyPath": str(tmp_path / "k"),
            "nvmePath": str(tmp_path / stack / "nvme"), "setupMarker": str(tmp_path / stack / "setup-complete.json")}


def world(tmp_path: Path, **extra) -> dict:
    base = {"default_zone": "us-east-1a", "up_delay_s": 0.0, "setup_delay_s": 0.0,
            "stacks": {name: {"outputs": fake_outputs(tmp_path, name)} for name in (STACK, OTHER)},
            "spot_prices": {"g6.xlarge": {"us-east-1a": 0.35, "us-east-1b": 0.41}}}
    base.update(extra)
    return base


def process_alive(pid: int) -> bool:
    """Alive and not a zombie (a container's init may never reap an orphan)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def rig_connection(rig, tmp_path: Path):
    return connect(rig.address, user=rig.user, port=22, key_filename=str(rig.key),
                   known_hosts=rig.known_hosts(tmp_path / f"known_hosts-{rig.name}"), strict_host_key=True)


# ---------------------------------------------------------------- the fake CLI


def test_version_options_anywhere_and_unknown_arguments(fake_pulumi, project_dir) -> None:
    assert fake_pulumi.run("version").stdout.strip() == "v3.150.0-fake"
    listed = fake_pulumi.run("--non-interactive", "stack", "--color", "never", "ls", "--json", "-C",
                             str(project_dir.path))
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [{"name": name, "current": False, "updateInProgress": False}
                                         for name in sorted([STACK, OTHER])]
    assert fake_pulumi.run("stack", "--show-name", cwd=project_dir.path).stdout.strip() == sorted([STACK, OTHER])[0]
    for bad in (["preview", "--stack", STACK], ["up", "--target", "x"], ["stack", "rm", STACK], ["stack", "ls"]):
        result = fake_pulumi.run(*bad, cwd=project_dir.path)
        assert result.returncode == 2 and "fake pulumi: unexpected arguments" in result.stderr, bad


def test_config_json_has_the_real_shape(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path))
    result = fake_pulumi.run("config", "--json", "--stack", STACK, cwd=project_dir.path)
    assert result.returncode == 0, result.stderr
    config = json.loads(result.stdout)
    assert config["rigbench:instanceType"] == {"value": "g6.xlarge", "secret": False}
    assert config["aws:region"] == {"value": "us-east-1", "secret": False}
    assert config["rigbench:ttlHours"] == {"value": "8", "secret": False}
    cidrs = config["rigbench:allowedCidrs"]
    assert cidrs["objectValue"] == ["10.213.0.0/16"] and json.loads(cidrs["value"]) == ["10.213.0.0/16"]
    other = project_dir.write_stack("elsewhere", {"instanceType": "g5.xlarge"})
    from_file = fake_pulumi.run("config", "--json", "--stack", STACK, "--config-file", str(other),
                                cwd=project_dir.path)
    assert json.loads(from_file.stdout)["rigbench:instanceType"]["value"] == "g5.xlarge"


def test_unknown_stack_is_refused_like_the_real_cli(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path))
    for command in (["config", "--json"], ["up", "--yes"], ["stack", "output", "--json"], ["destroy", "-y"]):
        result = fake_pulumi.run(*command, "--stack", "nope", cwd=project_dir.path)
        assert result.returncode == 255, command
        assert result.stderr.strip() == "error: no stack named 'nope' found"
    assert fake_pulumi.state("nope")["status"] == "never"


def test_up_writes_outputs_and_history_and_destroy_clears_them(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path))
    up = fake_pulumi.run("up", "--stack", STACK, "--yes", "--skip-preview", "--non-interactive",
                         cwd=project_dir.path)
    assert up.returncode == 0, up.stderr
    assert "Updating (g6-xlarge)" in up.stdout and "Outputs:" in up.stdout and "+ 4 created" in up.stdout
    outputs = json.loads(fake_pulumi.run("stack", "output", "--json", "--stack", STACK, cwd=project_dir.path).stdout)
    assert outputs["publicIp"] == "10.213.250.2" and outputs["instanceId"].startswith("i-fake")
    assert outputs["availabilityZone"] == "us-east-1a"  # cheapest: the world's default zone
    assert (outputs["instanceType"], outputs["market"], outputs["ttlHours"]) == ("g6.xlarge", "spot", 8)
    assert outputs["onDemandUsdPerHour"] == 0.8048 and outputs["spotPriceAtLaunch"] == 0.35
    assert outputs["launchTime"].endswith("Z")
    assert fake_pulumi.running() == [STACK]

    destroy = fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path)
    assert destroy.returncode == 0 and "Destroying (g6-xlarge)" in destroy.stdout and "4 deleted" in destroy.stdout
    assert json.loads(fake_pulumi.run("stack", "output", "--json", "--stack", STACK,
                                      cwd=project_dir.path).stdout) == {}
    assert fake_pulumi.running() == []

    project_dir.write_stack(STACK, {"market": "on-demand", "az": "us-east-1b", "instanceType": "g4dn.xlarge"})
    assert fake_pulumi.run("up", "--stack", STACK, "-y", cwd=project_dir.path).returncode == 0
    second = fake_pulumi.state(STACK)["outputs"]
    assert second["instanceId"] != outputs["instanceId"]
    assert (second["availabilityZone"], second["market"], second["onDemandUsdPerHour"]) == ("us-east-1b",
                                                                                           "on-demand", 0.526)
    assert "spotPriceAtLaunch" not in second
    history = fake_pulumi.state(STACK)["history"]
    assert [(entry["command"], entry["ok"]) for entry in history] == [("up", True), ("destroy", True), ("up", True)]
    assert history[-1]["config"]["rigbench:market"] == "on-demand"


def test_fail_up_counts_down_and_leaves_partial_resources(fake_pulumi, project_dir, tmp_path) -> None:
    rule = {"stack": STACK, "az": "us-east-1a", "instanceType": "g6.xlarge", "market": "spot",
            "code": "InsufficientInstanceCapacity", "message": "We currently do not have sufficient g6.xlarge "
            "capacity in the Availability Zone you requested (us-east-1a).", "times": 2}
    fake_pulumi.write_world(world(tmp_path, fail_up=[rule]))
    for _ in range(2):
        failed = fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path)
        assert failed.returncode == 255
        assert "operation error EC2: RunInstances" in failed.stderr
        assert "api error InsufficientInstanceCapacity: We currently do not have sufficient g6.xlarge" in failed.stderr
        assert fake_pulumi.state(STACK)["status"] == "partial"
        assert fake_pulumi.running() == [STACK]  # the key pair and security group are still there
    assert fake_pulumi.run("up", "--stack", OTHER, "--yes", cwd=project_dir.path).returncode == 0  # not named
    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0  # used up
    history = fake_pulumi.state(STACK)["history"]
    assert [(entry["ok"], entry["code"]) for entry in history] == [
        (False, "InsufficientInstanceCapacity"), (False, "InsufficientInstanceCapacity"), (True, None)]
    partial = fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path)
    assert partial.returncode == 0


def test_fail_up_without_partial_and_always(fake_pulumi, project_dir, tmp_path) -> None:
    rules = [{"stack": STACK, "code": "VcpuLimitExceeded", "message": "You have requested more vCPU capacity.",
              "times": -1, "partial": False},
             {"az": "us-east-1b", "code": "InsufficientInstanceCapacity", "times": 1}]
    fake_pulumi.write_world(world(tmp_path, fail_up=rules))
    for _ in range(3):
        failed = fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path)
        assert failed.returncode == 255 and "api error VcpuLimitExceeded" in failed.stderr
    assert fake_pulumi.state(STACK)["status"] == "never" and fake_pulumi.running() == []
    assert fake_pulumi.run("up", "--stack", OTHER, "--yes", cwd=project_dir.path).returncode == 0  # zone a
    project_dir.write_stack(OTHER, {"az": "us-east-1b"})
    zone_b = fake_pulumi.run("up", "--stack", OTHER, "--yes", cwd=project_dir.path)
    assert zone_b.returncode == 255 and "(us-east-1b)" in zone_b.stderr
    assert fake_pulumi.run("up", "--stack", OTHER, "--yes", cwd=project_dir.path).returncode == 0


def test_destroy_fails_n_times_then_succeeds(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path, fail_destroy={STACK: 2}))
    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    for _ in range(2):
        failed = fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path)
        assert failed.returncode == 255 and "TerminateInstances" in failed.stderr
        assert fake_pulumi.running() == [STACK]
    assert fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    assert fake_pulumi.state(STACK)["status"] == "destroyed" and fake_pulumi.running() == []
    assert [entry["ok"] for entry in fake_pulumi.state(STACK)["history"]] == [True, False, False, True]


def test_marker_appears_only_after_the_delay_and_destroy_removes_it(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path, setup_delay_s=1.0))
    marker = Path(fake_outputs(tmp_path, STACK)["setupMarker"])
    started = time.monotonic()
    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    assert not marker.exists()
    while not marker.exists() and time.monotonic() - started < 10:
        time.sleep(0.05)
    assert marker.exists() and time.monotonic() - started >= 0.9
    assert json.loads(marker.read_text())["ok"] is True
    assert fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    assert not marker.exists()

    fake_pulumi.write_world(world(tmp_path, setup_delay_s=0.5))  # destroyed before set-up ends: no marker
    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    assert fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    time.sleep(0.8)
    assert not marker.exists()


@pytest.mark.timing
def test_stacks_update_in_parallel_but_one_stack_is_locked(fake_pulumi, project_dir, tmp_path) -> None:
    fake_pulumi.write_world(world(tmp_path, up_delay_s=1.0))
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda stack: fake_pulumi.run("up", "--stack", stack, "--yes",
                                                              cwd=project_dir.path), [STACK, OTHER]))
    assert [result.returncode for result in results] == [0, 0]
    assert time.monotonic() - started < 1.9  # at once, not one after the other
    assert fake_pulumi.running() == sorted([STACK, OTHER])
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(fake_pulumi.run, "up", "--stack", STACK, "--yes", cwd=project_dir.path)
        time.sleep(0.4)
        listed = json.loads(fake_pulumi.run("stack", "ls", "--json", cwd=project_dir.path).stdout)
        second = fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path)
        assert first.result().returncode == 0
    assert {entry["name"]: entry["updateInProgress"] for entry in listed} == {STACK: True, OTHER: False}
    assert second.returncode == 255 and "currently locked" in second.stderr


# ---------------------------------------------------------------- namespace rigs


def test_two_rigs_over_ssh_each_with_its_own_loopback(netns_rigs, tmp_path) -> None:
    rigs = netns_rigs(2)
    assert len({rig.address for rig in rigs}) == 2
    serve = ("import socket,sys,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); "
             "s.bind(('127.0.0.1',8080)); s.listen(); print('bound',flush=True)\n"
             "while True:\n c,_=s.accept(); c.sendall(sys.argv[1].encode()); c.close()")
    ask = "import socket; c=socket.create_connection(('127.0.0.1',8080),timeout=5); print(c.recv(100).decode())"
    connections = [rig_connection(rig, tmp_path) for rig in rigs]
    try:
        for rig, c in zip(rigs, connections, strict=True):
            assert run(c, "echo ok").stdout.strip() == "ok"
            log = rig.folder / "server.log"
            run(c, f"setsid python3 -c {shlex.quote(serve)} {rig.name} > {log} 2>&1 < /dev/null &")
        deadline = time.monotonic() + 10
        while not all("bound" in (rig.folder / "server.log").read_text() for rig in rigs):
            assert time.monotonic() < deadline, [(rig.folder / "server.log").read_text() for rig in rigs]
            time.sleep(0.05)
        for rig, c in zip(rigs, connections, strict=True):  # both hold 127.0.0.1:8080 at once
            assert run(c, f"python3 -c {shlex.quote(ask)}").stdout.strip() == rig.name
    finally:
        for c in connections:
            c.close()


def test_destroy_kills_the_rig_and_up_boots_it_again(netns_rigs, fake_pulumi, project_dir, tmp_path) -> None:
    (rig,) = netns_rigs(1)
    fake_pulumi.write_world({"default_zone": "us-east-1a", "setup_delay_s": 0.2, "stacks": {STACK: rig.world_stack()}})
    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    outputs = fake_pulumi.state(STACK)["outputs"]
    c = connect(outputs["publicIp"], user=outputs["sshUser"], key_filename=outputs["sshKeyPath"],
                known_hosts=rig.known_hosts(tmp_path / "known_hosts"), strict_host_key=True)
    pid = int(run(c, "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo $!").stdout)
    assert process_alive(pid) and pid in rig.pids()
    c.close()
    assert fake_pulumi.run("destroy", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    deadline = time.monotonic() + 5
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not process_alive(pid)
    with socket.socket() as probe:  # the "instance" is gone: nothing answers on port 22
        probe.settimeout(2)
        assert probe.connect_ex((rig.address, 22)) != 0

    assert fake_pulumi.run("up", "--stack", STACK, "--yes", cwd=project_dir.path).returncode == 0
    c = rig_connection(rig, tmp_path)
    try:
        assert run(c, "echo again").stdout.strip() == "again"
    finally:
        c.close()


def test_a_rig_reaches_a_server_on_its_host_side_address(netns_rigs, tmp_path) -> None:
    (rig,) = netns_rigs(1)
    server = socket.create_server((rig.host_address, 0))
    port = server.getsockname()[1]

    def answer() -> None:
        connection, _ = server.accept()
        with connection:
            connection.sendall(b"from the host")

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    ask = (f"import socket; c=socket.create_connection(({rig.host_address!r},{port}),timeout=5); "
           "print(c.recv(100).decode())")
    c = rig_connection(rig, tmp_path)
    try:
        assert run(c, f"python3 -c {shlex.quote(ask)}").stdout.strip() == "from the host"
    finally:
        c.close()
        server.close()
    thread.join(timeout=5)
