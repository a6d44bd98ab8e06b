"""Steps ``serve``, ``stop``, ``status`` and ``logs``: llama-server as a supervised service.

With systemd running (the DLAMI) the profile becomes a unit, ``rigbench-llama.service``,
restarted on failure. Where systemd is not running (containers, CI) a small ``sh`` restart
loop started with ``setsid`` does the same job, with a pid file. Both write one log file in
``<work>/rigbench/serve/``, so ``logs`` and the failure messages read the same place.

llama-server listens on 127.0.0.1 (reach it through ``tunnel``) unless ``public`` is asked
for, which needs an API key; the key travels over SFTP into a 0600 file passed with
``--api-key-file``, never on a command line. ``serve`` waits for ``/health`` and, when the
server does not come up, stops it and fails with the last log lines. Serving the same
command again is a no-op; a changed command restarts the service.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time

from fabric import Connection
from pydantic import BaseModel, Field

from core.errors import ProvisionError
from core.profile import RigProfile
from provision.build import read_build_manifest
from provision.connection import agent, privileged, rig_step, run, upload_helpers, upload_text
from provision.defaults import SERVER_PORT
from provision.download import model_paths
from provision.rig_paths import RigPaths

UNIT_NAME = "rigbench-llama.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT_NAME}"
DEFAULT_PORT = SERVER_PORT
LOG_NAME = "llama-server.log"
EXIT_MARKER = "[supervisor] llama-server exited"


class ServeState(BaseModel):
    """What is being served, kept on the rig as ``serve/serve.json``."""

    profile: str
    command: list[str]
    supervisor: str
    port: int
    host: str
    log: str
    api_key_sha256: str | None = None
    started_at: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))


def systemd_quote(argument: str) -> str:
    """Quote one ExecStart word: systemd reads C escapes in quotes and expands % and $."""
    escaped = (argument.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$"))
    return f'"{escaped}"'


def render_unit(command: list[str], user: str, working_dir: str, log_path: str, description: str) -> str:
    exec_start = " ".join(systemd_quote(word) for word in command)
    return f"""[Unit]
Description={description}
After=network-online.target
StartLimitIntervalSec=60
StartLimitBurst=5

[Service]
Type=simple
User={user}
WorkingDirectory={working_dir}
ExecStart={exec_start}
Restart=on-failure
RestartSec=2
StandardOutput=append:{log_path}
StandardError=append:{log_path}
LimitNOFILE=65536

[Install]
WantedBy=multi-user.target
"""


def render_supervisor(command: list[str], serve_dir: str, log_path: str, pid_file: str) -> str:
    """A restart loop for machines without systemd; ``stop`` signals its process group."""
    line = " ".join(shlex.quote(word) for word in command)
    return f"""#!/bin/sh
# rigbench: keeps llama-server running where systemd is not; restarts it when it exits.
cd {shlex.quote(serve_dir)} || exit 1
echo $$ > {shlex.quote(pid_file)}
child=
trap 'rm -f {shlex.quote(pid_file)}; [ -n "$child" ] && kill "$child" 2>/dev/null; exit 0' TERM INT HUP
while :; do
  {line} >> {shlex.quote(log_path)} 2>&1 &
  child=$!
  wait "$child"
  code=$?
  echo "{EXIT_MARKER} with $code at $(date -u +%FT%TZ); restarting in 2 s" >> {shlex.quote(log_path)}
  sleep 2
done
"""


def server_command(profile: RigProfile, server_binary: str, paths: RigPaths, host: str, port: int,
                   api_key_file: str | None) -> list[str]:
    model, drafter = model_paths(profile, paths)
    command = [server_binary, *profile.server_args(model, drafter, host, port)]
    if api_key_file:
        command += ["--api-key-file", api_key_file]
    return command


def has_systemd(c: Connection) -> bool:
    return run(c, "test -d /run/systemd/system && command -v systemctl", warn=True).ok


def pick_supervisor(c: Connection, supervisor: str) -> str:
    if supervisor == "auto":
        return "systemd" if has_systemd(c) else "process"
    if supervisor == "systemd" and not has_systemd(c):
        raise ProvisionError("serve: supervisor systemd asked for, but systemd is not running on the rig; "
                             "use --supervisor process")
    return supervisor


def read_state(c: Connection, paths: RigPaths) -> ServeState | None:
    result = run(c, f"cat {shlex.quote(paths.serve)}/serve.json", warn=True)
    return ServeState.model_validate_json(result.stdout) if result.ok else None


def pid_file(paths: RigPaths) -> str:
    return f"{paths.serve}/supervisor.pid"


def supervisor_pid(c: Connection, paths: RigPaths) -> str | None:
    """The live supervisor's pid; a stale pid file (reboot, reused pid) counts as none."""
    pid = run(c, f"cat {shlex.quote(pid_file(paths))}", warn=True).stdout.strip()
    if not pid.isdigit():
        return None
    alive = run(c, f"grep -q supervise.sh /proc/{pid}/cmdline", warn=True).ok
    return pid if alive else None


def is_running(c: Connection, paths: RigPaths, state: ServeState | None) -> bool:
    if state is not None and state.supervisor == "systemd":
        return run(c, f"systemctl is-active --quiet {UNIT_NAME}", warn=True).ok
    return supervisor_pid(c, paths) is not None


def log_tail(c: Connection, paths: RigPaths, lines: int = 30) -> str:
    return run(c, f"tail -n {int(lines)} {shlex.quote(paths.serve)}/{LOG_NAME} 2>/dev/null", warn=True).stdout


def start_service(c: Connection, paths: RigPaths, state: ServeState) -> None:
    log = state.log
    if state.supervisor == "systemd":
        user = run(c, "id -un").stdout.strip()
        unit = render_unit(state.command, user, paths.serve, log, f"rigbench llama-server ({state.profile})")
        staged = f"{paths.serve}/{UNIT_NAME}"
        upload_text(c, unit, staged)
        run(c, privileged(c, f"install -m 644 {shlex.quote(staged)} {UNIT_PATH}"))
        run(c, privileged(c, "systemctl daemon-reload"))
        run(c, privileged(c, f"systemctl restart {UNIT_NAME}"))
        return
    script = f"{paths.serve}/supervise.sh"
    upload_text(c, render_supervisor(state.command, paths.serve, log, pid_file(paths)), script, mode=0o755)
    run(c, f"setsid -f sh {shlex.quote(script)} > /dev/null 2>&1 < /dev/null")
    for _ in range(50):
        if run(c, f"test -s {shlex.quote(pid_file(paths))}", warn=True).ok:
            return
        time.sleep(0.1)
    raise ProvisionError(f"serve: the supervisor did not write {pid_file(paths)}; see {script}")


def stop_service(c: Connection, paths: RigPaths, state: ServeState | None, timeout: float = 15) -> bool:
    """Stop whatever ``serve`` started; True when something was running."""
    if state is not None and state.supervisor == "systemd":
        was_active = is_running(c, paths, state)
        run(c, privileged(c, f"systemctl stop {UNIT_NAME}"), warn=True)
        return was_active
    pid = supervisor_pid(c, paths)
    if pid is None:
        run(c, f"rm -f {shlex.quote(pid_file(paths))}", warn=True)
        return False
    run(c, f"kill -TERM -- -{pid}", warn=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not run(c, f"pgrep -g {pid} > /dev/null", warn=True).ok:
            break
        time.sleep(0.3)
    else:
        run(c, f"kill -KILL -- -{pid}", warn=True)
    run(c, f"rm -f {shlex.quote(pid_file(paths))}", warn=True)
    return True


def check_port_free(c: Connection, paths: RigPaths, port: int) -> None:
    if agent(c, paths, f"port-free --port {int(port)}", warn=True).ok:
        return
    holders = run(c, f"ss -ltnpH 'sport = :{int(port)}' 2>/dev/null", warn=True).stdout.strip()
    raise ProvisionError(
        f"serve: port {port} on the rig is already in use by another process"
        f"{' (' + holders + ')' if holders else ''}; stop that process or serve on another port with --port"
    )


@rig_step("serve")
def serve(c: Connection, profile: RigProfile, paths: RigPaths | None = None, port: int = DEFAULT_PORT,
          public: bool = False, api_key: str | None = None, health_timeout: int = 300,
          supervisor: str = "auto") -> ServeState:
    """Start llama-server for ``profile`` and wait until ``/health`` answers 200."""
    paths = paths or RigPaths()
    if public and not api_key:
        raise ProvisionError("serve: --public makes llama-server listen on 0.0.0.0 and needs --api-key KEY; "
                             "without --public it listens on 127.0.0.1 (use the tunnel step)")
    host = "0.0.0.0" if public else "127.0.0.1"
    if public:
        print(f"[serve] listening on 0.0.0.0:{port}: reachable where the security group allows; "
              "clients must send the API key", flush=True)
    upload_helpers(c, paths)
    manifest = read_build_manifest(c, paths)
    model, drafter = model_paths(profile, paths)
    for needed in filter(None, (model, drafter)):
        if not run(c, f"test -s {shlex.quote(needed)}", warn=True).ok:
            raise ProvisionError(f"serve: model file {needed} is missing on the rig; run the download step first")
    run(c, f"mkdir -p {shlex.quote(paths.serve)}")
    key_file = None
    if api_key:
        key_file = f"{paths.serve}/api_key"
        upload_text(c, api_key + "\n", key_file, mode=0o600)
    state = ServeState(profile=profile.name, supervisor=pick_supervisor(c, supervisor), port=port, host=host,
                       command=server_command(profile, manifest.binary("llama-server"), paths, host, port,
                                              key_file),
                       log=f"{paths.serve}/{LOG_NAME}",
                       api_key_sha256=hashlib.sha256(api_key.encode()).hexdigest() if api_key else None)
    previous = read_state(c, paths)
    if previous is not None and is_running(c, paths, previous):
        same = (previous.command, previous.api_key_sha256) == (state.command, state.api_key_sha256)
        if same and agent(c, paths, f"health --port {port} --timeout 5", warn=True).ok:
            print(f"[serve] already serving {profile.name} on {host}:{port}; nothing to do", flush=True)
            return previous
        print("[serve] the served command changed; restarting", flush=True)
        stop_service(c, paths, previous)
    check_port_free(c, paths, port)
    upload_text(c, state.model_dump_json(indent=2), f"{paths.serve}/serve.json")
    run(c, f"echo '[rigbench] serve {state.started_at}' >> {shlex.quote(state.log)}")
    start_service(c, paths, state)
    print(f"[serve] {state.supervisor}: waiting up to {health_timeout} s for /health on {host}:{port}", flush=True)
    waited = wait_healthy(c, paths, state, health_timeout)
    if not waited:
        tail = log_tail(c, paths)
        stop_service(c, paths, state)
        raise ProvisionError(f"serve: llama-server did not answer /health on {host}:{port} within {health_timeout} s "
                             f"and was stopped; last lines of {state.log}:\n{tail.strip()}")
    print(f"[serve] healthy: {profile.name} on {host}:{port}", flush=True)
    return state


def wait_healthy(c: Connection, paths: RigPaths, state: ServeState, timeout: float) -> bool:
    """Poll /health on the rig; give up early when the supervisor saw the server exit."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if agent(c, paths, f"health --port {state.port} --timeout 3", warn=True, timeout=30).ok:
            return True
        if EXIT_MARKER in log_tail(c, paths, 5):
            return False
        if state.supervisor == "systemd" and run(c, f"systemctl is-failed --quiet {UNIT_NAME}", warn=True).ok:
            return False
    return False


@rig_step("stop")
def stop(c: Connection, paths: RigPaths | None = None) -> bool:
    """Stop the served llama-server; stopping a stopped rig is fine."""
    paths = paths or RigPaths()
    stopped = stop_service(c, paths, read_state(c, paths))
    print(f"[stop] {'llama-server stopped' if stopped else 'nothing was running'}", flush=True)
    return stopped


@rig_step("status")
def status(c: Connection, paths: RigPaths | None = None, port: int | None = None) -> dict:
    """Service state, /health, slots and GPU memory used, as one dict (printed as JSON)."""
    paths = paths or RigPaths()
    upload_helpers(c, paths)
    state = read_state(c, paths)
    port = port or (state.port if state else DEFAULT_PORT)
    probe = json.loads(agent(c, paths, f"probe --port {int(port)}").stdout)
    report = {
        "service": "running" if is_running(c, paths, state) else "stopped",
        "supervisor": state.supervisor if state else None,
        "profile": state.profile if state else None,
        "listen": f"{state.host}:{state.port}" if state else None,
        "port": port,
        **probe,
    }
    print(json.dumps(report, indent=2), flush=True)
    return report


@rig_step("logs")
def logs(c: Connection, paths: RigPaths | None = None, lines: int = 50) -> str:
    paths = paths or RigPaths()
    text = log_tail(c, paths, lines)
    print(text, end="", flush=True)
    return text
