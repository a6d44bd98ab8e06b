"""Peak memory bandwidth of the GPUs rigbench knows, keyed by the name nvidia-smi gives them.

Why a table apart from the instance types: a run names its card (the manifest's
``machine.gpu_name``, read from nvidia-smi) even on a machine that is no EC2 type this project
rents, such as a lent H200, and the roofline needs the card's bandwidth either way. The instance
table reads its GPUs' bandwidth from here, so each card's figure is written once.

Figures are the vendors' datasheet peaks in decimal GB/s (10^9 bytes per second); no card
reaches its peak in practice, which is why the roofline is a ceiling and not a forecast.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from core.strict import Strict


class GpuSpec(Strict):
    """One GPU model and the figure the roofline needs about it."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="as nvidia-smi names the card, e.g. 'NVIDIA L4'")
    memory_bandwidth_gb_s: float = Field(gt=0, description="datasheet peak, decimal GB/s")
    other_names: tuple[str, ...] = Field(default=(), description="other spellings nvidia-smi uses for it")


def _table(*rows: GpuSpec) -> dict[str, GpuSpec]:
    return {row.name: row for row in rows}


KNOWN_GPUS: dict[str, GpuSpec] = _table(
    GpuSpec(name="NVIDIA T4", memory_bandwidth_gb_s=320, other_names=("Tesla T4",)),
    GpuSpec(name="NVIDIA A10G", memory_bandwidth_gb_s=600),
    GpuSpec(name="NVIDIA L4", memory_bandwidth_gb_s=300),
    GpuSpec(name="NVIDIA L40S", memory_bandwidth_gb_s=864),
    GpuSpec(name="NVIDIA A100 40GB", memory_bandwidth_gb_s=1555, other_names=("NVIDIA A100-SXM4-40GB",)),
    GpuSpec(name="NVIDIA A100 80GB", memory_bandwidth_gb_s=2039, other_names=("NVIDIA A100-SXM4-80GB",)),
    GpuSpec(name="NVIDIA H100", memory_bandwidth_gb_s=3350, other_names=("NVIDIA H100 80GB HBM3",)),
    GpuSpec(name="NVIDIA H200", memory_bandwidth_gb_s=4800, other_names=("NVIDIA H200 NVL",)),
)


def _spelling(name: str) -> str:
    return " ".join(name.lower().split())


def find_gpu(name: str | None) -> GpuSpec | None:
    """The table row for a GPU name as nvidia-smi (or the instance table) spells it; None when unknown."""
    if not name:
        return None
    wanted = _spelling(name)
    for row in KNOWN_GPUS.values():
        if wanted in {_spelling(spelling) for spelling in (row.name, *row.other_names)}:
            return row
    return None
