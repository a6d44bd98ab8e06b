"""Rigs in network namespaces and a fake ``pulumi`` on PATH: the cloud loop end to end without AWS.

Why namespaces: every rig gets its own network stack, so its own 127.0.0.1 and its own port 22
and 8080, the way separate EC2 instances would; two llama-servers on two rigs both use 8080.
Each rig is a namespace joined to the host by a veth pair (host side 10.213.<k>.1, rig side
10.213.<k>.2, default route via the host side, so a rig reaches servers a test runs on the host
side address), with a private sshd inside (own host key, one authorized client key, root login
by key). The filesystem is shared: the rig's "NVMe" folder and set-up marker are host folders.

Needs root and iproute2 (``ip netns``); without them these tests fail in one line, not skip.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from rigbench.studies.rehearsal.sshd import sshd_config, wait_listening, write_key

ROOT = Path(__file__).resolve().parents[3]
SSHD = "/usr/sbin/sshd"
SUBNET = "10.213"
ALLOCATION_LOCK = Path("/tmp/rigbench-netns.lock")  # two pytest processes never take the same subnet
NAME = re.compile(r"^rb(\d+)-(\d+)$")


def load_module(name: str, path: Path) -> ModuleType:
    """A helper file as a module (test folders are no packages; importlib mode imports no conftest)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


fake_pulumi_module = load_module("cloud_fake_pulumi", Path(__file__).resolve().parent / "fake_pulumi.py")


# ---------------------------------------------------------------- rigs


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], check=check, capture_output=True, text=True)


@dataclass
class NetnsRig:
    """One rig: a namespace with its own sshd, reachable from the host at ``address``."""

    name: str
    namespace: str
    host_interface: str
    host_address: str
    address: str
    user: str
    key: Path
    host_key_line: str
    work: Path
    marker: Path
    teardown: str
    folder: Path
    sshd_config: Path
    process: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def setup(self) -> str:
        """A shell command that starts the rig's sshd again (daemonized), as a fresh instance boots
        with one: the fake's ``up`` runs it, so up, destroy (which kills everything), up works. When
        sshd already runs, the second one cannot bind and exits: harmless."""
        return (f"ip netns exec {self.namespace} {SSHD} -f {self.sshd_config} "
                f"-E {self.folder / 'sshd-restarted.log'}")

    def outputs(self) -> dict[str, Any]:
        """The rig's part of the stack outputs in the fake's world file."""
        return {"publicIp": self.address, "sshUser": self.user, "sshKeyPath": str(self.key),
                "nvmePath": str(self.work), "setupMarker": str(self.marker)}

    def world_stack(self) -> dict[str, Any]:
        """The world file's entry for a stack that is this rig: outputs, teardown, setup."""
        return {"outputs": self.outputs(), "teardown": self.teardown, "setup": self.setup}

    def known_hosts(self, path: Path) -> Path:
        """A known_hosts file pinning this rig's real host key (port 22: the plain host name)."""
        path.write_text(f"{self.address} {self.host_key_line}\n")
        return path

    def exec(self, *command: str, **kwargs: Any) -> subprocess.CompletedProcess:
        """Run a command inside the rig's namespace (not over SSH)."""
        return subprocess.run(["ip", "netns", "exec", self.namespace, *command], **kwargs)

    def pids(self) -> list[int]:
        return [int(pid) for pid in ip("netns", "pids", self.namespace, check=False).stdout.split()]


def taken_subnets() -> set[int]:
    addresses = ip("-o", "addr").stdout
    return {int(k) for k in re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.", addresses)}


def link_exists(name: str) -> bool:
    return ip("link", "show", name, check=False).returncode == 0


def remove_namespace(namespace: str, host_interface: str | None = None) -> None:
    """Kill everything in it, delete it (which deletes the rig side veth and so its peer)."""
    pids = ip("netns", "pids", namespace, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), 9)
    ip("netns", "del", namespace, check=False)
    if host_interface and link_exists(host_interface):
        ip("link", "del", host_interface, check=False)


def remove_stale_namespaces() -> None:
    """Namespaces a crashed pytest left behind (its pid is gone) would hold their subnets forever."""
    for line in ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        match = NAME.match(name)
        if match and int(match.group(1)) != os.getpid() and not fake_pulumi_module.pid_alive(int(match.group(1))):
            remove_namespace(name, f"rbh{int(match.group(1)) % 10000}-{match.group(2)}")


def create_rig(k: int, folder: Path) -> NetnsRig:
    """Namespace, veth pair, addresses and route for subnet ``k``, then its sshd."""
    namespace = f"rb{os.getpid()}-{k}"
    host_interface = f"rbh{os.getpid() % 10000}-{k}"  # interface names: 15 characters at most
    rig_interface = f"rbr{os.getpid() % 10000}-{k}"
    host_address, address = f"{SUBNET}.{k}.1", f"{SUBNET}.{k}.2"
    added = ip("netns", "add", namespace, check=False)
    if added.returncode != 0:
        pytest.fail(f"the cloud tests need root and `ip netns` (iproute2): `ip netns add {namespace}` failed: "
                    f"{added.stderr.strip()}", pytrace=False)
    ip("link", "add", host_interface, "type", "veth", "peer", "name", rig_interface)
    ip("link", "set", rig_interface, "netns", namespace)
    ip("addr", "add", f"{host_address}/24", "dev", host_interface)
    ip("link", "set", host_interface, "up")
    ip("-n", namespace, "addr", "add", f"{address}/24", "dev", rig_interface)
    ip("-n", namespace, "link", "set", rig_interface, "up")
    ip("-n", namespace, "link", "set", "lo", "up")
    ip("-n", namespace, "route", "add", "default", "via", host_address)

    host_key = " ".join(write_key(folder / "host_ed25519").split()[:2])
    (folder / "authorized_keys").write_text(write_key(folder / "client_ed25519") + "\n")
    work, marker = folder / "nvme", folder / "setup-complete.json"
    work.mkdir()
    config = folder / "sshd_config"
    config.write_text(sshd_config(folder, 22, address=address))
    rig = NetnsRig(
        name=f"rig{k}", namespace=namespace, host_interface=host_interface, host_address=host_address,
        address=address, user=getpass.getuser(), key=folder / "client_ed25519", host_key_line=host_key,
        work=work, marker=marker, teardown=f"ip netns pids {namespace} | xargs -r kill -9", folder=folder,
        sshd_config=config,
    )
    log = folder / "sshd.log"
    with open(log, "wb") as out:
        rig.process = subprocess.Popen(["ip", "netns", "exec", namespace, SSHD, "-D", "-e", "-f", str(config)],
                                       stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    wait_listening(22, rig.process, log, host=address)
    return rig


def destroy_rig(rig: NetnsRig) -> None:
    subprocess.run(rig.teardown, shell=True, check=False, capture_output=True)
    if rig.process is not None:
        with contextlib.suppress(ProcessLookupError):
            rig.process.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            rig.process.wait(timeout=10)
    remove_namespace(rig.namespace, rig.host_interface)


@pytest.fixture()
def netns_rigs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[int], list[NetnsRig]]]:
    """``make(n)``: n fresh rigs, each in its own namespace and subnet; all removed at teardown."""
    if not os.access(SSHD, os.X_OK):
        pytest.fail(f"{SSHD} is missing: run `make sshd` (apt-get install openssh-server)", pytrace=False)
    if shutil.which("ip") is None:
        pytest.fail("the cloud tests need root and `ip netns` (iproute2): no `ip` on PATH", pytrace=False)
    with contextlib.suppress(PermissionError):  # sshd's privilege separation folder
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    rigs: list[NetnsRig] = []
    pending: list[tuple[str, str]] = []  # created but maybe not yet a NetnsRig (a failure half way)

    def make(n: int) -> list[NetnsRig]:
        made: list[NetnsRig] = []
        with open(ALLOCATION_LOCK, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            remove_stale_namespaces()
            for _ in range(n):
                taken = taken_subnets()
                k = next((k for k in range(1, 255) if k not in taken
                          and not link_exists(f"rbh{os.getpid() % 10000}-{k}")), None)
                if k is None:
                    pytest.fail(f"no free subnet {SUBNET}.<k>.0/24 left for another rig", pytrace=False)
                pending.append((f"rb{os.getpid()}-{k}", f"rbh{os.getpid() % 10000}-{k}"))
                rig = create_rig(k, tmp_path_factory.mktemp(f"rig{k}-"))
                rigs.append(rig)
                made.append(rig)
        return made

    try:
        yield make
    finally:
        for rig in rigs:
            destroy_rig(rig)
        for namespace, host_interface in pending:
            remove_namespace(namespace, host_interface)


# ---------------------------------------------------------------- fake pulumi


@dataclass
class FakePulumi:
    """The fake CLI installed on PATH, its world file and its state folder."""

    bin_dir: Path
    world_path: Path
    state_dir: Path
    module: ModuleType

    @property
    def executable(self) -> Path:
        return self.bin_dir / "pulumi"

    def write_world(self, world: dict[str, Any]) -> None:
        self.world_path.write_text(json.dumps(world, indent=2))

    def state(self, stack: str) -> dict[str, Any]:
        return self.module.read_state(self.state_dir, stack)

    def running(self) -> list[str]:
        """Stacks still billing (up or partial)."""
        return self.module.running_stacks(self.state_dir)

    def env(self) -> dict[str, str]:
        """An environment for subprocesses: the fake first on PATH."""
        return {**os.environ, "PATH": f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}

    def run(self, *args: str, cwd: Path | str | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
        """``pulumi ARGS`` as the loop would run it."""
        return subprocess.run([str(self.executable), *args], cwd=cwd, env=self.env(), capture_output=True,
                              text=True, timeout=timeout)


@pytest.fixture()
def fake_pulumi(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakePulumi:
    """A fake ``pulumi`` first on PATH (for this process and every subprocess it starts), an empty world."""
    base = tmp_path / "fake-pulumi"
    fake = FakePulumi(base / "bin", base / "world.json", base / "state", fake_pulumi_module)
    fake_pulumi_module.install_fake_pulumi(fake.bin_dir, fake.world_path, fake.state_dir)
    fake.write_world({"default_zone": "us-east-1a", "up_delay_s": 0.0, "setup_delay_s": 0.0, "stacks": {}})
    monkeypatch.setenv("PATH", f"{fake.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    return fake


# ---------------------------------------------------------------- project folder

DEFAULT_STACKS = {"g6-xlarge": {"instanceType": "g6.xlarge"}, "g6-2xlarge": {"instanceType": "g6.2xlarge"}}


@dataclass
class ProjectDir:
    """A Pulumi project folder: the repository's Pulumi.yaml and stack files written from dicts."""

    path: Path
    public_key: str

    def __fspath__(self) -> str:
        return str(self.path)

    def write_stack(self, name: str, config: dict[str, Any] | None = None) -> Path:
        """``Pulumi.<name>.yaml`` from ``config``: bare keys get the ``rigbench:`` namespace, and
        keys left out take test defaults (spot, cheapest zone, owner, CIDRs, a real public key)."""
        values: dict[str, Any] = {"instanceType": "g6.xlarge", "market": "spot", "az": "cheapest",
                                  "owner": "rigbench-test", "allowedCidrs": [f"{SUBNET}.0.0/16"],
                                  "publicKey": self.public_key, "ttlHours": 8}
        values.update(config or {})
        document = {"aws:region": "us-east-1"}
        for key, value in values.items():
            document[key if ":" in key else f"rigbench:{key}"] = value
        path = self.path / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": document}, sort_keys=False))
        return path


@pytest.fixture()
def project_dir(tmp_path: Path) -> ProjectDir:
    """A project folder with two stacks, g6-xlarge and g6-2xlarge (rewrite them with ``write_stack``)."""
    folder = tmp_path / "project"
    folder.mkdir()
    shutil.copy(ROOT / "Pulumi.yaml", folder / "Pulumi.yaml")
    write_key(tmp_path / "stack_key")
    project = ProjectDir(folder, (tmp_path / "stack_key.pub").read_text().strip())
    for name, config in DEFAULT_STACKS.items():
        project.write_stack(name, config)
    return project
