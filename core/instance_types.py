"""The one table of GPU instance types rigbench knows.

infra picks the instance from it (and refuses types that are not in it), provision reads the
compute capability to build llama.cpp for the right CUDA architecture, and analysis reads the
hardware figures and the on-demand price. Keeping it in one place means a new type is added
once and every stage agrees on it.

Figures come from the vendors' specifications and the public AWS price list. GPU memory is
the nominal size the vendor sells; the driver shows a little less. ``on_demand_usd_per_hour``
is the us-east-1 Linux on-demand price where it is known here, and ``None`` where it is not:
analysis then asks the price list, not this table (the bundled price snapshot holds the same
figures, with their source and date; a test keeps the two equal).

The eight-GPU P types are here so that a run measured on one of their GPUs can be priced (as a
per-GPU share of the instance, ``analysis.cost``); infra can rent them too, but a run there
serves from all eight GPUs and is priced as the whole instance.

The four- and eight-GPU G types (``g5.12xlarge`` and ``g5.48xlarge``, ``g6.12xlarge`` and
``g6.48xlarge``, ``g6e.12xlarge``) are the multi-GPU rigs a small model is rented on: one
llama-server replica per GPU, or one server split over them (the ``gemma3-270m-4gpu-*``
profiles). A run on such a rig is priced as the whole instance, whatever it used of it; a run
elsewhere priced as one of them is priced as the share of the GPUs it used (``analysis.cost``).

The names are also what ``--price-as`` and ``--hypothetical`` accept; :func:`known_types` refuses
any other in one line naming the flag and the known types.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ConfigDict, Field

from core.errors import InfraError, UsageError
from core.gpus import find_gpu
from core.strict import Strict


class InstanceType(Strict):
    """One EC2 GPU instance type and the figures the stages need about it."""

    model_config = ConfigDict(frozen=True)

    name: str
    gpu_name: str
    gpu_count: int = 1
    gpu_memory_gib: int = Field(description="nominal memory of one GPU")
    compute_capability: str = Field(description="CUDA compute capability, e.g. '8.9'")
    vcpu: int
    ram_gib: int
    local_nvme_gb: int = Field(description="instance-store NVMe, all disks together")
    on_demand_usd_per_hour: float | None = Field(default=None, description="us-east-1 Linux on-demand; None = unknown")

    @property
    def gpu_memory_bandwidth_gb_s(self) -> float | None:
        """One GPU's peak memory bandwidth (decimal GB/s), read from ``core.gpus`` so each card's
        figure is written once; None for a card that table lacks."""
        known = find_gpu(self.gpu_name)
        return known.memory_bandwidth_gb_s if known is not None else None

    @property
    def family(self) -> str:
        """``g6`` for ``g6.2xlarge``."""
        return self.name.split(".", 1)[0]


def _table(*rows: InstanceType) -> dict[str, InstanceType]:
    return {row.name: row for row in rows}


INSTANCE_TYPES: dict[str, InstanceType] = _table(
    InstanceType(name="g4dn.xlarge", gpu_name="NVIDIA T4", gpu_memory_gib=16, compute_capability="7.5",
                 vcpu=4, ram_gib=16, local_nvme_gb=125, on_demand_usd_per_hour=0.526),
    InstanceType(name="g5.xlarge", gpu_name="NVIDIA A10G", gpu_memory_gib=24, compute_capability="8.6",
                 vcpu=4, ram_gib=16, local_nvme_gb=250, on_demand_usd_per_hour=1.006),
    InstanceType(name="g5.2xlarge", gpu_name="NVIDIA A10G", gpu_memory_gib=24, compute_capability="8.6",
                 vcpu=8, ram_gib=32, local_nvme_gb=450, on_demand_usd_per_hour=1.212),
    InstanceType(name="g6.xlarge", gpu_name="NVIDIA L4", gpu_memory_gib=24, compute_capability="8.9",
                 vcpu=4, ram_gib=16, local_nvme_gb=250, on_demand_usd_per_hour=0.8048),
    InstanceType(name="g6.2xlarge", gpu_name="NVIDIA L4", gpu_memory_gib=24, compute_capability="8.9",
                 vcpu=8, ram_gib=32, local_nvme_gb=450, on_demand_usd_per_hour=0.9776),
    InstanceType(name="g6.4xlarge", gpu_name="NVIDIA L4", gpu_memory_gib=24, compute_capability="8.9",
                 vcpu=16, ram_gib=64, local_nvme_gb=600, on_demand_usd_per_hour=1.3232),
    InstanceType(name="g6e.xlarge", gpu_name="NVIDIA L40S", gpu_memory_gib=48, compute_capability="8.9",
                 vcpu=4, ram_gib=32, local_nvme_gb=250, on_demand_usd_per_hour=1.861),
    InstanceType(name="g6e.2xlarge", gpu_name="NVIDIA L40S", gpu_memory_gib=48, compute_capability="8.9",
                 vcpu=8, ram_gib=64, local_nvme_gb=450, on_demand_usd_per_hour=2.24208),
    InstanceType(name="g5.12xlarge", gpu_name="NVIDIA A10G", gpu_count=4, gpu_memory_gib=24,
                 compute_capability="8.6", vcpu=48, ram_gib=192, local_nvme_gb=3800, on_demand_usd_per_hour=5.672),
    InstanceType(name="g5.48xlarge", gpu_name="NVIDIA A10G", gpu_count=8, gpu_memory_gib=24,
                 compute_capability="8.6", vcpu=192, ram_gib=768, local_nvme_gb=7600, on_demand_usd_per_hour=16.288),
    InstanceType(name="g6.12xlarge", gpu_name="NVIDIA L4", gpu_count=4, gpu_memory_gib=24,
                 compute_capability="8.9", vcpu=48, ram_gib=192, local_nvme_gb=3760, on_demand_usd_per_hour=4.6016),
    InstanceType(name="g6.48xlarge", gpu_name="NVIDIA L4", gpu_count=8, gpu_memory_gib=24,
                 compute_capability="8.9", vcpu=192, ram_gib=768, local_nvme_gb=60800,
                 on_demand_usd_per_hour=13.3504),
    InstanceType(name="g6e.12xlarge", gpu_name="NVIDIA L40S", gpu_count=4, gpu_memory_gib=48,
                 compute_capability="8.9", vcpu=48, ram_gib=384, local_nvme_gb=3800,
                 on_demand_usd_per_hour=10.49264),
    InstanceType(name="p4d.24xlarge", gpu_name="NVIDIA A100 40GB", gpu_count=8, gpu_memory_gib=40,
                 compute_capability="8.0", vcpu=96, ram_gib=1152, local_nvme_gb=8000,
                 on_demand_usd_per_hour=21.957642),
    InstanceType(name="p4de.24xlarge", gpu_name="NVIDIA A100 80GB", gpu_count=8, gpu_memory_gib=80,
                 compute_capability="8.0", vcpu=96, ram_gib=1152, local_nvme_gb=8000,
                 on_demand_usd_per_hour=27.44705),
    InstanceType(name="p5.48xlarge", gpu_name="NVIDIA H100", gpu_count=8, gpu_memory_gib=80,
                 compute_capability="9.0", vcpu=192, ram_gib=2048, local_nvme_gb=30720,
                 on_demand_usd_per_hour=55.04),
    InstanceType(name="p5en.48xlarge", gpu_name="NVIDIA H200", gpu_count=8, gpu_memory_gib=141,
                 compute_capability="9.0", vcpu=192, ram_gib=2048, local_nvme_gb=30720,
                 on_demand_usd_per_hour=63.296),
)


def known_instance_type_names() -> list[str]:
    return sorted(INSTANCE_TYPES)


def known_types(values: Iterable[str], flag: str) -> list[str]:
    """The instance types named by a price flag (each value may hold several, comma-separated), in order,
    once each. An unknown name is refused before anything is read, in one line naming the flag and the
    known types: a price that silently disappears from a report reads as "not priced" for the wrong reason."""
    names: list[str] = []
    for value in values:
        for name in (piece.strip() for piece in value.split(",")):
            if not name:
                continue
            if name not in INSTANCE_TYPES:
                raise UsageError(
                    f"{flag}: {name!r} is not an instance type rigbench knows; known: "
                    f"{', '.join(known_instance_type_names())} (`rigbench prices list` shows their GPUs and prices)"
                )
            if name not in names:
                names.append(name)
    return names


def get_instance_type(name: str) -> InstanceType:
    """The table row for ``name``; an unknown (or non-GPU) type is refused with the known names."""
    try:
        return INSTANCE_TYPES[name.strip()]
    except KeyError:
        known = ", ".join(known_instance_type_names())
        raise InfraError(
            f"instance type {name!r} is not a GPU type rigbench knows; expected one of: {known}. "
            "Pick one of those, or add the type to core/instance_types.py with its GPU figures."
        ) from None
