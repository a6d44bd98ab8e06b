"""Server telemetry at step boundaries: ``/metrics`` (Prometheus text) and ``/slots``.

llama-server exposes ``/metrics`` only with ``--metrics`` and ``/slots`` only with
``--slots`` (on by default in recent builds); other OpenAI-compatible servers may have
neither. An endpoint that answers "not there" (404, 405, 501) is asked once and then skipped
for the rest of the sweep, with one line in the manifest (``ServerTelemetry.absent``); any
other failure becomes that snapshot's ``error`` rather than a failed sweep. The load
processes' CPU use rides along (``rigbench_loadgen_cpu_percent`` for all of them together,
``rigbench_loadgen_cpu_percent_busiest`` for the busiest one, ``rigbench_machine_cpu_percent``
for the whole machine) so a report can say when the client was the bottleneck; so does the
machine's own noise (``rigbench_other_cpu_percent``, the CPU that neither the load nor the server
kept busy, and ``rigbench_server_cpu_percent``, the server's share where it runs here: ``ServedProcesses``)
so that two runs which shared their machine with different neighbours can be told apart.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import time
from collections.abc import Iterable
from urllib.parse import urlsplit

import httpx
import psutil
from prometheus_client.parser import text_string_to_metric_families

from core.rundir import TelemetrySnapshot
from loadtest.http_errors import describe_http_error

LOADGEN_CPU_METRIC = "rigbench_loadgen_cpu_percent"
BUSIEST_PROCESS_CPU_METRIC = "rigbench_loadgen_cpu_percent_busiest"
MACHINE_CPU_METRIC = "rigbench_machine_cpu_percent"
# percent of all the machine's cores, as MACHINE_CPU_METRIC: the server's processes where they run here, and
# everyone else (the machine less the load processes and the server; other_cpu_percent)
SERVER_CPU_METRIC = "rigbench_server_cpu_percent"
OTHER_CPU_METRIC = "rigbench_other_cpu_percent"
CPU_WARN_PERCENT = 90.0
NOT_THERE = (404, 405, 501)  # the endpoint does not exist on this server (as opposed to failing now)


def parse_metrics(text: str) -> dict[str, float]:
    """Flatten Prometheus samples to ``name{label="v",...}`` -> value."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = sample.name
            if sample.labels:
                key += "{" + ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())) + "}"
            values[key] = float(sample.value)
    return values


def count_slots(payload: object) -> tuple[int | None, int | None]:
    """(total, busy) from ``/slots``: a list of slot objects with ``is_processing``."""
    if not isinstance(payload, list):
        return None, None
    busy = sum(1 for slot in payload if isinstance(slot, dict) and slot.get("is_processing"))
    return len(payload), busy


ABSENT_ADVICE = {
    "/metrics": "no server counters or the server-side tok/s cross-check (start llama-server with --metrics)",
    "/slots": "no busy-slot counts (start llama-server with --slots)",
}


class ServerTelemetry:
    """Snapshots of one server through one client; endpoints the server lacks are asked once."""

    def __init__(self, client: httpx.Client):
        self.client = client
        self.absent: dict[str, str] = {}  # endpoint -> one line for the manifest

    def fetch(self, path: str, problems: list[str]) -> httpx.Response | None:
        """The endpoint's 200 answer, or None (a problem noted, or the endpoint known absent)."""
        if path in self.absent:
            return None
        try:
            response = self.client.get(path)
        except httpx.HTTPError as error:
            problems.append(describe_http_error(error))
            return None
        if response.status_code in NOT_THERE:
            self.absent[path] = (
                f"the server has no {path} (HTTP {response.status_code}): asked once, then skipped; "
                f"{ABSENT_ADVICE[path]}"
            )
            return None
        if response.status_code != 200:
            problems.append(f"{path}: HTTP {response.status_code}")
            return None
        return response

    def snapshot(
        self, step: int, users: int, boundary: str, extra: dict[str, float] | None = None
    ) -> TelemetrySnapshot:
        """One snapshot; never raises for an unreachable or partial server."""
        taken_at = time.time()
        metrics: dict[str, float] = dict(extra or {})
        problems: list[str] = []
        slots_total = slots_busy = None
        response = self.fetch("/metrics", problems)
        if response is not None:
            try:
                metrics.update(parse_metrics(response.text))
            except ValueError as error:
                problems.append(f"/metrics: {type(error).__name__}: {error}")
        response = self.fetch("/slots", problems)
        if response is not None:
            try:
                slots_total, slots_busy = count_slots(response.json())
            except ValueError as error:
                problems.append(f"/slots: {type(error).__name__}: {error}")
        return TelemetrySnapshot(
            taken_at=taken_at,
            step=step,
            users=users,
            boundary=boundary,  # type: ignore[arg-type]
            metrics=metrics,
            slots_total=slots_total,
            slots_busy=slots_busy,
            error="; ".join(problems) or None,
        )


def server_slots(base_url: str, timeout: float = 5.0) -> int | None:
    """How many parallel slots the server reports, or None if it does not say."""
    try:
        response = httpx.get(f"{base_url}/slots", timeout=timeout)
        if response.status_code == 200:
            return count_slots(response.json())[0]
    except (httpx.HTTPError, ValueError):
        pass
    return None


def cpu_warnings(index: int, cpu: dict[str, float]) -> list[str]:
    """A saturated load process or machine over a measured window: either one means the figures
    may measure the client, not the server. Judged per process (a process uses one core at most,
    whatever ``--processes`` says) and for the machine (load and a local server share its cores; how
    much of it other processes took says whether the run or its neighbours filled it)."""
    warnings = []
    busiest, machine = cpu[BUSIEST_PROCESS_CPU_METRIC], cpu[MACHINE_CPU_METRIC]
    if busiest > CPU_WARN_PERCENT:
        warnings.append(
            f"step {index}: a load process used {busiest:.0f}% CPU (of the one core it can use; all load processes "
            f"together {cpu[LOADGEN_CPU_METRIC]:.0f}%); the load generator may have been the bottleneck "
            "(use --processes N, or more machines)"
        )
    if machine > CPU_WARN_PERCENT:
        others = cpu.get(OTHER_CPU_METRIC)
        whose = "" if others is None else f", {others:.0f}% by processes other than the load and the server"
        warnings.append(
            f"step {index}: the machine's CPU was {machine:.0f}% busy over the window{whose} (load processes, and the "
            "server when it runs here, share its cores); latency may include waiting for a core"
        )
    return warnings


def local_port(url: str) -> int | None:
    """The port of ``url`` when its host is this machine, else None.

    This machine: a loopback or unspecified address, ``localhost``, this host's name, or an address one of its
    interfaces holds. Any other name counts as elsewhere without asking DNS (a lookup could hang a boundary);
    a server reached by such a name is then treated as remote."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    if host in ("localhost", socket.gethostname().lower()):
        return port
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    if address.is_loopback or address.is_unspecified:
        return port
    with contextlib.suppress(OSError):
        held = {entry.address.split("%")[0] for entries in psutil.net_if_addrs().values() for entry in entries}
        if str(address) in held:
            return port
    return None


class ServedProcesses:
    """The processes serving the run's URLs on this machine, and the CPU they used between readings.

    Why: the machine's busy CPU less the load processes' is the server plus everyone else; to say how busy
    everyone else kept the machine (``OTHER_CPU_METRIC``), the server's own share must come off too. A URL's
    server is the process listening on its port (llama-server, or what fronts it here) and that process's
    children, found once with psutil and looked for again only when one seen has gone (a restarted server); a
    server in a container whose port a proxy forwards counts as the proxy, its own processes among the others. Each
    process keeps its psutil object, so a reading costs one ``cpu_percent`` per process. A URL served elsewhere
    contributes nothing (its CPU is not this machine's); one served here whose listener cannot be seen (another
    user's process, or a system that does not let psutil list connections) is in ``unseen``: the others' figure
    then holds that server's CPU too, and the controller says so in the manifest."""

    def __init__(self, urls: Iterable[str]):
        self.ports = {url: port for url in urls if (port := local_port(url)) is not None}
        self.seen: set[str] = set()  # URLs whose listener was found at least once
        self.listeners: dict[int, tuple[str, psutil.Process]] = {}  # by pid: the URL it serves, the process
        self.processes: dict[int, psutil.Process] = {}  # every serving process by pid, each with its CPU clock
        self.find()

    @property
    def unseen(self) -> dict[str, int]:
        """Served-here URLs whose listener was never found, with their ports."""
        return {url: port for url, port in self.ports.items() if url not in self.seen}

    def pids(self) -> set[int]:
        return set(self.processes)

    def find(self) -> None:
        """Look for the listeners on the served ports (a scan of the machine's connections: done rarely)."""
        try:
            connections = psutil.net_connections(kind="inet") if self.ports else []
        except (psutil.Error, OSError):
            connections = []
        wanted = {port: url for url, port in self.ports.items()}
        for connection in connections:
            url = wanted.get(connection.laddr.port) if connection.laddr else None
            if url is None or connection.status != psutil.CONN_LISTEN or connection.pid is None:
                continue
            with contextlib.suppress(psutil.Error):
                self.listeners.setdefault(connection.pid, (url, psutil.Process(connection.pid)))
                self.seen.add(url)
        self._follow_children()

    def _follow_children(self) -> None:
        """Every live listener and its children, new ones with their CPU clock started."""
        current: dict[int, psutil.Process] = {}
        for pid, (_, listener) in list(self.listeners.items()):
            try:
                family = [listener, *listener.children(recursive=True)]
            except psutil.Error:
                del self.listeners[pid]
                continue
            for process in family:
                known = self.processes.get(process.pid, process)
                if process.pid not in self.processes:
                    with contextlib.suppress(psutil.Error):
                        known.cpu_percent()
                current[process.pid] = known
        self.processes = current

    def cpu_percent(self) -> float | None:
        """Percent of one core (as a process's ``cpu_percent``) the serving processes used since the last
        reading; None while no server process is known here. A process found since counts from when it was."""
        self.listeners = {pid: (url, p) for pid, (url, p) in self.listeners.items() if p.is_running()}
        if self.seen - {url for url, _ in self.listeners.values()}:
            self.find()  # a server seen before has gone: restarted, or about to be
        else:
            self._follow_children()
        if not self.processes:
            return None
        total = 0.0
        for process in self.processes.values():
            with contextlib.suppress(psutil.Error):
                total += process.cpu_percent()
        return total


def other_cpu_percent(machine: float, load: float, server: float | None, cores: int) -> float:
    """The machine's busy share (percent of all its cores, ``psutil.cpu_percent``'s scale) that neither the load
    processes nor the server used: ``load`` and ``server`` are per-core percents (100 = one core), so they are
    divided by the cores. Never below 0: the readings are taken a moment apart, and rounding can cross."""
    return max(0.0, machine - (load + (server or 0.0)) / max(1, cores))
