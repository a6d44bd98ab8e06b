"""The rehearsal's loopback stand-ins, each answering the real client once: an sshd unpacked from
Debian packages (the GPU machine's path: no OpenSSH installed) serving Fabric's commands and SFTP,
the hub through ``core.hub_download``, the IMDS through the spot watcher script, S3 through boto3."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import boto3
import psutil
import pytest

from core import hub_download
from core.cache import cache_root
from core.errors import StudyError
from infra.user_data import template_text
from provision.connection import connect
from rigbench.studies.rehearsal.hub import StandInHub
from rigbench.studies.rehearsal.imds import StandInImds
from rigbench.studies.rehearsal.s3 import moto_s3
from rigbench.studies.rehearsal.sshd import private_sshd

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
BUNDLE_SCRIPT = ROOT / "rigbench/studies/rehearsal_bundle.sh"
UNREACHABLE = ("Failed to fetch", "Temporary failure resolving", "Could not resolve", "Unable to connect",
               "Could not connect", "Network is unreachable")


@pytest.fixture(scope="session")
def openssh_tree() -> Path:
    """OpenSSH unpacked from Debian packages into the cache, once (the bundle script leaves a finished
    tree alone); workers that start together take turns through a lock."""
    if shutil.which("apt-get") is None or shutil.which("dpkg") is None:
        pytest.skip("no apt-get/dpkg here: the rehearsal's sshd bundle is made on Debian or Ubuntu")
    folder = cache_root() / "rehearsal" / "openssh"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(["bash", str(BUNDLE_SCRIPT), str(folder)], capture_output=True, text=True,
                              timeout=300, check=False)
    if done.returncode != 0:
        if any(sign in done.stderr for sign in UNREACHABLE):
            pytest.skip(f"apt-get download cannot reach a Debian mirror: {done.stderr.strip().splitlines()[-1]}")
        pytest.fail(f"rehearsal_bundle.sh failed ({done.returncode}): {done.stderr.strip()}")
    return folder / "tree"


def test_the_unpacked_sshd_serves_fabric_commands_and_sftp(openssh_tree: Path, tmp_path: Path) -> None:
    binary = openssh_tree / "usr/sbin/sshd"
    with private_sshd(tmp_path / "sshd", tree=openssh_tree, binary=binary) as server:
        process = psutil.Process(server.pid)
        assert Path(process.exe()) == binary.resolve()
        maps = Path(f"/proc/{server.pid}/maps").read_text()
        libcrypto = openssh_tree.resolve() / "usr/lib/x86_64-linux-gnu/libcrypto.so.3"
        assert str(libcrypto) in maps, "sshd runs on the tree's libraries"
        c = connect(server.host, user=server.user, port=server.port, key_filename=str(server.key),
                    known_hosts=server.known_hosts(tmp_path / "known_hosts"), strict_host_key=True)
        try:
            said = c.run("echo $PATH; id -un; echo ${LD_LIBRARY_PATH:-none}", hide=True, in_stream=False)
            said = said.stdout.splitlines()
            assert str(openssh_tree / "usr/bin") in said[0].split(":")  # SetEnv (a shell rc may add more)
            assert said[1:] == [server.user, "none"], "a session's commands load this machine's libraries"
            payload = os.urandom(100_000)
            (tmp_path / "up.bin").write_bytes(payload)
            c.put(str(tmp_path / "up.bin"), str(tmp_path / "remote.bin"))  # SFTP: the tree's sftp-server
            c.get(str(tmp_path / "remote.bin"), str(tmp_path / "down.bin"))
            assert (tmp_path / "down.bin").read_bytes() == payload
        finally:
            c.close()
    assert not psutil.pid_exists(server.pid) or psutil.Process(server.pid).status() == psutil.STATUS_ZOMBIE
    assert "sftp-server" in (tmp_path / "sshd" / "sshd_config").read_text()


def test_the_hub_serves_a_download_and_the_models_license(tmp_path: Path) -> None:
    hub = StandInHub()
    body = os.urandom(50_000)
    hub.add("acme/tiny-gguf", "tiny.gguf", body)
    hub.licenses["acme/tiny-gguf"] = "apache-2.0"
    with hub.serving() as url:
        outcome = hub_download.download(hub_download.resolve_url("acme/tiny-gguf", "tiny.gguf", url),
                                        str(tmp_path / "tiny.gguf"), digests_path=str(tmp_path / "digests.json"),
                                        sha256=hashlib.sha256(body).hexdigest(), log=lambda line: None)
        with urllib.request.urlopen(f"{url}/api/models/acme/tiny-gguf?blobs=true", timeout=10) as answer:
            info = json.load(answer)
    assert outcome["downloaded"] and (tmp_path / "tiny.gguf").read_bytes() == body
    assert [request["path"] for request in hub.requests] == ["/acme/tiny-gguf/resolve/main/tiny.gguf"]
    assert info["cardData"] == {"license": "apache-2.0"}
    assert info["siblings"][0]["rfilename"] == "tiny.gguf"
    assert info["siblings"][0]["lfs"]["sha256"] == hashlib.sha256(body).hexdigest()


def test_the_imds_notice_switched_on_mid_run_stops_the_spot_watcher(tmp_path: Path) -> None:
    imds = StandInImds()
    script = tmp_path / "rigbench-spot-watcher"
    script.write_text(template_text("spot_watcher.sh"))
    marker = tmp_path / "spot-interruption.json"
    with imds.serving() as url:
        env = {"PATH": os.environ["PATH"], "RIGBENCH_IMDS_URL": url, "RIGBENCH_SPOT_MARKER": str(marker),
               "RIGBENCH_SPOT_LOG": str(tmp_path / "watcher.log"), "RIGBENCH_SPOT_POLL_SECONDS": "0.05"}
        watcher = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 20
            while len(imds.polls) < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(imds.polls) >= 3 and watcher.poll() is None and not marker.exists()
            imds.announce(time="2026-12-05T00:02:00Z")
            _, stderr = watcher.communicate(timeout=20)
        finally:
            if watcher.poll() is None:
                watcher.kill()
    assert watcher.returncode == 0, stderr
    assert json.loads(marker.read_text())["instance_action"] == {"action": "terminate",
                                                                 "time": "2026-12-05T00:02:00Z"}
    assert set(imds.polls) == {"token-1"}, "every read carries the IMDSv2 token"


def test_s3_answers_boto3_through_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with moto_s3("rigbench-rehearsal") as s3:
        for name in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(name, raising=False)
        for name, value in s3.env.items():
            monkeypatch.setenv(name, value)
        client = boto3.client("s3")
        client.put_object(Bucket=s3.bucket, Key="builds/x.tar", Body=b"built")
        assert client.get_object(Bucket=s3.bucket, Key="builds/x.tar")["Body"].read() == b"built"
        assert s3.endpoint.startswith("http://127.0.0.1:")


def test_s3_without_moto_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "moto.server", None)  # as if moto were not installed
    with pytest.raises(StudyError, match=r"pip install 'rigbench\[rehearsal\]'"), moto_s3("bucket"):
        pass


def test_without_a_system_sshd_the_unpacked_one_is_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from rigbench.studies.rehearsal import sshd

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sshd, "SYSTEM_SSHD", tmp_path / "absent")
    with pytest.raises(StudyError, match="rehearsal_bundle.sh"):
        sshd.find_sshd(tmp_path / "tree")
    unpacked = tmp_path / "tree/usr/sbin/sshd"
    unpacked.parent.mkdir(parents=True)
    unpacked.write_text("#!/bin/sh\n")
    unpacked.chmod(0o755)
    assert sshd.find_sshd(tmp_path / "tree") == unpacked
