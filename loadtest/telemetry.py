"""Server telemetry at step boundaries: ``/metrics`` (Prometheus text) and ``/slots``.

llama-server exposes ``/metrics`` only with ``--metrics`` and ``/slots`` only with
``--slots`` (on by default in recent builds); a missing endpoint becomes the snapshot's
``error`` rather than a failed sweep. The load process's own CPU use rides along as
``rigbench_loadgen_cpu_percent`` so a report can say when the client was the bottleneck.
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from core.rundir import TelemetrySnapshot

LOADGEN_CPU_METRIC = "rigbench_loadgen_cpu_percent"


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


def take_snapshot(
    client: httpx.Client, step: int, users: int, boundary: str, extra: dict[str, float] | None = None
) -> TelemetrySnapshot:
    """One snapshot; never raises for an unreachable or partial server."""
    taken_at = time.time()
    metrics: dict[str, float] = dict(extra or {})
    problems = []
    slots_total = slots_busy = None
    try:
        response = client.get("/metrics")
        if response.status_code == 200:
            metrics.update(parse_metrics(response.text))
        else:
            problems.append(f"/metrics: HTTP {response.status_code} (start llama-server with --metrics)")
    except (httpx.HTTPError, ValueError) as error:
        problems.append(f"/metrics: {type(error).__name__}: {error}")
    try:
        response = client.get("/slots")
        if response.status_code == 200:
            slots_total, slots_busy = count_slots(response.json())
        else:
            problems.append(f"/slots: HTTP {response.status_code}")
    except (httpx.HTTPError, ValueError) as error:
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
