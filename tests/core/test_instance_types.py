"""The GPU instance-type table that infra, provision and analysis share."""

from __future__ import annotations

import pytest

from core.errors import InfraError
from core.instance_types import INSTANCE_TYPES, get_instance_type

REQUIRED = [
    "g6.xlarge", "g6.2xlarge", "g6.4xlarge", "g6e.xlarge", "g6e.2xlarge", "g5.xlarge", "g5.2xlarge", "g4dn.xlarge",
]


def test_the_required_types_are_known():
    assert set(REQUIRED) <= set(INSTANCE_TYPES)
    for name, row in INSTANCE_TYPES.items():
        assert row.name == name


@pytest.mark.parametrize(
    ("name", "gpu", "memory", "cc", "vcpu", "ram", "nvme", "price"),
    [
        ("g4dn.xlarge", "NVIDIA T4", 16, "7.5", 4, 16, 125, 0.526),
        ("g5.xlarge", "NVIDIA A10G", 24, "8.6", 4, 16, 250, 1.006),
        ("g6.xlarge", "NVIDIA L4", 24, "8.9", 4, 16, 250, 0.8048),
        ("g6.2xlarge", "NVIDIA L4", 24, "8.9", 8, 32, 450, 0.9776),
        ("g6.4xlarge", "NVIDIA L4", 24, "8.9", 16, 64, 600, 1.3232),
        ("g6e.2xlarge", "NVIDIA L40S", 48, "8.9", 8, 64, 450, 2.24208),
    ],
)
def test_figures_match_the_design_table(name, gpu, memory, cc, vcpu, ram, nvme, price):
    row = get_instance_type(name)
    assert (row.gpu_name, row.gpu_memory_gib, row.compute_capability) == (gpu, memory, cc)
    assert (row.vcpu, row.ram_gib, row.local_nvme_gb, row.on_demand_usd_per_hour) == (vcpu, ram, nvme, price)


def test_cuda_architecture_and_family():
    row = get_instance_type("g6.2xlarge")
    assert row.cuda_architecture == "89"
    assert row.family == "g6"
    assert get_instance_type("g4dn.xlarge").cuda_architecture == "75"


def test_unknown_type_names_the_known_ones():
    with pytest.raises(InfraError) as caught:
        get_instance_type("p5.48xlarge")
    message = str(caught.value)
    assert "'p5.48xlarge'" in message
    for name in REQUIRED:
        assert name in message


def test_rows_are_immutable():
    row = get_instance_type("g6.xlarge")
    with pytest.raises(ValueError):
        row.vcpu = 99
