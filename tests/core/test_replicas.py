"""A profile's server line divided into replicas: slots, context, ports, GPUs and cores, and the refusals."""

from __future__ import annotations

import pytest

from core.errors import ProfileError
from core.replicas import plan_replicas, user_replica

LINE = ["-c", "65536", "-np", "64", "-ngl", "99", "--metrics"]


def test_four_replicas_one_per_gpu_each_with_a_quarter_of_the_slots_context_and_cores() -> None:
    plans = plan_replicas(LINE, 4, 8080, gpus=[0, 1], placement="each", cores=list(range(16)))
    assert [p.port for p in plans] == [8080, 8081, 8082, 8083]
    assert [p.gpu for p in plans] == [0, 1, 0, 1], "round-robin when replicas outnumber the GPUs"
    first = plans[0]
    assert first.slots == 16 and first.args[first.args.index("-np") + 1] == "16"
    assert first.args[first.args.index("-c") + 1] == "16384", "each slot keeps its 1,024 tokens"
    assert first.args[first.args.index("-t") + 1] == "4" and first.args[first.args.index("-tb") + 1] == "4"
    assert [p.cpus for p in plans] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15]]
    assert first.environment == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "0"}
    assert "-ngl" in first.args


def test_shared_placement_threads_the_profile_pins_and_one_replica_unchanged() -> None:
    plans = plan_replicas([*LINE, "-t", "2"], 2, 9000, gpus=[3], placement="shared", cores=list(range(8)))
    assert [p.gpu for p in plans] == [3, 3] and all(p.cpus == [] for p in plans), "-t given: no split, no pinning"
    assert plans[0].args.count("-t") == 1 and plans[0].args[plans[0].args.index("-t") + 1] == "2"
    single = plan_replicas(LINE, 1, 8080, gpus=[0], cores=list(range(8)))
    assert single[0].args == LINE and single[0].gpu is None and single[0].cpus == []
    assert [user_replica(user, 4) for user in range(6)] == [0, 1, 2, 3, 0, 1]


@pytest.mark.parametrize(("replicas", "line", "cores", "message"), [
    (0, LINE, None, r"\[server\] replicas = 0: give 1 or more"),
    (128, LINE, None, "is more replicas than the 64 slot"),
    (3, LINE, None, "does not divide the 64 slots"),
    (2, ["-np", "4", "-c", "4097"], None, "does not divide -c 4097"),
    (4, LINE, [0, 1], "more replicas than the 2 CPU core"),
    (2, ["-np", "4"], None, "has no -c, so each replica would get llama-server's whole default context"),
])
def test_a_plan_that_cannot_be_kept_is_refused_in_one_line(replicas: int, line: list[str], cores: list[int] | None,
                                                          message: str) -> None:
    with pytest.raises(ProfileError, match=message):
        plan_replicas(line, replicas, 8080, cores=cores)
