"""Describe the machine a run's server is on (CPU, memory, GPU, driver), for the manifest.

``server_rig`` is the one description every command that makes a run writes (``local``, ``sweep``, a
hand-started Locust, the quality evals), so the same server on the same machine reads the same in
every report, whichever command measured it.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import urllib.parse

from core.network import is_loopback_url
from core.rundir import MachineInfo, RigInfo


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 0.0


def nvidia_gpu() -> dict[str, str]:
    """First GPU's name, memory (MiB) and driver from nvidia-smi; empty without one."""
    if shutil.which("nvidia-smi") is None:
        return {}
    query = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    if query.returncode != 0 or not query.stdout.strip():
        return {}
    name, memory, driver = (part.strip() for part in query.stdout.splitlines()[0].split(","))
    info = {"name": name, "memory_mib": memory, "driver": driver}
    banner = subprocess.run(["nvidia-smi"], capture_output=True, text=True, check=False).stdout
    if "CUDA Version:" in banner:
        info["cuda"] = banner.split("CUDA Version:", 1)[1].split()[0]
    return info


def machine_info() -> MachineInfo:
    gpu = nvidia_gpu()
    return MachineInfo(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(),
        cpu_cores=os.cpu_count() or 0,
        memory_gib=memory_gib(),
        gpu_name=gpu.get("name"),
        gpu_memory_mib=int(gpu["memory_mib"]) if gpu.get("memory_mib", "").isdigit() else None,
        driver_version=gpu.get("driver"),
        cuda_version=gpu.get("cuda"),
    )


def server_rig(url: str | None = None) -> RigInfo:
    """The rig of a server at ``url`` (``None``: one rigbench starts here), as far as this machine can tell.

    A server on this machine (a loopback URL) is described as this machine. Any other host is named and no
    more: this machine's CPU and GPU are the load generator's, and a report would price and roofline the
    wrong card. A port forwarded from a rig (an SSH tunnel) looks local too: measure a rig from the rig
    (``rigbench provision sweep``), whose run folders get the rig's facts."""
    if url is None or is_loopback_url(url):
        return RigInfo(kind="local", machine=machine_info())
    return RigInfo(kind="local", machine=MachineInfo(hostname=urllib.parse.urlsplit(url).hostname or ""))
