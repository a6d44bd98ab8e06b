"""Both front doors over the private sshd: `rigbench provision` (host from a fake `pulumi`) and `fab` (fabfile.py)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.rundir import RunDir

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]


def fake_pulumi(folder: Path, outputs: dict, stack: str = "g6-test") -> Path:
    """A `pulumi` on PATH that prints the stack's outputs like `pulumi stack output --json`."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "pulumi"
    script.write_text(
        "#!/bin/sh\n"
        f'if [ "$1 $2" = "stack --show-name" ]; then echo {stack}; exit 0; fi\n'
        f'if [ "$1 $2 $3" = "stack output --json" ]; then cat <<\'EOF\'\n{json.dumps(outputs)}\nEOF\nexit 0; fi\n'
        'echo "fake pulumi: unexpected arguments $*" >&2; exit 1\n'
    )
    script.chmod(0o755)
    return folder


def environment(tmp_path: Path, path_first: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "RIGBENCH_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    env["PATH"] = os.pathsep.join(filter(None, [str(path_first) if path_first else None, str(BIN), env["PATH"]]))
    return env


def pin(sshd, tmp_path: Path, stack: str) -> Path:
    known = tmp_path / "home" / "known_hosts" / stack
    known.parent.mkdir(parents=True, exist_ok=True)
    return sshd.known_hosts(known)


def test_rigbench_provision_takes_the_rig_from_the_stack(sshd, tmp_path: Path) -> None:
    work = tmp_path / "nvme"
    outputs = {"publicIp": sshd.host, "sshUser": sshd.user, "nvmePath": str(work), "sshKeyPath": str(sshd.key)}
    pin(sshd, tmp_path, "g6-test")
    env = environment(tmp_path, fake_pulumi(tmp_path / "bin", outputs))
    result = subprocess.run([str(BIN / "rigbench"), "provision", "--port", str(sshd.port), "--strict", "status"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["service"] == "stopped" and report["health"]["status"] == 0
    assert (work / "rigbench" / "bin" / "rig_agent.py").exists(), "the stack's nvmePath must be the work folder"


def test_rigbench_provision_without_pulumi_or_host_says_what_to_do(tmp_path: Path) -> None:
    env = environment(tmp_path)
    env["PATH"] = str(BIN)  # no pulumi here
    result = subprocess.run([str(BIN / "rigbench"), "provision", "status"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == ("rigbench: error: no --host given and the pulumi CLI is not on PATH; "
                                     "pass --host HOST or install pulumi")
    helped = subprocess.run([str(BIN / "rigbench"), "provision", "serve", "--help"], capture_output=True, text=True,
                            env=env, timeout=60)
    assert helped.returncode == 0 and "--public" in helped.stdout, "help must not need the stack"


def test_stack_without_an_address_is_a_clear_error(tmp_path: Path) -> None:
    env = environment(tmp_path, fake_pulumi(tmp_path / "bin", {"instanceId": "i-123"}))
    result = subprocess.run([str(BIN / "rigbench"), "provision", "status"], capture_output=True, text=True, env=env,
                            timeout=60)
    assert result.returncode == 2 and "no publicIp or publicDns output (found: instanceId)" in result.stderr


def test_unknown_profile_is_named(sshd, tmp_path: Path) -> None:
    pin(sshd, tmp_path, "dev")
    result = subprocess.run(
        [str(BIN / "rigbench"), "provision", "--host", sshd.host, "--port", str(sshd.port), "--user", sshd.user,
         "-i", str(sshd.key), "--work", str(tmp_path / "nvme"), "--profile", "no-such-rig", "download"],
        capture_output=True, text=True, env=environment(tmp_path), timeout=60)
    assert result.returncode == 2 and "unknown profile 'no-such-rig'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, "one line, no traceback"


def test_fab_cli_runs_tasks_from_the_repo_root(sshd, tmp_path: Path) -> None:
    pin(sshd, tmp_path, "dev")
    work = str(tmp_path / "nvme")
    command = [str(BIN / "fab"), "-H", f"{sshd.user}@{sshd.host}:{sshd.port}", "-i", str(sshd.key),
               "toolkit", "status", "--work", work, "stop", "--work", work]
    result = subprocess.run(command, capture_output=True, text=True, env=environment(tmp_path), cwd=REPO, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "no NVIDIA GPU" in result.stdout and '"service": "stopped"' in result.stdout
    assert "nothing was running" in result.stdout


def test_fab_without_a_host_is_one_line(tmp_path: Path) -> None:
    result = subprocess.run([str(BIN / "fab"), "status"], capture_output=True, text=True, env=environment(tmp_path),
                            cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip() == "rigbench: error: status: no rig given; pass -H ubuntu@HOST (and -i KEY)"


def test_fab_and_rigbench_provision_offer_the_same_steps_and_options() -> None:
    """Both are made from one table: the same task names, and each task's own options in both."""
    from rigbench.cli import load_command
    from rigbench.provision_steps import STEPS

    listed = subprocess.run([str(BIN / "fab"), "--list"], capture_output=True, text=True, cwd=REPO, timeout=60)
    fab_tasks = {line.split()[0] for line in listed.stdout.splitlines()[1:] if re.match(r"^  \S", line)}
    assert fab_tasks == {step.name for step in STEPS}
    fab = subprocess.run([str(BIN / "fab"), "--help", "serve"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert "--server-port=INT" in fab.stdout and "--api-key=STRING" in fab.stdout
    group = load_command("provision")
    assert set(group.commands) == fab_tasks
    for step in STEPS:
        flags = {flag for param in group.commands[step.name].params for flag in param.opts}
        assert {option.flag for option in step.options} <= flags, step.name


def test_fab_cli_failure_is_one_line_naming_the_step(sshd, tmp_path: Path) -> None:
    pin(sshd, tmp_path, "dev")
    command = [str(BIN / "fab"), "-H", f"{sshd.user}@{sshd.host}:{sshd.port}", "-i", str(sshd.key),
               "serve", "--profile", "tiny", "--work", str(tmp_path / "nvme")]
    result = subprocess.run(command, capture_output=True, text=True, env=environment(tmp_path), cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().startswith("rigbench: error: serve: no build manifest at")
    assert "Traceback" not in result.stderr


def test_up_twice_then_status_and_stop_through_the_cli(sshd, tmp_path: Path, llama_build, build_cache) -> None:
    from core.network import free_port

    port = free_port()
    work = tmp_path / "nvme"
    outputs = {"publicIp": sshd.host, "sshUser": sshd.user, "nvmePath": str(work), "sshKeyPath": str(sshd.key),
               "instanceType": "g6.xlarge", "availabilityZone": "us-east-1d", "market": "spot",
               "spotPriceAtLaunch": 0.4123, "onDemandUsdPerHour": 0.8048, "launchTime": "2026-11-30T03:00:00Z"}
    pin(sshd, tmp_path, "g6-test")
    env = environment(tmp_path, fake_pulumi(tmp_path / "bin", outputs))
    base = [str(BIN / "rigbench"), "provision", "--port", str(sshd.port), "--strict", "--profile", "tiny"]
    try:
        for _ in range(2):
            result = subprocess.run([*base, "up", "--server-port", str(port), "--cache", build_cache],
                                    capture_output=True, text=True, env=env, timeout=180)
            assert result.returncode == 0, result.stderr
        assert "already serving tiny" in result.stdout
        status = subprocess.run([*base, "status"], capture_output=True, text=True, env=env, timeout=60)
        assert json.loads(status.stdout)["health"]["status"] == 200
        logs = subprocess.run([*base, "logs", "-n", "200"], capture_output=True, text=True, env=env, timeout=60)
        assert "[rigbench] serve" in logs.stdout and "llama" in logs.stdout
        if importlib.util.find_spec("loadtest.sweep") is not None:
            runs = tmp_path / "runs"
            load = tmp_path / "load.toml"
            load.write_text("max_tokens = 8\nuser_steps = [4]\n")
            sweep = subprocess.run([*base, "sweep", "--steps", "1", "--warmup", "0.5", "--measure", "1.5", "--runs-dir",
                                    str(runs), "--rigbench", str(BIN / "rigbench"), "--load", str(load)],
                                   capture_output=True, text=True, env=env, timeout=120)
            assert sweep.returncode == 0, sweep.stderr
            manifest = RunDir(sweep.stdout.strip().splitlines()[-1]).read_manifest()
            assert manifest.status == "complete"
            assert (manifest.rig.kind, manifest.rig.instance_type, manifest.rig.region) == ("aws", "g6.xlarge",
                                                                                           "us-east-1")
            assert manifest.rig.price_per_hour == 0.4123 and manifest.rig.market == "spot"
            assert manifest.load.max_tokens == 8, "the load file reaches the rig's rigbench sweep"
            assert manifest.load.user_steps == [1], "the step's options override the file's"
        bench = subprocess.run([*base, "bench", "-r", "1"], capture_output=True, text=True, env=env, timeout=120)
        assert bench.returncode == 0, bench.stderr
        assert set(json.loads(bench.stdout.strip().splitlines()[-1])) == {"pp512", "tg128"}
        fetched = subprocess.run([*base, "fetch", "--runs-dir", str(tmp_path / "fetched")], capture_output=True,
                                 text=True, env=env, timeout=60)
        assert fetched.returncode == 0, fetched.stderr
        assert len(list((tmp_path / "fetched" / "rig-bench").glob("bench-tiny-*.json"))) == 1
    finally:
        stop = subprocess.run([*base, "stop"], capture_output=True, text=True, env=env, timeout=60)
    assert stop.returncode == 0 and "llama-server stopped" in stop.stdout


def test_fab_cli_pins_per_stack_and_strict_refuses_an_unpinned_rig(sshd, tmp_path: Path) -> None:
    command = [str(BIN / "fab"), "-H", f"{sshd.user}@{sshd.host}:{sshd.port}", "-i", str(sshd.key),
               "status", "--work", str(tmp_path / "nvme"), "--stack", "other", "--strict"]
    result = subprocess.run(command, capture_output=True, text=True, env=environment(tmp_path), cwd=REPO, timeout=60)
    assert result.returncode == 2
    assert "known_hosts/other; strict host key checking is on" in result.stderr
    first = subprocess.run(command[:-1], capture_output=True, text=True, env=environment(tmp_path), cwd=REPO,
                           timeout=60)
    assert first.returncode == 0 and "pinned host key of" in first.stderr
    assert json.loads(first.stdout)["service"] == "stopped", "stdout stays JSON for scripts"
    assert (tmp_path / "home" / "known_hosts" / "other").read_text().split()[1:] == sshd.host_key_line.split()
    again = subprocess.run(command, capture_output=True, text=True, env=environment(tmp_path), cwd=REPO, timeout=60)
    assert again.returncode == 0, again.stderr


def interruptible() -> None:
    """In the child before exec: SIGINT back to its default, so the program installs its Ctrl-C handling."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_fab_tunnel_forwards_until_interrupted(sshd, tmp_path: Path) -> None:
    import signal
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from core.network import free_port

    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            body = b'{"status":"ok"}'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    rig_server = ThreadingHTTPServer(("127.0.0.1", 0), Health)  # stands in for llama-server on the rig
    threading.Thread(target=rig_server.serve_forever, daemon=True).start()
    pin(sshd, tmp_path, "dev")
    local_port = free_port()
    command = [str(BIN / "fab"), "-H", f"{sshd.user}@{sshd.host}:{sshd.port}", "-i", str(sshd.key),
               "tunnel", "--local-port", str(local_port), "--server-port", str(rig_server.server_address[1])]
    # Ctrl-C reaches it even where pytest was started with SIGINT ignored (a shell's `cmd &`)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=environment(tmp_path), cwd=REPO, preexec_fn=interruptible)
    try:
        first_line = process.stdout.readline()
        assert first_line.startswith(f"[tunnel] http://127.0.0.1:{local_port} -> rig 127.0.0.1:"), first_line
        import httpx

        assert httpx.get(f"http://127.0.0.1:{local_port}/health", timeout=10).json() == {"status": "ok"}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            out, err = process.communicate(timeout=20)
        finally:
            process.kill()  # nothing is left running if Ctrl-C did not end it
            rig_server.shutdown()
    assert "[tunnel] closed" in out, err
