"""Replicas under CUDA MPS on the SSH rig, with a stand-in control program the rig finds where drivers put it:
the daemon supervised, started before the replicas, each replica its client, shown by status and logs, recorded
in the swept runs' manifests, quit by stop; a refusal and a daemon that never answers, each one line."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import psutil
import pytest

import core.mps
from core.errors import ProvisionError
from core.profile import RigProfile, load_profile
from core.rundir import RunDir
from provision import mps as rig_mps
from provision.connection import connect, run
from provision.serve import ServeState, check_mps, logs, mps_status, read_state, serve, start_mps, status, stop
from provision.sweep import fetch, sweep
from rigbench.studies.rehearsal.sshd import STANDARD_PATH, SYSTEM_SSHD, private_sshd

pytestmark = pytest.mark.integration

STANDIN = Path(__file__).resolve().parents[1] / "llamacpp" / "standin_mps_control.py"
RIGBENCH = str(Path(sys.executable).parent / "rigbench")


def mps_profile(folder: Path, mps: str = "true", replicas: int = 2) -> RigProfile:
    """The tiny profile (the model built_rig downloads) as ``replicas`` servers with ``[server] mps``."""
    path = folder / "tiny-mps.toml"
    path.write_text(
        '[model.synthetic]\narchitecture = "llama"\npreset = "tiny"\nseed = 0\n\n'
        f'[server]\nargs = "-c 4096 --parallel 4 -kvu --metrics --slots"\nreplicas = {replicas}\nmps = {mps}\n\n'
        "[request]\nmax_tokens = 16\ntemperature = 0.0\ncache_prompt = false\nignore_eos = true\n")
    return load_profile(path)


@pytest.fixture
def driver_folder(rig, tmp_path, monkeypatch) -> Path:
    """A folder holding the stand-in as ``nvidia-cuda-mps-control``, the one place the rig is told to look (a rig
    whose PATH has the real program cannot stand in)."""
    if run(rig, "command -v nvidia-cuda-mps-control", warn=True).ok:
        pytest.skip("the rig's PATH has a real nvidia-cuda-mps-control")
    folder = tmp_path / "driver-bin"
    folder.mkdir()
    (folder / "nvidia-cuda-mps-control").symlink_to(STANDIN)
    monkeypatch.setattr(core.mps, "CONTROL_FOLDERS", (str(tmp_path / "no-such-folder"), str(folder)))
    return folder




def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def said(record: Path) -> list[str]:
    """What the stand-in recorded, without the pids."""
    return [line.split(" ", 1)[1] for line in record.read_text().splitlines()]


def daemon_pids(record: Path) -> list[int]:
    """The stand-in daemons started in the foreground, by the pids they recorded."""
    return [int(line.split(" ", 1)[0]) for line in record.read_text().splitlines() if line.endswith(" invoked -f")]


def test_replicas_serve_under_a_supervised_mps_daemon_swept_and_stopped(built_rig, driver_folder, replica_ports,
                                                                          tmp_path, capsys) -> None:
    rig, paths, _, _ = built_rig
    profile = mps_profile(tmp_path)
    base = replica_ports.free_ports(2)
    record = Path(paths.serve) / "mps" / "standin-commands.log"  # the stand-in's record, in the daemon's log folder
    pids: list[int] = []
    mps = None
    try:
        state = serve(rig, profile, paths, port=base, health_timeout=120)
        mps = state.mps
        assert mps is not None and mps.ran and mps.started_here
        assert mps.reason == "profile 'tiny-mps': [server] mps = true"
        assert mps.control == str(driver_folder / "nvidia-cuda-mps-control")
        assert (mps.script, mps.pid_file, mps.unit) == (f"{paths.serve}/supervise-mps.sh",
                                                         f"{paths.serve}/supervisor-mps.pid", None)
        assert mps.log_dir == f"{paths.serve}/mps" and mps.pipe_dir.startswith("/tmp/rigbench-mps-")
        assert len(f"{mps.pipe_dir}/control") < 100, "a Unix socket's path must stay short"
        assert ServeState.model_validate_json(Path(paths.serve, "serve.json").read_text()).mps == mps

        supervisor = psutil.Process(int(Path(mps.pid_file).read_text()))
        assert "supervise-mps.sh" in " ".join(supervisor.cmdline())
        (daemon,) = [child for child in supervisor.children() if "-f" in child.cmdline()]
        assert daemon.environ()["CUDA_MPS_PIPE_DIRECTORY"] == mps.pipe_dir
        assert daemon.environ()["CUDA_MPS_LOG_DIRECTORY"] == mps.log_dir
        assert "CUDA_VISIBLE_DEVICES" not in daemon.environ()
        pids += [supervisor.pid, daemon.pid]
        for replica in state.replicas:
            assert replica.command[:2] == ["/usr/bin/env", f"CUDA_MPS_PIPE_DIRECTORY={mps.pipe_dir}"]
            server = replica_ports.server_on(replica.port)
            assert server.environ()["CUDA_MPS_PIPE_DIRECTORY"] == mps.pipe_dir
            assert daemon.create_time() < server.create_time(), "the daemon starts before any replica"
            pids.append(server.pid)
        told = said(record)
        assert told[:2] == ["invoked (commands on stdin)", "client get_server_list"], "asked first: none answered"
        assert told.index("invoked -f") < told.index(f"daemon started pipe={mps.pipe_dir}") < told.index(
            "daemon got get_server_list"), "then started in the foreground, and answering before the replicas"

        assert "[serve] MPS on: profile 'tiny-mps': [server] mps = true" in capsys.readouterr().out
        report = status(rig, paths)["mps"]
        assert report == {"ran": True, "reason": mps.reason, "service": "running", "supervisor": mps.script,
                          "answers": True, "pipe_dir": mps.pipe_dir, "log_dir": mps.log_dir, "control": mps.control,
                          "version": None}
        tails = logs(rig, paths, lines=5)
        assert f"==> replica 1 (port {base + 1})" in tails
        header = f"==> MPS control daemon: {mps.log_dir}/control.log <==\n"
        assert header in tails and "Starting control daemon" in tails.split(header, 1)[1]

        local_runs = tmp_path / "runs"
        copied = sweep(rig, profile, {"user_steps": [2], "warmup_seconds": 0.5, "measure_seconds": 1.5}, paths,
                       local_runs=local_runs, rigbench=RIGBENCH)
        manifest = RunDir(copied[0]).read_manifest()
        assert manifest.status == "complete", manifest.status_detail
        assert manifest.server.mps == mps.info() and manifest.server.mps.ran and manifest.server.mps.started_here
        assert len(manifest.server.replicas) == 2
        fetch(rig, paths, local_runs, [copied[0].name])  # the rig's own manifest again: what the rig knew stays
        assert RunDir(copied[0]).read_manifest().server.mps == mps.info()
    finally:
        stopped = stop(rig, paths)
        if mps is not None:
            shutil.rmtree(Path(mps.pipe_dir).parent, ignore_errors=True)
    assert stopped and "llama-server stopped (2 replicas), MPS control daemon stopped" in capsys.readouterr().out
    assert said(record)[-4:] == ["invoked (commands on stdin)", "client quit", "daemon got quit", "daemon quit"]
    assert all(gone(pid) for pid in pids), "something outlived stop"
    assert not Path(mps.pid_file).exists()
    after = mps_status(rig, read_state(rig, paths))
    assert (after["service"], after["answers"]) == ("stopped", False)


def test_mps_asked_for_without_the_control_program_is_one_line_before_anything_starts(rig, rig_paths, tmp_path,
                                                                                       monkeypatch) -> None:
    if run(rig, "command -v nvidia-cuda-mps-control", warn=True).ok:
        pytest.skip("the rig's PATH has a real nvidia-cuda-mps-control")
    monkeypatch.setattr(core.mps, "CONTROL_FOLDERS", (str(tmp_path / "empty"),))
    with pytest.raises(ProvisionError) as raised:
        serve(rig, mps_profile(tmp_path), rig_paths, port=18080, health_timeout=5)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"serve: profile 'tiny-mps': [server] mps = true, but nvidia-cuda-mps-control was found neither on the PATH "
        f"nor in {tmp_path / 'empty'}; ")
    assert message.endswith("(searched on the rig)")
    assert not Path(rig_paths.work).exists(), "nothing was written on the rig"
    with pytest.raises(ProvisionError, match=r"^serve: profile 'tiny-mps': \[server\] mps = true, but "):
        check_mps(rig, mps_profile(tmp_path))  # the same refusal, for a caller that has not built yet
    # "auto" without the program is no refusal: the replicas take turns, and the decision says why
    auto = rig_mps.decide(rig, "auto", "tiny-mps", [0, 0])
    assert not auto.run and "replicas share GPU 0, but nvidia-cuda-mps-control was not found" in auto.reason


def test_the_control_program_is_found_in_the_driver_folders_and_auto_runs_it_only_for_a_shared_gpu(
        rig, driver_folder) -> None:
    control = str(driver_folder / "nvidia-cuda-mps-control")
    assert rig_mps.find_control(rig) == control
    assert rig_mps.decide(rig, "auto", "p", [0, 0]).run and rig_mps.decide(rig, "auto", "p", [0, 0]).control == control
    assert not rig_mps.decide(rig, "auto", "p", [0, 1]).run, "replicas one per GPU need none"
    assert not rig_mps.decide(rig, False, "p", [0, 0]).run
    assert rig_mps.decide(rig, True, "p", [None]).run, "one server with mps = true runs under it too"


def test_the_control_program_on_the_sessions_path_is_found_there_first(tmp_path, monkeypatch) -> None:
    """A DLAMI rig (``/usr/bin``) and the lent H200 (``/usr/local/nvidia/bin``) both have it on the PATH."""
    on_path = tmp_path / "on-path"
    on_path.mkdir()
    (on_path / "nvidia-cuda-mps-control").symlink_to(STANDIN)
    folder = tmp_path / "driver-bin"  # where drivers put it: searched only when the PATH has none
    folder.mkdir()
    (folder / "nvidia-cuda-mps-control").symlink_to(STANDIN)
    monkeypatch.setattr(core.mps, "CONTROL_FOLDERS", (str(folder),))
    with private_sshd(tmp_path / "sshd", binary=SYSTEM_SSHD, set_env={"PATH": f"{on_path}:{STANDARD_PATH}"}) as server:
        c = connect(server.host, user=server.user, port=server.port, key_filename=str(server.key),
                    known_hosts=server.known_hosts(tmp_path / "known_hosts"), strict_host_key=True)
        try:
            assert rig_mps.find_control(c) == str(on_path / "nvidia-cuda-mps-control")
            decision = rig_mps.decide(c, True, "p", [None, None])
        finally:
            c.close()
    assert decision.run and decision.control == str(on_path / "nvidia-cuda-mps-control")


def test_a_daemon_that_never_answers_is_stopped_and_the_step_fails_in_one_line(rig, rig_paths, tmp_path,
                                                                              monkeypatch) -> None:
    if run(rig, "command -v nvidia-cuda-mps-control", warn=True).ok:
        pytest.skip("the rig's PATH has a real nvidia-cuda-mps-control")
    folder = tmp_path / "driver-bin"
    folder.mkdir()
    wrapper = folder / "nvidia-cuda-mps-control"  # the stand-in whose daemon starts but never listens
    wrapper.write_text(f"#!/bin/sh\nSTANDIN_MPS_FAIL=answer STANDIN_MPS_HANG_S=5 exec python3 {STANDIN} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(core.mps, "CONTROL_FOLDERS", (str(folder),))
    monkeypatch.setattr(rig_mps, "START_TIMEOUT_S", 1.5)
    decision = rig_mps.decide(rig, True, "p", [None, None])
    mps = rig_mps.served_mps(rig, decision, rig_paths)
    state = ServeState(profile="p", command=["llama-server"], supervisor="process", port=18080, host="127.0.0.1",
                       log=f"{rig_paths.serve}/llama-server.log", mps=mps)
    try:
        with pytest.raises(ProvisionError) as raised:
            start_mps(rig, rig_paths, state)
    finally:
        shutil.rmtree(Path(mps.pipe_dir).parent, ignore_errors=True)
    message = str(raised.value)
    assert "\n" not in message and message.startswith(
        f"serve: the MPS control daemon ({rig_paths.serve}/supervise-mps.sh) did not answer get_server_list at "
        f"{mps.pipe_dir} within 1.5 s and was stopped; last lines of {mps.log_dir}/control.log: ")
    assert "Starting control daemon" in message
    assert not Path(rig_paths.serve, "supervisor-mps.pid").exists()
    record = Path(mps.log_dir, "standin-commands.log")
    assert "client quit" in said(record), "the supervisor's trap asked it to quit"
    supervisors = [process.pid for process in psutil.process_iter(["cmdline"])
                   if f"{rig_paths.serve}/supervise-mps.sh" in (process.info["cmdline"] or [])]
    assert daemon_pids(record) and all(gone(pid) for pid in daemon_pids(record) + supervisors), \
        "nothing of the daemon is left running"
