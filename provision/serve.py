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

A profile with ``[server] replicas = N`` (N > 1) is served as N llama-servers (``core.replicas``
divides the slots, the context and, unless the line pins ``-t``, the rig's cores), each its own
supervised service on port base + i: systemd units ``rigbench-llama-<i>.service`` (one plain unit
per replica, not a template: each has its own command line), or one restart loop per replica
(``supervise-<i>.sh``, ``supervisor-<i>.pid``), each with its own log ``llama-server-<i>.log``.
A replica's command carries its GPU (``env CUDA_VISIBLE_DEVICES=<gpu>``, GPUs from the rig's
``nvidia-smi``; none without one) and its cores (``taskset -c <list>`` from the CPUs an SSH
session there may use); a rig without ``taskset`` runs the replicas unpinned, each still with its
share of threads, and says so. All ports are checked before any replica starts; health is awaited
for each, and one that does not come up stops them all. ``stop``, ``status`` and ``logs`` cover
every replica. One replica keeps the single server's names, so rigs served before know theirs.

Replicas sharing a GPU run under CUDA's MPS where the profile's ``[server] mps`` says so (``provision.mps`` decides
on the rig and names the folders; ``true`` without the control program is refused before anything is written
there). The control daemon is supervised like a replica, unit ``rigbench-mps.service`` (``ExecStop`` sends it
``quit``) or restart loop ``supervise-mps.sh`` (``supervisor-mps.pid``; its TERM trap sends ``quit``), started and
answering ``get_server_list`` before any replica starts, each replica its client (``CUDA_MPS_PIPE_DIRECTORY`` in
its ``env`` prefix), and stopped after the last replica, only when this serve started it: a daemon already
answering at the pipe folder is used and left running. ``status``, ``logs`` and ``stop`` cover it.

A serve that starts servers returns, in its state's ``timings`` (``provision.readiness``), the seconds from its start
until each answered ``/health`` and until each streamed the token of a one-token completion sent from the rig, so a
caller recording a rig's phases reads them from ``--result``; ``serve.json`` keeps none, and a serve that found the
same servers running returns none.
"""

from __future__ import annotations

import hashlib
import json
import shlex
import time
from dataclasses import dataclass

from fabric import Connection
from pydantic import BaseModel, Field

from core.errors import ProfileError, ProvisionError
from core.mps import client_environment
from core.profile import RigProfile
from core.replicas import ReplicaPlan, plan_replicas
from core.wording import counted
from provision import mps as rig_mps
from provision.build import read_build_manifest
from provision.connection import agent, privileged, rig_step, run, upload_helpers, upload_text
from provision.defaults import SERVER_PORT
from provision.download import model_paths
from provision.mps import ServedMps
from provision.readiness import ServeTimings, time_first_tokens
from provision.rig_paths import RigPaths

UNIT_NAME = "rigbench-llama.service"
DEFAULT_PORT = SERVER_PORT
LOG_NAME = "llama-server.log"
EXIT_MARKER = "[supervisor] llama-server exited"
SERVE_HEADER = "[rigbench] serve"
ENV = "/usr/bin/env"  # an absolute path: a systemd ExecStart= may not search PATH
KEY_HEADER_NAME = "api_key_header"  # curl's -H @file: the key never on a command line


class ServedReplica(BaseModel):
    """One replica as served: the whole command its supervisor runs (GPU and CPUs included), so a rig's
    state says what runs where without the profile."""

    index: int
    port: int
    slots: int
    command: list[str]
    log: str
    gpu: int | None = None
    cpus: list[int] = Field(default_factory=list, description="the CPUs it is pinned to; empty: not pinned")


class ServeState(BaseModel):
    """What is being served, kept on the rig as ``serve/serve.json``. ``command`` is the whole server
    line; with several replicas, ``replicas`` holds what actually runs (empty for one server)."""

    profile: str
    command: list[str]
    supervisor: str
    port: int
    host: str
    log: str
    api_key_sha256: str | None = None
    started_at: str = Field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    replicas: list[ServedReplica] = Field(default_factory=list)
    mps: ServedMps | None = Field(None, description="CUDA MPS for the servers; None: a serve.json from before it was "
                                  "recorded")
    timings: ServeTimings | None = Field(None, description="how long the serve that returned this state took to be "
                                         "ready; None in serve.json and when it started nothing")


@dataclass(frozen=True)
class Service:
    """One supervised llama-server: the profile's one server (``index`` None, under the names rigs have
    always had) or one replica, under names of its own."""

    index: int | None
    port: int
    command: list[str]
    log: str

    @property
    def suffix(self) -> str:
        return "" if self.index is None else f"-{self.index}"

    @property
    def unit(self) -> str:
        return UNIT_NAME if self.index is None else f"rigbench-llama-{self.index}.service"

    @property
    def label(self) -> str:
        return "llama-server" if self.index is None else f"replica {self.index}"

    def pid_file(self, paths: RigPaths) -> str:
        return f"{paths.serve}/supervisor{self.suffix}.pid"

    def script(self, paths: RigPaths) -> str:
        return f"{paths.serve}/supervise{self.suffix}.sh"


def services(state: ServeState | None, paths: RigPaths) -> list[Service]:
    """The supervised services ``state`` describes; without a state, where one server's would be."""
    if state is None:
        return [Service(None, DEFAULT_PORT, [], f"{paths.serve}/{LOG_NAME}")]
    if not state.replicas:
        return [Service(None, state.port, state.command, state.log)]
    return [Service(replica.index, replica.port, replica.command, replica.log) for replica in state.replicas]


def systemd_quote(argument: str) -> str:
    """Quote one ExecStart word: systemd reads C escapes in quotes and expands % and $."""
    escaped = (argument.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$"))
    return f'"{escaped}"'


def environment_quote(name: str, value: str) -> str:
    """One ``Environment=`` assignment: systemd reads C escapes in quotes and expands % there (not $)."""
    escaped = f"{name}={value}".replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return f'"{escaped}"'


def render_unit(command: list[str], user: str, working_dir: str, log_path: str, description: str,
                environment: dict[str, str] | None = None, unset: tuple[str, ...] = (),
                exec_stop: list[str] | None = None, after: str | None = None) -> str:
    """A unit running ``command``; ``environment`` set and ``unset`` dropped for it, ``exec_stop`` how it is asked
    to end, ``after`` a unit it starts after (and stops before)."""
    exec_start = " ".join(systemd_quote(word) for word in command)
    extra = "".join([
        f"Environment={' '.join(environment_quote(name, value) for name, value in environment.items())}\n"
        if environment else "",
        f"UnsetEnvironment={' '.join(unset)}\n" if unset else "",
        f"ExecStart={exec_start}\n",
        f"ExecStop={' '.join(systemd_quote(word) for word in exec_stop)}\n" if exec_stop else ""])
    return f"""[Unit]
Description={description}
After=network-online.target{' ' + after if after else ''}
StartLimitIntervalSec=60
StartLimitBurst=5

[Service]
Type=simple
User={user}
WorkingDirectory={working_dir}
{extra}Restart=on-failure
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


def replica_source(profile: RigProfile) -> str:
    return f"profile {profile.name!r}: [server] replicas"


def check_replicas(profile: RigProfile) -> None:
    """Refuse a replica count the profile's line cannot be divided into, before anything runs on the rig."""
    if profile.server.replicas > 1:
        try:
            plan_replicas(profile.server.args, profile.server.replicas, DEFAULT_PORT, source=replica_source(profile))
        except ProfileError as error:
            raise ProvisionError(f"serve: {error}") from None


def check_mps(c: Connection, profile: RigProfile) -> None:
    """Refuse ``[server] mps = true`` on a rig without the control program, in one line, before anything is built
    or started there (the serve step decides the rest once it knows the replicas' GPUs)."""
    if profile.server.mps is True:
        rig_mps.decide(c, True, profile.name, [None])


def parse_cpu_list(text: str) -> list[int]:
    """The kernel's CPU list format (``0-3,8,10-11``) as CPU numbers."""
    cpus: set[int] = set()
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return sorted(cpus)


def rig_gpus(c: Connection) -> list[int]:
    """The rig's GPU indices from nvidia-smi; none where it is missing or fails (the CPU build)."""
    result = run(c, "nvidia-smi --query-gpu=index --format=csv,noheader", warn=True)
    if not result.ok:
        return []
    return [int(line.strip()) for line in result.stdout.splitlines() if line.strip().isdigit()]


def rig_cores(c: Connection) -> list[int]:
    """The CPUs a process started over SSH on the rig may run on (its affinity list), else ``nproc``'s count."""
    listed = run(c, "grep Cpus_allowed_list /proc/self/status", warn=True)
    if listed.ok and ":" in listed.stdout:
        try:
            return parse_cpu_list(listed.stdout.split(":", 1)[1])
        except ValueError:
            pass
    count = run(c, "nproc", warn=True).stdout.strip()
    return list(range(int(count))) if count.isdigit() else []


def env_prefix(environment: dict[str, str]) -> list[str]:
    """``env NAME=value …``: a supervised command's own environment, on its command line."""
    return [ENV, *(f"{name}={value}" for name, value in environment.items())]


def replica_command(plan: ReplicaPlan, server_binary: str, host: str, api_key_file: str | None,
                    taskset: str | None) -> list[str]:
    """A replica's whole command line: its GPU, its CPUs (where the rig has ``taskset``), then llama-server with
    its share of the line on its own port."""
    prefix: list[str] = []
    if plan.environment:  # its GPU, and the MPS daemon it is a client of
        prefix += env_prefix(plan.environment)
    if plan.cpus and taskset:
        prefix += [taskset, "-c", ",".join(str(cpu) for cpu in plan.cpus)]
    command = [*prefix, server_binary, *plan.args, "--host", host, "--port", str(plan.port)]
    if api_key_file:
        command += ["--api-key-file", api_key_file]
    return command


def replica_plans(c: Connection, profile: RigProfile, paths: RigPaths, port: int) -> list[ReplicaPlan]:
    """The profile's replicas on this rig (its GPUs and cores), only read from it; none for one server."""
    if profile.server.replicas == 1:
        return []
    model, drafter = model_paths(profile, paths)
    try:
        return plan_replicas(profile.server_args(model, drafter), profile.server.replicas, port, gpus=rig_gpus(c),
                             placement=profile.server.replica_gpus, cores=rig_cores(c),
                             source=replica_source(profile))
    except ProfileError as error:
        raise ProvisionError(f"serve: {error}") from None


def served_replicas(c: Connection, plans: list[ReplicaPlan], server_binary: str, paths: RigPaths, host: str,
                    api_key_file: str | None, mps_pipe: str | None = None) -> list[ServedReplica]:
    """What each replica runs (``mps_pipe``: each a client of the MPS daemon there); none for one server."""
    if not plans:
        return []
    plans = [plan.under_mps(mps_pipe) for plan in plans]
    taskset = run(c, "command -v taskset", warn=True).stdout.strip() or None
    if taskset is None and any(plan.cpus for plan in plans):
        print("[serve] taskset is not on the rig: the replicas are not pinned to their cores (each still runs "
              f"{counted(len(plans[0].cpus), 'thread')})", flush=True)
    return [ServedReplica(index=plan.index, port=plan.port, slots=plan.slots, gpu=plan.gpu,
                          cpus=plan.cpus if taskset else [],
                          command=replica_command(plan, server_binary, host, api_key_file, taskset),
                          log=f"{paths.serve}/llama-server-{plan.index}.log")
            for plan in plans]


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
    return Service(None, DEFAULT_PORT, [], "").pid_file(paths)


def supervisor_pid(c: Connection, paths: RigPaths, service: Service | None = None) -> str | None:
    """The live supervisor's pid; a stale pid file (reboot, reused pid) counts as none."""
    service = service or services(None, paths)[0]
    return live_pid(c, service.pid_file(paths), service.script(paths))


def live_pid(c: Connection, pid_file: str, script: str) -> str | None:
    """The pid in ``pid_file`` when that process still runs ``script``."""
    pid = run(c, f"cat {shlex.quote(pid_file)}", warn=True).stdout.strip()
    if not pid.isdigit():
        return None
    alive = run(c, f"grep -qF {shlex.quote(script.rsplit('/', 1)[-1])} /proc/{pid}/cmdline", warn=True).ok
    return pid if alive else None


def service_running(c: Connection, paths: RigPaths, state: ServeState | None, service: Service) -> bool:
    if state is not None and state.supervisor == "systemd":
        return run(c, f"systemctl is-active --quiet {service.unit}", warn=True).ok
    return supervisor_pid(c, paths, service) is not None


def is_running(c: Connection, paths: RigPaths, state: ServeState | None) -> bool:
    """Whether any of the servers ``state`` serves is running."""
    return any(service_running(c, paths, state, service) for service in services(state, paths))


def mps_running(c: Connection, state: ServeState | None) -> bool:
    """Whether the MPS daemon's supervisor this serve started is running (False for one it found running)."""
    mps = state.mps if state is not None else None
    if mps is None or not mps.started_here:
        return False
    if mps.unit:
        return run(c, f"systemctl is-active --quiet {mps.unit}", warn=True).ok
    return mps.pid_file is not None and live_pid(c, mps.pid_file, str(mps.script)) is not None


def log_tail(c: Connection, paths: RigPaths, lines: int = 30, log: str | None = None) -> str:
    """The last lines of ``log`` (default: the one server's log)."""
    log = log or f"{paths.serve}/{LOG_NAME}"
    return run(c, f"tail -n {int(lines)} {shlex.quote(log)} 2>/dev/null", warn=True).stdout


def start_service(c: Connection, paths: RigPaths, state: ServeState) -> None:
    """Start every service of ``state``: units installed (one reload) then restarted, or a restart loop each."""
    started = services(state, paths)
    if state.supervisor == "systemd":
        user = run(c, "id -un").stdout.strip()
        after = state.mps.unit if state.mps is not None else None  # an MPS daemon started here: after it
        for service in started:
            what = state.profile if service.index is None else f"{state.profile}, {service.label}"
            unit = render_unit(service.command, user, paths.serve, service.log, f"rigbench llama-server ({what})",
                               after=after)
            staged = f"{paths.serve}/{service.unit}"
            upload_text(c, unit, staged)
            run(c, privileged(c, f"install -m 644 {shlex.quote(staged)} /etc/systemd/system/{service.unit}"))
        run(c, privileged(c, "systemctl daemon-reload"))
        run(c, privileged(c, f"systemctl restart {' '.join(service.unit for service in started)}"))
        return
    for service in started:
        script = service.script(paths)
        upload_text(c, render_supervisor(service.command, paths.serve, service.log, service.pid_file(paths)), script,
                    mode=0o755)
        run(c, f"setsid -f sh {shlex.quote(script)} > /dev/null 2>&1 < /dev/null")
    for service in started:
        for _ in range(50):
            if run(c, f"test -s {shlex.quote(service.pid_file(paths))}", warn=True).ok:
                break
            time.sleep(0.1)
        else:
            raise ProvisionError(f"serve: the supervisor did not write {service.pid_file(paths)}; "
                                 f"see {service.script(paths)}")


def stop_service(c: Connection, paths: RigPaths, state: ServeState | None, timeout: float = 15) -> bool:
    """Stop whatever ``serve`` started: every replica, then the MPS daemon it started; True when something was
    running."""
    stopped = stop_servers(c, paths, state, timeout)
    return stop_mps(c, state, timeout) or stopped


def stop_servers(c: Connection, paths: RigPaths, state: ServeState | None, timeout: float = 15) -> bool:
    """Stop every llama-server of ``state``; True when one was running."""
    stopping = services(state, paths)
    if state is not None and state.supervisor == "systemd":
        was_active = is_running(c, paths, state)
        run(c, privileged(c, f"systemctl stop {' '.join(service.unit for service in stopping)}"), warn=True)
        return was_active
    pids = [pid for pid in (supervisor_pid(c, paths, service) for service in stopping) if pid is not None]
    for pid in pids:
        run(c, f"kill -TERM -- -{pid}", warn=True)
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if run(c, f"pgrep -g {pid} > /dev/null", warn=True).ok]
        if left:
            time.sleep(0.3)
    for pid in left:
        run(c, f"kill -KILL -- -{pid}", warn=True)
    run(c, "rm -f " + " ".join(shlex.quote(service.pid_file(paths)) for service in stopping), warn=True)
    return bool(pids)


def start_mps(c: Connection, paths: RigPaths, state: ServeState) -> ServeState:
    """Start the MPS control daemon ``state`` runs under, supervised, and wait until it answers; ``state`` with what
    was started. A daemon already answering at its pipe folder is used as it is (and never stopped by this serve);
    one that does not answer in time is stopped, and the step fails in one line with its log's last words."""
    mps = state.mps
    if mps is None or not mps.ran:
        return state
    rig_mps.make_folders(c, mps)
    if rig_mps.answers(c, mps):
        print(f"[serve] MPS control daemon already answering at {mps.pipe_dir}: used as it is, left running after",
              flush=True)
        return state
    mps = mps.supervised(state.supervisor, paths)
    state = state.model_copy(update={"mps": mps})
    if mps.unit:
        quit_line = f"echo quit | {shlex.quote(str(mps.control))}"  # in the unit's environment: its own daemon
        unit = render_unit([str(mps.control), "-f"], run(c, "id -un").stdout.strip(), str(mps.log_dir),
                           mps.output_log, f"rigbench MPS control daemon ({state.profile})",
                           environment=mps.environment, unset=("CUDA_VISIBLE_DEVICES",),
                           exec_stop=["/bin/sh", "-c", quit_line])
        staged = f"{paths.serve}/{mps.unit}"
        upload_text(c, unit, staged)
        run(c, privileged(c, f"install -m 644 {shlex.quote(staged)} /etc/systemd/system/{mps.unit}"))
        run(c, privileged(c, "systemctl daemon-reload"))
        run(c, privileged(c, f"systemctl restart {mps.unit}"))
    else:
        upload_text(c, rig_mps.render_supervisor(mps), str(mps.script), mode=0o755)
        run(c, f"setsid -f sh {shlex.quote(str(mps.script))} > /dev/null 2>&1 < /dev/null")
    if not rig_mps.wait_answering(c, mps, rig_mps.START_TIMEOUT_S):
        said = rig_mps.last_words(c, mps)
        stop_mps(c, state)
        raise ProvisionError(f"serve: the MPS control daemon ({mps.unit or mps.script}) did not answer "
                             f"get_server_list at {mps.pipe_dir} within {rig_mps.START_TIMEOUT_S:g} s and was "
                             f"stopped; {said}")
    print(f"[serve] MPS control daemon answering at {mps.pipe_dir} ({mps.unit or mps.script})", flush=True)
    return state


def stop_mps(c: Connection, state: ServeState | None, timeout: float = 15) -> bool:
    """Stop the MPS control daemon this serve started (``quit``, by its unit's ExecStop or its supervisor's TERM
    trap; the supervisor alone is signalled, so the quit reaches a daemon still running); True when it ran."""
    mps = state.mps if state is not None else None
    if mps is None or not mps.started_here:
        return False
    if mps.unit:
        was_active = mps_running(c, state)
        run(c, privileged(c, f"systemctl stop {mps.unit}"), warn=True)
        return was_active
    pid = live_pid(c, str(mps.pid_file), str(mps.script))
    if pid is None:
        return False
    waiting = f"while pgrep -g {pid} > /dev/null; do sleep 0.2; done"  # its group: the daemon it runs too
    run(c, f"kill -TERM {pid}; timeout {timeout:g} sh -c {shlex.quote(waiting)} || kill -KILL -- -{pid}; "
           f"rm -f {shlex.quote(str(mps.pid_file))}", timeout=int(timeout) + 30, warn=True)
    return True


def exit_counts(c: Connection, paths: RigPaths, state: ServeState) -> dict[int | None, int]:
    """How often each service's llama-server has ended on its own so far, by replica index (None: the one server):
    the supervisor's exit markers in its log, or systemd's restart count. The supervisor restarts a server that
    dies, so a load run compares these counts from before and after it to learn that one did."""
    counts = {}
    for service in services(state, paths):
        if state.supervisor == "systemd":
            found = run(c, f"systemctl show -p NRestarts --value {service.unit}", warn=True).stdout.strip()
        else:
            found = run(c, f"grep -cF {shlex.quote(EXIT_MARKER)} {shlex.quote(service.log)}", warn=True).stdout.strip()
        counts[service.index] = int(found) if found.isdigit() else 0
    return counts


def exits_since(c: Connection, paths: RigPaths, state: ServeState, before: dict[int | None, int]) -> list[str]:
    """One line per service whose llama-server ended on its own since ``before`` (``exit_counts``): which, where
    it listens, and the supervisor's last exit line (with systemd, where its journal is)."""
    after = exit_counts(c, paths, state)
    lines = []
    for service in services(state, paths):
        exits = after.get(service.index, 0) - before.get(service.index, 0)
        if exits <= 0:
            continue
        if state.supervisor == "systemd":
            said = f"systemd restarted it {counted(exits, 'time')}; see journalctl -u {service.unit} and {service.log}"
        else:
            last = run(c, f"grep -F {shlex.quote(EXIT_MARKER)} {shlex.quote(service.log)} | tail -n 1",
                       warn=True).stdout.strip()
            said = f"{last} ({counted(exits, 'time')}; its log: {service.log})"
        lines.append(f"{service.label} (port {service.port}) exited and was restarted by its supervisor: {said}")
    return lines


def check_port_free(c: Connection, paths: RigPaths, port: int, replica: str = "") -> None:
    """Refuse a port something else listens on; ``replica`` names the replica it was meant for."""
    if agent(c, paths, f"port-free --port {int(port)}", warn=True).ok:
        return
    holders = run(c, f"ss -ltnpH 'sport = :{int(port)}' 2>/dev/null", warn=True).stdout.strip()
    raise ProvisionError(
        f"serve: port {port}{replica} on the rig is already in use by another process"
        f"{' (' + holders + ')' if holders else ''}; stop that process or serve on another port with --port"
    )


@rig_step("serve")
def serve(c: Connection, profile: RigProfile, paths: RigPaths | None = None, port: int = DEFAULT_PORT,
          public: bool = False, api_key: str | None = None, health_timeout: int = 300,
          supervisor: str = "auto") -> ServeState:
    """Start llama-server for ``profile`` (each of its replicas, after the MPS daemon they share where it runs), wait
    until ``/health`` answers 200 and time each server's first token; the state with its ``timings``."""
    started = time.monotonic()
    paths = paths or RigPaths()
    check_replicas(profile)
    if public and not api_key:
        raise ProvisionError("serve: --public makes llama-server listen on 0.0.0.0 and needs --api-key KEY; "
                             "without --public it listens on 127.0.0.1 (use the tunnel step)")
    host = "0.0.0.0" if public else "127.0.0.1"
    ports = f"{port}" if profile.server.replicas == 1 else f"{port}-{port + profile.server.replicas - 1}"
    plans = replica_plans(c, profile, paths, port)  # only read from the rig, as the MPS decision: a refusal
    decision = rig_mps.decide(c, profile.server.mps, profile.name, [plan.gpu for plan in plans] or [None])
    if public:
        print(f"[serve] listening on 0.0.0.0:{ports}: reachable where the security group allows; "
              "clients must send the API key", flush=True)
    upload_helpers(c, paths)
    manifest = read_build_manifest(c, paths)
    model, drafter = model_paths(profile, paths)
    for needed in filter(None, (model, drafter)):
        if not run(c, f"test -s {shlex.quote(needed)}", warn=True).ok:
            raise ProvisionError(f"serve: model file {needed} is missing on the rig; run the download step first")
    run(c, f"mkdir -p {shlex.quote(paths.serve)}")
    key_file = key_header = None
    if api_key:
        key_file, key_header = f"{paths.serve}/api_key", f"{paths.serve}/{KEY_HEADER_NAME}"
        upload_text(c, api_key + "\n", key_file, mode=0o600)
        upload_text(c, f"Authorization: Bearer {api_key}\n", key_header, mode=0o600)
    binary = manifest.binary("llama-server")
    mps = rig_mps.served_mps(c, decision, paths)
    if mps.ran or plans:
        print(f"[serve] MPS {'on' if mps.ran else 'off'}: {mps.reason}", flush=True)
    replicas = served_replicas(c, plans, binary, paths, host, key_file, mps.pipe_dir)
    command = server_command(profile, binary, paths, host, port, key_file)
    if mps.pipe_dir and not replicas:  # one server under MPS (asked for): its client too
        command = [*env_prefix(client_environment(mps.pipe_dir)), *command]
    state = ServeState(profile=profile.name, supervisor=pick_supervisor(c, supervisor), port=port, host=host,
                       command=command, log=replicas[0].log if replicas else f"{paths.serve}/{LOG_NAME}",
                       api_key_sha256=hashlib.sha256(api_key.encode()).hexdigest() if api_key else None,
                       replicas=replicas, mps=mps)
    previous = read_state(c, paths)
    if previous is not None and (is_running(c, paths, previous) or mps_running(c, previous)):
        if served_the_same(c, paths, previous, state):
            print(f"[serve] already serving {profile.name} on {host}:{ports}; nothing to do", flush=True)
            return previous
        changed = (f"the replicas changed ({len(previous.replicas) or 1} -> {len(state.replicas) or 1})"
                   if len(previous.replicas) != len(state.replicas) else "the served command changed")
        print(f"[serve] {changed}; restarting", flush=True)
        stop_service(c, paths, previous)
    starting = services(state, paths)
    for service in starting:  # every port first: a busy one starts nothing
        check_port_free(c, paths, service.port, "" if service.index is None else
                        f" (replica {service.index} of {len(starting)}, on ports {ports})")
    state = start_mps(c, paths, state)  # before any replica: each is its client from its first CUDA call
    try:
        upload_text(c, state.model_dump_json(indent=2), f"{paths.serve}/serve.json")
        for service in starting:
            run(c, f"echo '{SERVE_HEADER} {state.started_at}' >> {shlex.quote(service.log)}")
        start_service(c, paths, state)
    except Exception:  # a replica that would not start: the ones already started are stopped with it, then MPS
        stop_service(c, paths, state)
        raise
    print(f"[serve] {state.supervisor}: waiting up to {health_timeout} s for /health on {host}:{ports}", flush=True)
    healthy_at: dict[int | None, float] = {}
    failed = wait_healthy(c, paths, state, health_timeout, healthy_at)
    if failed is not None:
        tail = log_tail(c, paths, log=failed.log)
        stop_service(c, paths, state)
        if failed.index is None:
            raise ProvisionError(f"serve: llama-server did not answer /health on {host}:{port} within "
                                 f"{health_timeout} s and was stopped; last lines of {state.log}:\n{tail.strip()}")
        raise ProvisionError(f"serve: replica {failed.index} of {len(starting)} did not answer /health on "
                             f"{host}:{failed.port} within {health_timeout} s; all {len(starting)} replicas were "
                             f"stopped; last lines of {failed.log}:\n{tail.strip()}")
    print(f"[serve] healthy: {profile.name} on {host}:{ports}"
          + (f" ({len(starting)} replicas)" if state.replicas else ""), flush=True)
    timings = time_first_tokens(c, starting, started, healthy_at, key_header)
    print(f"[serve] ready {timings.health_seconds:.1f} s after the step started (/health); first token "
          + ("failed" if timings.first_token_seconds is None else f"at {timings.first_token_seconds:.1f} s"),
          flush=True)
    return state.model_copy(update={"timings": timings})


def served_the_same(c: Connection, paths: RigPaths, previous: ServeState, state: ServeState) -> bool:
    """Whether ``previous`` runs what ``state`` would (the same commands, key, replicas and MPS daemon) and answers
    (its MPS daemon too)."""
    def what(served: ServeState) -> tuple:
        return served.command, served.api_key_sha256, [replica.command for replica in served.replicas], mps_key(served)

    if what(previous) != what(state):
        return False
    if previous.mps is not None and previous.mps.ran and not rig_mps.answers(c, previous.mps):
        return False
    return all(service_running(c, paths, previous, service)
               and agent(c, paths, f"health --port {service.port} --timeout 5", warn=True).ok
               for service in services(previous, paths))


def mps_key(served: ServeState) -> tuple:
    """What of MPS makes two serves the same: its daemon (none: not under MPS, or a serve from before it was kept)."""
    mps = served.mps
    return (True, mps.pipe_dir, mps.control) if mps is not None and mps.ran else (False, None, None)


def exited_since_serve(c: Connection, paths: RigPaths, service: Service) -> bool:
    """Whether the supervisor wrote its exit marker in the service's log since this serve's header line."""
    lines = log_tail(c, paths, 20, log=service.log).splitlines()
    headers = [number for number, line in enumerate(lines) if line.startswith(SERVE_HEADER)]
    recent = lines[headers[-1] + 1:] if headers else lines[-5:]
    return any(EXIT_MARKER in line for line in recent)


def wait_healthy(c: Connection, paths: RigPaths, state: ServeState, timeout: float,
                 healthy_at: dict[int | None, float] | None = None) -> Service | None:
    """Poll /health of every service on the rig, all within ``timeout``; the first that does not answer (given up
    early when its supervisor saw it exit), or None when all do. ``healthy_at`` gets each service's
    ``time.monotonic()`` when its /health answered, by index."""
    deadline = time.monotonic() + timeout
    for service in services(state, paths):
        while True:
            if agent(c, paths, f"health --port {service.port} --timeout 3", warn=True, timeout=30).ok:
                if healthy_at is not None:
                    healthy_at[service.index] = time.monotonic()
                break
            if exited_since_serve(c, paths, service) or time.monotonic() >= deadline:
                return service
            if state.supervisor == "systemd" and run(c, f"systemctl is-failed --quiet {service.unit}",
                                                     warn=True).ok:
                return service
    return None


@rig_step("stop")
def stop(c: Connection, paths: RigPaths | None = None) -> bool:
    """Stop the served llama-server, every replica of it, then the MPS daemon that serve started; stopping a stopped
    rig is fine."""
    paths = paths or RigPaths()
    state = read_state(c, paths)
    servers = stop_servers(c, paths, state)
    daemon = stop_mps(c, state)
    what = ["llama-server stopped" + (f" ({len(state.replicas)} replicas)" if state and state.replicas else "")
            ] if servers else []
    what += ["MPS control daemon stopped"] if daemon else []
    print(f"[stop] {', '.join(what) or 'nothing was running'}", flush=True)
    return servers or daemon


@rig_step("status")
def status(c: Connection, paths: RigPaths | None = None, port: int | None = None) -> dict:
    """Service state, /health, slots and GPU memory used, as one dict (printed as JSON); with replicas each one's
    under ``replicas``, and the whole at the top: healthy when every replica is, their slots added up."""
    paths = paths or RigPaths()
    upload_helpers(c, paths)
    state = read_state(c, paths)
    port = port or (state.port if state else DEFAULT_PORT)
    probe = json.loads(agent(c, paths, f"probe --port {int(port)}").stdout)
    running = [service_running(c, paths, state, service) for service in services(state, paths)]
    report = {
        "service": "running" if all(running) else "partly running" if any(running) else "stopped",
        "supervisor": state.supervisor if state else None,
        "profile": state.profile if state else None,
        "listen": f"{state.host}:{state.port}" if state else None,
        "port": port,
        **probe,
    }
    if state is not None and state.replicas and port == state.port:
        report |= replicas_status(c, paths, state, running, probe)
    report["mps"] = mps_status(c, state)
    print(json.dumps(report, indent=2), flush=True)
    return report


def mps_status(c: Connection, state: ServeState | None) -> dict | None:
    """The MPS part of ``status``: whether it runs and why; its supervisor's state, whether it answers, its folders.
    None where nothing was served (or served before MPS was recorded)."""
    mps = state.mps if state is not None else None
    if mps is None or not mps.ran:
        return None if mps is None else {"ran": False, "reason": mps.reason}
    service = ("running" if mps_running(c, state) else "stopped") if mps.started_here else "not started by rigbench"
    return {"ran": True, "reason": mps.reason, "service": service, "supervisor": mps.unit or mps.script,
            "answers": rig_mps.answers(c, mps), "pipe_dir": mps.pipe_dir, "log_dir": mps.log_dir,
            "control": mps.control, "version": mps.version}


def replicas_status(c: Connection, paths: RigPaths, state: ServeState, running: list[bool], first: dict) -> dict:
    """Each replica's service, health and slots, and the whole's health and slots from them."""
    each = []
    for replica, up in zip(state.replicas, running, strict=True):
        probe = first if replica.port == state.port else json.loads(
            agent(c, paths, f"probe --port {replica.port}").stdout)
        each.append({"index": replica.index, "port": replica.port, "gpu": replica.gpu, "cpus": replica.cpus,
                     "service": "running" if up else "stopped", "health": probe["health"],
                     "slots": probe["slots"], "log": replica.log})
    unhealthy = [replica for replica in each if replica["health"]["status"] != 200]
    health = ({"status": 200, "body": {"status": "ok"}} if not unhealthy
              else {**unhealthy[0]["health"], "replica": unhealthy[0]["index"]})
    summaries = [replica["slots"]["summary"] for replica in each]
    slots = {"status": 200 if all(replica["slots"]["status"] == 200 for replica in each) else 0,
             "summary": None if None in summaries else {"total": sum(found["total"] for found in summaries),
                                                        "busy": sum(found["busy"] for found in summaries)}}
    return {"health": health, "slots": slots, "replicas": each}


@rig_step("logs")
def logs(c: Connection, paths: RigPaths | None = None, lines: int = 50) -> str:
    """The last lines of llama-server's log; with replicas, each replica's under a line naming it; then the MPS
    control daemon's control.log (and its output, where it printed any) under a line of its own."""
    paths = paths or RigPaths()
    state = read_state(c, paths)
    mps = state.mps if state is not None else None
    if state is None or not state.replicas:
        text = log_tail(c, paths, lines)
        if mps is not None and mps.ran:  # the daemon's section follows: this one is named too
            text = f"==> llama-server: {state.log} <==\n" + text
    else:
        text = "".join(f"==> replica {replica.index} (port {replica.port}): {replica.log} <==\n"
                       + log_tail(c, paths, lines, log=replica.log) for replica in state.replicas)
    if mps is not None and mps.ran:
        text += "" if not text or text.endswith("\n") else "\n"
        text += f"==> MPS control daemon: {mps.control_log} <==\n" + rig_mps.log_tail(c, mps, lines)
        output = rig_mps.log_tail(c, mps, lines, mps.output_log)
        if output.strip():
            text += f"==> MPS control daemon's output: {mps.output_log} <==\n" + output
    print(text, end="", flush=True)
    return text
