"""The GPU bandwidth table, and the instance types that read it."""

from __future__ import annotations

import pytest

from core.gpus import KNOWN_GPUS, find_gpu
from core.instance_types import INSTANCE_TYPES, get_instance_type


@pytest.mark.parametrize(
    ("instance_type", "gb_s"),
    [("g4dn.xlarge", 320), ("g5.xlarge", 600), ("g6.xlarge", 300), ("g6.2xlarge", 300), ("g6e.2xlarge", 864),
     ("p4d.24xlarge", 1555), ("p4de.24xlarge", 2039), ("p5.48xlarge", 3350), ("p5en.48xlarge", 4800)],
)
def test_instance_types_read_their_gpu_bandwidth(instance_type, gb_s):
    assert get_instance_type(instance_type).gpu_memory_bandwidth_gb_s == gb_s


def test_every_instance_type_has_its_gpu_in_the_table():
    for row in INSTANCE_TYPES.values():
        assert find_gpu(row.gpu_name) is KNOWN_GPUS[row.gpu_name], row.name


def test_nvidia_smi_spellings_find_their_card():
    h200 = find_gpu("NVIDIA H200")
    assert h200 is not None and h200.memory_bandwidth_gb_s == 4800
    assert find_gpu("nvidia  h200 nvl") is h200
    assert find_gpu("Tesla T4") is KNOWN_GPUS["NVIDIA T4"]
    assert find_gpu("NVIDIA H100 80GB HBM3") is KNOWN_GPUS["NVIDIA H100"]
    assert find_gpu("NVIDIA A100-SXM4-40GB") is KNOWN_GPUS["NVIDIA A100 40GB"]
    assert find_gpu("NVIDIA H100 PCIe") is None  # a slower card than the SXM part AWS rents: not guessed
    assert find_gpu("NVIDIA GeForce RTX 3050") is None
    assert find_gpu(None) is None and find_gpu("") is None
