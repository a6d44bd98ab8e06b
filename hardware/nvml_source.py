"""GPU samples from NVIDIA's management library through its kept binding (``nvidia-ml-py``, imported as
``pynvml``): the card's own cumulative energy counter where it has one, which is what energy per token
should be read from, rather than power integrated over samples.

Power and energy are read every sample; utilisation, memory, clocks, temperature and clock-event
reasons change slowly and cost most of a sample's CPU time, so they are read every ``slow_every``
samples. A field the card does not support is None and named once; a GPU that stops answering is
named once and left out of later samples.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from core.errors import RigbenchError
from core.rundir.hardware import GpuDevice, GpuSample


class NvmlUnavailable(RigbenchError):
    """The binding is not installed, or the library or a GPU is not there: the caller falls back."""


def load_pynvml() -> Any:
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable(f"the NVML binding (nvidia-ml-py) is not installed ({error})") from None
    return pynvml


class NvmlSource:
    name = "nvml"

    def __init__(self, slow_every: int = 10, nvml: Any | None = None) -> None:
        self.nvml = nvml or load_pynvml()
        self.slow_every = max(1, slow_every)
        self.handles: dict[int, Any] = {}
        self.devices: list[GpuDevice] = []
        self.missing: list[str] = []
        self._unsupported: set[tuple[int, str]] = set()
        self._count = 0

    def open(self) -> list[GpuDevice]:
        nvml = self.nvml
        try:
            nvml.nvmlInit()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML did not start ({error})") from None
        if count == 0:
            nvml.nvmlShutdown()
            raise NvmlUnavailable("NVML sees no GPU")
        try:
            for index in range(count):
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                name = nvml.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
                energy = self._read(index, "energy_j", lambda h=handle: nvml.nvmlDeviceGetTotalEnergyConsumption(h))
                self.handles[index] = handle
                self.devices.append(GpuDevice(index=index, name=name, energy_counter=energy is not None))
        except nvml.NVMLError as error:  # a GPU lost, or one this container may not open
            self.close()
            raise NvmlUnavailable(f"NVML could not open GPU {index} ({error})") from None
        return self.devices

    def _read(self, index: int, field: str, read: Callable[[], Any]) -> Any:
        if (index, field) in self._unsupported:
            return None
        try:
            return read()
        except (self.nvml.NVMLError_NotSupported, AttributeError) as error:  # AttributeError: a binding too old
            self._unsupported.add((index, field))
            why = "the NVML binding here has no call for it" if isinstance(error, AttributeError) else \
                "not supported by the card or driver"
            self.missing.append(f"GPU {index}: {field} {why}")
            return None

    def sample(self) -> list[GpuSample]:
        nvml = self.nvml
        slow = self._count % self.slow_every == 0
        self._count += 1
        samples = []
        for index, handle in list(self.handles.items()):
            now = time.time()
            try:
                fields: dict[str, Any] = {
                    "power_w": _scaled(self._read(index, "power_w",
                                                  lambda h=handle: nvml.nvmlDeviceGetPowerUsage(h)), 1e-3),
                    "energy_j": _scaled(self._read(index, "energy_j",
                                                   lambda h=handle: nvml.nvmlDeviceGetTotalEnergyConsumption(h)), 1e-3),
                }
                if slow:
                    fields |= self._slow_fields(index, handle)
            except nvml.NVMLError as error:  # GPU lost, driver gone: say so once, keep sampling the others
                self.missing.append(f"GPU {index}: stopped answering at {now:.1f} ({error}); left out after")
                del self.handles[index]
                continue
            samples.append(GpuSample(t=now, gpu=index, **fields))
        return samples

    def _slow_fields(self, index: int, handle: Any) -> dict[str, Any]:
        nvml = self.nvml
        utilisation = self._read(index, "utilisation", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        memory = self._read(index, "memory_used_mib", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))
        return {
            "sm_util_pct": None if utilisation is None else float(utilisation.gpu),
            "memory_util_pct": None if utilisation is None else float(utilisation.memory),
            "memory_used_mib": None if memory is None else memory.used / 2**20,
            "sm_clock_mhz": self._read(index, "sm_clock_mhz",
                                       lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
            "temperature_c": self._read(index, "temperature_c",
                                        lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
            "throttle_reasons": self._read(index, "throttle_reasons",
                                           lambda: nvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        }

    def close(self) -> None:
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlShutdown()

    def own_cpu_seconds(self) -> float:
        """NVML runs in the sampler's own thread: its time is counted there."""
        return 0.0


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor
