"""What the machine's accelerators and CPU did while a run measured: the run directory's hardware shard.

Why its own shard: the samples come from another source than the requests (the GPU's management
library, ``nvidia-smi`` or the kernel's RAPL counters), at their own rate, and a run without a GPU
or without power counters must still be a whole run. Every sample carries unix seconds, the same
clock as the request records, so a step's measured window selects its samples directly.

    hardware/gpu.jsonl         GpuSample per line (one per GPU per interval)
    hardware/cpu_energy.jsonl  CpuEnergySample per line (one per RAPL domain per interval)

The sampler appends to plain files; ``rigbench compact`` gzips them (``.jsonl.gz``) once the run has ended.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError

from core.errors import RunDirError
from core.rundir.jsonl import GZIP_ERRORS, forms, iter_lines
from core.strict import Strict
from core.validation import describe_validation_error

FOLDER = "hardware"
GPU_SAMPLES = "gpu.jsonl"
CPU_ENERGY_SAMPLES = "cpu_energy.jsonl"
GpuSource = Literal["nvml", "nvidia-smi"]


class GpuSample(Strict):
    """One GPU at one instant. A field the card or the source does not give is None, never 0."""

    t: float = Field(description="unix seconds, the request records' clock")
    gpu: int = Field(description="the GPU's index as the driver numbers it")
    power_w: float | None = Field(None, description="board power draw, W")
    energy_j: float | None = Field(None, description="the card's cumulative energy counter, J (NVML; since "
                                                     "the driver loaded)")
    sm_util_pct: float | None = None
    memory_util_pct: float | None = None
    memory_used_mib: float | None = None
    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    throttle_reasons: int | None = Field(None, description="the driver's clock event reasons, a bit mask")


class CpuEnergySample(Strict):
    """One RAPL domain's cumulative energy counter at one instant (already unwrapped)."""

    t: float
    domain: str = Field(description="e.g. package-0, dram")
    energy_j: float


class GpuDevice(Strict):
    index: int
    name: str
    energy_counter: bool = Field(description="whether the card reports cumulative energy")


class HardwareInfo(Strict):
    """The manifest's account of the sampling: what was sampled, how, what was missing, and its own cost."""

    gpu_source: GpuSource | None = None
    cpu_source: Literal["rapl"] | None = None
    interval_s: float
    gpus: list[GpuDevice] = Field(default_factory=list)
    missing: list[str] = Field(default_factory=list, description="fields or devices not measured, one line each")
    samples: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    sampler_cpu_seconds: float | None = Field(None, description="CPU time the sampler itself took")

    @property
    def cpu_share(self) -> float | None:
        """The sampler's CPU time over its wall time: the share of one core it took."""
        if self.sampler_cpu_seconds is None or self.started_at is None or self.ended_at is None:
            return None
        wall = self.ended_at - self.started_at
        return self.sampler_cpu_seconds / wall if wall > 0 else None


def shard(run_path: Path, name: str) -> Path:
    folder = Path(run_path) / FOLDER
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / name


def append_samples(path: Path, samples: list[GpuSample] | list[CpuEnergySample]) -> None:
    if samples:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write("".join(sample.model_dump_json(exclude_none=True) + "\n" for sample in samples))


def _read(path: Path, model: type[Strict]) -> list:
    """Each sample of the shard ``path``, plain or packed by ``rigbench compact`` (both, packed first, where both
    are: ``core.rundir.jsonl``)."""
    found = []
    for form in forms(path):
        try:
            for number, line, is_last in iter_lines(form):
                if not line.strip():
                    continue
                try:
                    found.append(model.model_validate(json.loads(line)))
                except (json.JSONDecodeError, ValidationError) as error:
                    if is_last:  # a sampler killed mid-line: the last line may be half written
                        break
                    detail = describe_validation_error(error, f"{form}:{number}") \
                        if isinstance(error, ValidationError) else f"{form}:{number}: not JSON ({error})"
                    raise RunDirError(detail) from None
        except GZIP_ERRORS as error:
            raise RunDirError(f"{form}: the gzip stream is damaged or cut short ({error}); restore it from its "
                              "committed copy, or remove it to report without these samples") from None
    return found


def read_gpu_samples(run_path: Path) -> list[GpuSample]:
    return _read(Path(run_path) / FOLDER / GPU_SAMPLES, GpuSample)


def read_cpu_energy_samples(run_path: Path) -> list[CpuEnergySample]:
    return _read(Path(run_path) / FOLDER / CPU_ENERGY_SAMPLES, CpuEnergySample)
