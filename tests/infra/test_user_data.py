"""The user-data script: rendered, parsed by bash, and run against fake disk and system commands.

Every command the script would use to touch the machine (mountpoint, lsblk, mdadm, mkfs.ext4,
mount, chown, systemctl, shutdown) is a small fake script in a temporary folder that records its
arguments; every path is under that folder. Nothing is mounted or formatted.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.errors import InfraError
from infra.user_data import USER_DATA_LIMIT_BYTES, UserDataSettings, render_user_data, template_text
from provision.rig_paths import RigPaths

NOW = 1_796_000_000
SETTINGS = UserDataSettings(nvme_path="/opt/dlami/nvme", owner_user="ubuntu", ttl_hours=8, market="spot")
INSTANCE_STORE = "Amazon EC2 NVMe Instance Storage"
EBS = "Amazon Elastic Block Store"

FAKE_COMMAND = """#!/bin/bash
echo "$(basename "$0") $*" >>"{calls}"
{body}
"""


def bash_syntax_error(script: str, tmp_path: Path) -> str:
    path = tmp_path / "script.sh"
    path.write_text(script)
    result = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    return result.stderr if result.returncode else ""


@pytest.mark.parametrize("market", ["spot", "on-demand"])
def test_rendered_script_is_valid_bash(tmp_path, market):
    settings = UserDataSettings(nvme_path="/mnt/work", owner_user="ec2-user", ttl_hours=3, market=market)
    script = render_user_data(settings)
    assert bash_syntax_error(script, tmp_path) == ""
    assert script.startswith("#!/bin/bash\n")
    assert len(script.encode()) <= USER_DATA_LIMIT_BYTES
    for line in [
        ': "${RIGBENCH_NVME_PATH:=/mnt/work}"',
        ': "${RIGBENCH_OWNER_USER:=ec2-user}"',
        ': "${RIGBENCH_TTL_HOURS:=3}"',
        f': "${{RIGBENCH_MARKET:={market}}}"',
    ]:
        assert line in script
    assert "@@RIGBENCH_" not in script


@pytest.mark.parametrize("name", ["user_data.sh", "spot_watcher.sh", "ttl_guard.sh"])
def test_templates_are_valid_bash(tmp_path, name):
    assert bash_syntax_error(template_text(name), tmp_path) == ""


def test_unsafe_setting_is_refused():
    with pytest.raises(InfraError, match="characters a shell would read"):
        render_user_data(UserDataSettings(nvme_path="/opt/$(reboot)", owner_user="ubuntu", ttl_hours=8, market="spot"))


def test_spot_watcher_polls_every_five_seconds_by_default():
    assert 'INTERVAL="${RIGBENCH_SPOT_POLL_SECONDS:-5}"' in template_text("spot_watcher.sh")


@dataclass
class FakeMachine:
    """A temporary folder standing in for the instance, with fake commands that log their calls."""

    root: Path

    def __post_init__(self) -> None:
        self.bin = self.root / "fakebin"
        self.bin.mkdir()
        (self.root / "etc").mkdir()  # exists on every machine; the script appends to etc/fstab
        self.calls = self.root / "calls.log"
        self.calls.touch()
        self.lsblk_output = self.root / "lsblk.txt"
        self.lsblk_output.write_text("")
        self.mounted_after = self.root / "mounted-after"  # mountpoint succeeds from this call on
        self.mounted_after.write_text("0")
        self.counter = self.root / "mountpoint-calls"
        self.counter.write_text("0")
        for name in ["mdadm", "mkfs.ext4", "mount", "chown", "systemctl", "shutdown"]:
            self.fake(name, "exit 0")
        self.fake("lsblk", f'cat "{self.lsblk_output}"')
        self.fake(
            "mountpoint",
            f'n=$(( $(cat "{self.counter}") + 1 )); echo $n >"{self.counter}"\n'
            f'limit=$(cat "{self.mounted_after}")\n'
            '[[ $limit -gt 0 && $n -ge $limit ]]',
        )

    def fake(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(FAKE_COMMAND.format(calls=self.calls, body=body))
        path.chmod(0o755)

    def disks(self, *rows: tuple[str, str]) -> None:
        self.lsblk_output.write_text("".join(f"{name} {model}\n" for name, model in rows))

    def mount_appears_on_call(self, n: int) -> None:
        self.mounted_after.write_text(str(n))

    @property
    def nvme(self) -> Path:
        return self.root / "opt" / "dlami" / "nvme"

    @property
    def state(self) -> Path:
        return self.root / "var" / "lib" / "rigbench"

    def env(self, **overrides: str) -> dict[str, str]:
        commands = {
            "RIGBENCH_MDADM": "mdadm", "RIGBENCH_MKFS": "mkfs.ext4", "RIGBENCH_MOUNT": "mount",
            "RIGBENCH_MOUNTPOINT": "mountpoint", "RIGBENCH_LSBLK": "lsblk", "RIGBENCH_SYSTEMCTL": "systemctl",
            "RIGBENCH_CHOWN": "chown", "RIGBENCH_SHUTDOWN": "shutdown",
        }
        env = {
            "PATH": os.environ["PATH"],
            **{key: str(self.bin / name) for key, name in commands.items()},
            "RIGBENCH_NVME_PATH": str(self.nvme),
            "RIGBENCH_STATE_DIR": str(self.state),
            "RIGBENCH_BIN_DIR": str(self.root / "usr" / "local" / "bin"),
            "RIGBENCH_SYSTEMD_DIR": str(self.root / "etc" / "systemd" / "system"),
            "RIGBENCH_FSTAB": str(self.root / "etc" / "fstab"),
            "RIGBENCH_LOG": str(self.root / "setup.log"),
            "RIGBENCH_NOW": str(NOW),
            "RIGBENCH_POLL_SECONDS": "0.01",
            "RIGBENCH_NVME_WAIT_SECONDS": "0",
        }
        env.update(overrides)
        return env

    def run_user_data(self, settings: UserDataSettings = SETTINGS, **overrides: str) -> subprocess.CompletedProcess:
        script = self.root / "user-data.sh"
        script.write_text(render_user_data(settings))
        return subprocess.run(
            ["bash", str(script)], env=self.env(**overrides), capture_output=True, text=True, timeout=60
        )

    def logged(self, command: str) -> list[str]:
        return [line for line in self.calls.read_text().splitlines() if line.split(" ", 1)[0] == command]


@pytest.fixture
def machine(tmp_path: Path) -> FakeMachine:
    return FakeMachine(tmp_path)


def test_dlami_volume_already_mounted_is_used_as_is(machine):
    machine.mount_appears_on_call(1)
    machine.disks(("nvme1n1", INSTANCE_STORE))
    result = machine.run_user_data()
    assert result.returncode == 0, result.stderr
    assert machine.logged("mkfs.ext4") == machine.logged("mdadm") == machine.logged("mount") == []
    for folder in ["models", "runs", "build", "logs"]:
        assert (machine.nvme / "rigbench" / folder).is_dir()
    assert machine.logged("chown") == [f"chown -R ubuntu: {machine.nvme}/rigbench"]


def test_waits_for_the_dlami_volume_to_appear(machine):
    machine.mount_appears_on_call(4)
    result = machine.run_user_data(RIGBENCH_NVME_WAIT_SECONDS="30")
    assert result.returncode == 0, result.stderr
    assert len(machine.logged("mountpoint")) == 4
    assert machine.logged("mkfs.ext4") == []
    assert "is mounted" in result.stderr


def test_several_instance_store_disks_become_one_raid0_ext4_volume(machine):
    machine.disks(("nvme0n1", EBS), ("nvme1n1", INSTANCE_STORE), ("nvme2n1", INSTANCE_STORE))
    result = machine.run_user_data()
    assert result.returncode == 0, result.stderr
    assert machine.logged("mdadm") == [
        "mdadm --create /dev/md0 --level=0 --raid-devices=2 --run /dev/nvme1n1 /dev/nvme2n1"
    ]
    assert machine.logged("mkfs.ext4") == ["mkfs.ext4 -F -q -L rigbench-nvme /dev/md0"]
    assert machine.logged("mount") == [f"mount -o defaults,noatime /dev/md0 {machine.nvme}"]
    fstab = (machine.root / "etc" / "fstab").read_text()
    assert fstab == f"LABEL=rigbench-nvme {machine.nvme} ext4 defaults,noatime,nofail 0 2\n"
    calls = machine.calls.read_text()
    assert calls.index("mdadm") < calls.index("mkfs.ext4") < calls.index("mount ")


def test_one_instance_store_disk_is_formatted_without_raid(machine):
    machine.disks(("nvme0n1", EBS), ("nvme1n1", INSTANCE_STORE))
    result = machine.run_user_data()
    assert result.returncode == 0, result.stderr
    assert machine.logged("mdadm") == []
    assert machine.logged("mkfs.ext4") == ["mkfs.ext4 -F -q -L rigbench-nvme /dev/nvme1n1"]
    assert machine.logged("mount") == [f"mount -o defaults,noatime /dev/nvme1n1 {machine.nvme}"]


def test_no_instance_store_leaves_a_folder_on_the_root_volume(machine):
    machine.disks(("nvme0n1", EBS))
    result = machine.run_user_data()
    assert result.returncode == 0, result.stderr
    assert machine.logged("mkfs.ext4") == machine.logged("mount") == []
    assert (machine.nvme / "rigbench" / "runs").is_dir()
    assert "no instance-store disks found" in result.stderr


def test_a_failing_format_stops_the_setup(machine):
    machine.disks(("nvme1n1", INSTANCE_STORE))
    machine.fake("mkfs.ext4", "exit 1")
    result = machine.run_user_data()
    assert result.returncode != 0
    assert not (machine.state / "setup-complete.json").exists()


def test_spot_setup_installs_and_starts_the_watcher_and_the_ttl_guard(machine):
    machine.mount_appears_on_call(1)
    result = machine.run_user_data()
    assert result.returncode == 0, result.stderr
    installed = machine.root / "usr" / "local" / "bin"
    helpers = {"rigbench-spot-watcher": "spot_watcher.sh", "rigbench-ttl-guard": "ttl_guard.sh"}
    for installed_name, template in helpers.items():
        assert (installed / installed_name).read_text().rstrip("\n") == template_text(template).rstrip("\n")
    assert os.access(installed / "rigbench-spot-watcher", os.X_OK)
    unit = (machine.root / "etc" / "systemd" / "system" / "rigbench-spot-watcher.service").read_text()
    # the marker the rig's sweep is told to watch (provision's RigPaths) is the one the watcher writes
    assert f"Environment=RIGBENCH_SPOT_MARKER={RigPaths(work=str(machine.nvme)).spot_marker}\n" in unit
    assert machine.logged("systemctl") == [
        "systemctl daemon-reload",
        "systemctl enable --now rigbench-ttl-guard.service",
        "systemctl enable --now rigbench-spot-watcher.service",
    ]
    assert (machine.state / "ttl-deadline").read_text().strip() == str(NOW + 8 * 3600)
    complete = json.loads((machine.state / "setup-complete.json").read_text())
    assert complete["market"] == "spot"


def test_on_demand_setup_does_not_start_the_spot_watcher(machine):
    machine.mount_appears_on_call(1)
    settings = UserDataSettings(nvme_path="/opt/dlami/nvme", owner_user="ubuntu", ttl_hours=2, market="on-demand")
    result = machine.run_user_data(settings)
    assert result.returncode == 0, result.stderr
    assert "systemctl enable --now rigbench-spot-watcher.service" not in machine.logged("systemctl")
    assert (machine.state / "ttl-deadline").read_text().strip() == str(NOW + 2 * 3600)


def test_ttl_deadline_is_written_once(machine):
    machine.mount_appears_on_call(1)
    assert machine.run_user_data().returncode == 0
    later = machine.run_user_data(RIGBENCH_NOW=str(NOW + 5000))
    assert later.returncode == 0, later.stderr
    assert (machine.state / "ttl-deadline").read_text().strip() == str(NOW + 8 * 3600)


def run_ttl_guard(machine: FakeMachine, now: int, deadline: int | None) -> subprocess.CompletedProcess:
    machine.state.mkdir(parents=True, exist_ok=True)
    if deadline is not None:
        (machine.state / "ttl-deadline").write_text(f"{deadline}\n")
    guard = machine.root / "ttl_guard.sh"
    guard.write_text(template_text("ttl_guard.sh"))
    return subprocess.run(
        ["bash", str(guard)], env=machine.env(RIGBENCH_NOW=str(now)), capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize(
    ("seconds_left", "expected"),
    [
        (8 * 3600, "shutdown -h +480"),
        (61, "shutdown -h +2"),
        (60, "shutdown -h +1"),
        (0, "shutdown -h now"),
        (-3600, "shutdown -h now"),
    ],
)
def test_ttl_guard_schedules_the_halt_at_the_deadline(machine, seconds_left, expected):
    result = run_ttl_guard(machine, NOW, NOW + seconds_left)
    assert result.returncode == 0, result.stderr
    [call] = machine.logged("shutdown")
    assert call.startswith(expected + " ")


def test_ttl_guard_without_a_deadline_schedules_nothing(machine):
    result = run_ttl_guard(machine, NOW, None)
    assert result.returncode == 1
    assert machine.logged("shutdown") == []
    assert "no deadline" in result.stderr


def test_installed_ttl_guard_halts_at_the_deadline_the_setup_wrote(machine):
    machine.mount_appears_on_call(1)
    assert machine.run_user_data().returncode == 0
    guard = machine.root / "usr" / "local" / "bin" / "rigbench-ttl-guard"
    # A reboot 3 hours in: 5 hours are left.
    result = subprocess.run(
        [str(guard)], env=machine.env(RIGBENCH_NOW=str(NOW + 3 * 3600)), capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stderr
    assert machine.logged("shutdown")[-1].startswith("shutdown -h +300 ")
