"""Server telemetry at step boundaries: ``/metrics`` (Prometheus text) and ``/slots``.

llama-server exposes ``/metrics`` only with ``--metrics`` and ``/slots`` only with
``--slots`` (on by default in recent builds); other OpenAI-compatible servers may have
neither. An endpoint that answers "not there" (404, 405, 501) is asked once and then skipped
for the rest of the sweep, with one line in the manifest (``ServerTelemetry.absent``); any
other failure becomes that snapshot's ``error`` rather than a failed sweep. The load
processes' CPU use rides along (``rigbench_loadgen_cpu_percent`` for all of them together,
``rigbench_loadgen_cpu_percent_busiest`` for the busiest one, ``rigbench_machine_cpu_percent``
for the whole machine) so a report can say when the client was the bottleneck.
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.rundir import TelemetrySnapshot
from loadtest.http_errors import describe_http_error

LOADGEN_CPU_METRIC = "rigbench_loadgen_cpu_percent"
BUSIEST_PROCESS_CPU_METRIC = "rigbench_loadgen_cpu_percent_busiest"
MACHINE_CPU_METRIC = "rigbench_machine_cpu_percent"
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
    whatever ``--processes`` says) and for the machine (load and a local server share its cores)."""
    warnings = []
    busiest, machine = cpu[BUSIEST_PROCESS_CPU_METRIC], cpu[MACHINE_CPU_METRIC]
    if busiest > CPU_WARN_PERCENT:
        warnings.append(
            f"step {index}: a load process used {busiest:.0f}% CPU (of the one core it can use; all load processes "
            f"together {cpu[LOADGEN_CPU_METRIC]:.0f}%); the load generator may have been the bottleneck "
            "(use --processes N, or more machines)"
        )
    if machine > CPU_WARN_PERCENT:
        warnings.append(
            f"step {index}: the machine's CPU was {machine:.0f}% busy over the window (load processes, and the "
            "server when it runs here, share its cores); latency may include waiting for a core"
        )
    return warnings
