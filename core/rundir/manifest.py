"""New run manifests: one builder for every run this project starts.

Why one: the local rig, ``rigbench sweep``, a hand-started Locust, the selftest and a resumed
sweep all start runs; each knows different facts (a build, models, a rig), but the run id, the
creation time and the server's address are made the same way.
"""

from __future__ import annotations

import datetime as dt
import secrets
from urllib.parse import urlsplit

from core.profile import parallel_slots
from core.rundir.models import BuildInfo, LoadSettings, ModelInfo, RigInfo, RunManifest, ServerInfo, SlotsFrom

DEFAULT_PORTS = {"http": 80, "https": 443}


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def new_run_id(label: str) -> str:
    """``<UTC time>-<label>-<4 hex digits>``: sorts by time, says what ran, never collides twice a second."""
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{label}-{secrets.token_hex(2)}"


def server_at(url: str, args: list[str] | None = None, slots: int | None = None,
              slots_from: SlotsFrom | None = None) -> ServerInfo:
    """The manifest's server entry for a server reached at ``url``: ``slots`` as given (and where
    they came from), else the count the served ``args`` set, else unknown."""
    parts = urlsplit(url)
    if slots is None and args:
        slots, slots_from = parallel_slots(args), "flags"
    return ServerInfo(
        args=list(args or []),
        host=parts.hostname or "",
        port=parts.port if parts.port is not None else DEFAULT_PORTS.get(parts.scheme, 80),
        scheme="https" if parts.scheme == "https" else "http",
        parallel_slots=slots,
        slots_from=slots_from if slots is not None else None,
    )


def new_manifest(
    label: str,
    profile: str,
    *,
    load: LoadSettings,
    server: ServerInfo | None,
    rig: RigInfo | None = None,
    build: BuildInfo | None = None,
    model: ModelInfo | None = None,
    drafter: ModelInfo | None = None,
    resumed_from: str | None = None,
    linked_runs: list[str] | None = None,
) -> RunManifest:
    """A run's first manifest (status ``running``), with a fresh run id made from ``label``."""
    return RunManifest(
        run_id=new_run_id(label),
        created_at=utc_now(),
        profile=profile,
        rig=rig or RigInfo(),
        build=build,
        model=model,
        drafter=drafter,
        server=server,
        load=load,
        resumed_from=resumed_from,
        linked_runs=list(linked_runs or []),
    )
