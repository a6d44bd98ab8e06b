"""Sample the machine's GPUs and CPU energy into a run directory while its load runs.

One thread wakes every ``interval_s`` (default 100 ms), takes a sample from each source and appends
it to the run's hardware shard; it starts before the first step, so the samples before the load
give the idle power. The sources are tried in order: NVML through its binding, else ``nvidia-smi``
in a loop, else no GPU ("not measured here", said once); RAPL for the CPU where the kernel has it.
Nothing here can fail a run: a missing GPU, a field a card lacks or a GPU lost mid-run is one line
in the manifest's account, and the sampler measures its own CPU time there, so its cost is known.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import RigbenchError
from core.rundir.hardware import CPU_ENERGY_SAMPLES, GPU_SAMPLES, HardwareInfo, append_samples, shard
from hardware.nvml_source import NvmlSource
from hardware.rapl import POWERCAP, RaplSource
from hardware.smi_source import SmiSource

DEFAULT_INTERVAL_S = 0.1
SLOW_FIELDS_EVERY_S = 1.0  # utilisation, memory, clocks, temperature: read once a second (NVML)


def open_gpu_source(interval_s: float, missing: list[str],
                    nvml: Callable[[], Any] | None = None) -> NvmlSource | SmiSource | None:
    """NVML, else nvidia-smi, else None; why each was passed over goes into ``missing``."""
    tried = []
    factories: list[tuple[str, Callable[[], Any]]] = [
        ("NVML", nvml or (lambda: NvmlSource(slow_every=max(1, round(SLOW_FIELDS_EVERY_S / interval_s))))),
        ("nvidia-smi", lambda: SmiSource(interval_s)),
    ]
    for label, factory in factories:
        try:
            source = factory()
            source.open()
            return source
        except RigbenchError as error:
            tried.append(f"{label}: {error}")
    missing.append("GPU: not measured here (" + "; ".join(tried) + ")")
    return None


class HardwareSampler:
    """``with HardwareSampler(run_path) as sampler: …``; ``sampler.info`` is the manifest's account after."""

    def __init__(self, run_path: Path, interval_s: float = DEFAULT_INTERVAL_S, powercap: Path = POWERCAP,
                 nvml: Callable[[], Any] | None = None, gpus: list[int] | None = None) -> None:
        """``gpus``: the GPU indices the server uses (None: every GPU the driver lists); the others are not
        the run's energy, however busy another job keeps them."""
        self.run_path = Path(run_path)
        self.served = set(gpus) if gpus is not None else None
        self.interval_s = interval_s
        self.powercap = powercap
        self.nvml = nvml
        self.missing: list[str] = []
        self.gpu: NvmlSource | SmiSource | None = None
        self.cpu: RaplSource | None = None
        self.samples = 0
        self.started_at: float | None = None
        self.ended_at: float | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._thread_cpu = 0.0
        self.info: HardwareInfo | None = None

    def __enter__(self) -> HardwareSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.gpu = open_gpu_source(self.interval_s, self.missing, self.nvml)
        if self.gpu is not None and self.served is not None:
            others = [d.index for d in self.gpu.devices if d.index not in self.served]
            if others:
                self.missing.append(f"GPU(s) {', '.join(map(str, others))}: not sampled, the server does not use them")
        rapl = RaplSource(self.powercap)
        self.cpu = rapl if rapl.open() else None
        self.missing.extend(rapl.missing)
        self.started_at = time.time()
        if self.gpu is None and self.cpu is None:
            return
        self._thread = threading.Thread(target=self._loop, name="hardware-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        started = time.thread_time()
        gpu_path = shard(self.run_path, GPU_SAMPLES)
        cpu_path = shard(self.run_path, CPU_ENERGY_SAMPLES)
        next_at = time.monotonic()
        try:
            while True:
                self._take(gpu_path, cpu_path)
                next_at += self.interval_s
                if self._stop.wait(max(0.0, next_at - time.monotonic())):
                    break
            self._take(gpu_path, cpu_path)  # the last samples close the last window
        except Exception as error:  # noqa: BLE001 - a sampler must never fail the run it measures
            self.missing.append(f"sampling stopped at {time.time():.1f}: {type(error).__name__}: {error}")
        finally:
            self._thread_cpu = time.thread_time() - started

    def _take(self, gpu_path: Path, cpu_path: Path) -> None:
        if self.gpu is not None:
            gpu_samples = [g for g in self.gpu.sample() if self.served is None or g.gpu in self.served]
            append_samples(gpu_path, gpu_samples)
            self.samples += len(gpu_samples)
        if self.cpu is not None:
            cpu_samples = self.cpu.sample()
            append_samples(cpu_path, cpu_samples)
            self.samples += len(cpu_samples)

    def stop(self) -> HardwareInfo:
        if self.info is not None:
            return self.info
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        own = 0.0
        if self.gpu is not None:
            self.gpu.close()
            own = self.gpu.own_cpu_seconds()
            self.missing.extend(line for line in self.gpu.missing if line not in self.missing)
        self.ended_at = time.time()
        self.info = HardwareInfo(
            gpu_source=None if self.gpu is None else self.gpu.name,  # type: ignore[arg-type]
            cpu_source="rapl" if self.cpu is not None else None,
            interval_s=self.interval_s,
            gpus=[d for d in (self.gpu.devices if self.gpu else []) if self.served is None or d.index in self.served],
            missing=self.missing,
            samples=self.samples,
            started_at=self.started_at,
            ended_at=self.ended_at,
            sampler_cpu_seconds=round(self._thread_cpu + own, 4),
        )
        return self.info
