"""The hardware sampler around a run's load, where the server runs on this machine.

Why in the app: the sampler (``hardware``) and the load (``loadtest``) are stages that do not know
each other; the commands that run a sweep here (``rigbench local``, ``rigbench sweep``, and the
sweep a rig runs against its own 127.0.0.1) put one around the other and write the sampler's
account into the run's manifest. A server elsewhere has its GPU elsewhere: that is said once,
never measured from here.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from urllib.parse import urlsplit

import psutil

from core.rundir import RunDir
from core.rundir.hardware import HardwareInfo
from hardware.sampler import DEFAULT_INTERVAL_S, HardwareSampler

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "0.0.0.0"}
TUNNELS = {"ssh", "autossh", "sshd"}  # processes that forward a port to another machine


def listener_name(port: int) -> str | None:
    """The name of the process listening on ``port`` here, when it can be seen."""
    try:
        for connection in psutil.net_connections(kind="tcp"):
            if connection.status == psutil.CONN_LISTEN and connection.laddr and connection.laddr.port == port:
                return psutil.Process(connection.pid).name() if connection.pid else None
    except (psutil.Error, OSError):
        return None
    return None


def on_this_machine(url: str) -> bool:
    """A loopback URL whose listener is not an SSH tunnel: a port forwarded to a rig answers on 127.0.0.1 here,
    but its GPU is the rig's."""
    parts = urlsplit(url)
    if (parts.hostname or "") not in LOCAL_HOSTS:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return listener_name(port) not in TUNNELS


@contextlib.contextmanager
def sampled_hardware(run: RunDir, url: str, interval_s: float = DEFAULT_INTERVAL_S,
                     enabled: bool = True) -> Iterator[HardwareSampler | None]:
    """Sample while the block runs (it starts before the load, so the first samples are the idle power); the
    account goes into the manifest however the block ends."""
    if not enabled:
        yield None
        return
    if not on_this_machine(url):
        run.update_manifest(hardware=HardwareInfo(interval_s=interval_s, missing=[
            f"GPU and CPU energy: not measured here (the server at {url} is on another machine, or behind an SSH "
            "tunnel to one)"]))
        yield None
        return
    sampler = HardwareSampler(run.path, interval_s=interval_s, gpus=served_gpus(run))
    try:
        sampler.start()
    except Exception as error:  # noqa: BLE001 - the sampler must never fail the run it would measure
        run.update_manifest(hardware=HardwareInfo(interval_s=interval_s, missing=[
            f"GPU and CPU energy: the sampler did not start ({type(error).__name__}: {error})"]))
        yield None
        return
    try:
        yield sampler
    finally:
        run.update_manifest(hardware=sampler.stop())


def served_gpus(run: RunDir) -> list[int] | None:
    """The GPUs the run's server uses: its replicas' GPUs, else this process's CUDA_VISIBLE_DEVICES (the server
    inherits it), else every GPU (None)."""
    server = run.read_manifest().server
    placed = sorted({r.gpu for r in server.replicas if r.gpu is not None}) if server is not None else []
    if placed:
        return placed
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")
    return [int(v) for v in visible] if visible and all(v.strip().isdigit() for v in visible) else None
