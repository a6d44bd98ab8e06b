"""The GPU instance-type table that infra, provision and analysis share."""

from __future__ import annotations

import pytest

from core.errors import InfraError, UsageError
from core.instance_types import INSTANCE_TYPES, get_instance_type, known_types

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
        ("g6e.xlarge", "NVIDIA L40S", 48, "8.9", 4, 32, 250, 1.861),
        ("g5.2xlarge", "NVIDIA A10G", 24, "8.6", 8, 32, 450, 1.212),
        ("g5.12xlarge", "NVIDIA A10G", 24, "8.6", 48, 192, 3800, 5.672),
        ("g5.48xlarge", "NVIDIA A10G", 24, "8.6", 192, 768, 7600, 16.288),
        ("g6.12xlarge", "NVIDIA L4", 24, "8.9", 48, 192, 3760, 4.6016),
        ("g6.48xlarge", "NVIDIA L4", 24, "8.9", 192, 768, 60800, 13.3504),
        ("g6e.12xlarge", "NVIDIA L40S", 48, "8.9", 48, 384, 3800, 10.49264),
        ("p4d.24xlarge", "NVIDIA A100 40GB", 40, "8.0", 96, 1152, 8000, 21.957642),
        ("p4de.24xlarge", "NVIDIA A100 80GB", 80, "8.0", 96, 1152, 8000, 27.44705),
        ("p5.48xlarge", "NVIDIA H100", 80, "9.0", 192, 2048, 30720, 55.04),
        ("p5en.48xlarge", "NVIDIA H200", 141, "9.0", 192, 2048, 30720, 63.296),
    ],
)
def test_figures_match_the_design_table(name, gpu, memory, cc, vcpu, ram, nvme, price):
    row = get_instance_type(name)
    assert (row.gpu_name, row.gpu_memory_gib, row.compute_capability) == (gpu, memory, cc)
    assert (row.vcpu, row.ram_gib, row.local_nvme_gb, row.on_demand_usd_per_hour) == (vcpu, ram, nvme, price)


def test_family():
    assert get_instance_type("g6.2xlarge").family == "g6"
    assert get_instance_type("g4dn.xlarge").family == "g4dn"


def test_the_p_types_have_eight_gpus_and_the_g_types_one_four_or_eight_by_size():
    sizes = {"12xlarge": 4, "48xlarge": 8}
    for name, row in INSTANCE_TYPES.items():
        size = name.split(".", 1)[1]
        assert row.gpu_count == (8 if row.family.startswith("p") else sizes.get(size, 1)), name
    assert get_instance_type("p5en.48xlarge").compute_capability == "9.0"
    assert get_instance_type("g6.12xlarge").compute_capability == "8.9"


def test_unknown_type_names_the_known_ones():
    with pytest.raises(InfraError) as caught:
        get_instance_type("p9.fake")  # p5.48xlarge, the example here once, is known now
    message = str(caught.value)
    assert "'p9.fake'" in message
    for name in REQUIRED:
        assert name in message


def test_price_flags_take_known_types_once_each_in_order():
    assert known_types(["g6.xlarge", "p5en.48xlarge, g6.xlarge", ""], "--price-as") == ["g6.xlarge", "p5en.48xlarge"]
    with pytest.raises(UsageError) as refused:
        known_types(["g6.xlarge,h200"], "--hypothetical")
    message = str(refused.value)
    assert message.startswith("--hypothetical: 'h200' is not an instance type rigbench knows; known: g4dn.xlarge, ")
    assert all(name in message for name in INSTANCE_TYPES) and "\n" not in message
    assert refused.value.exit_code == 2


def test_rows_are_immutable():
    row = get_instance_type("g6.xlarge")
    with pytest.raises(ValueError):
        row.vcpu = 99
