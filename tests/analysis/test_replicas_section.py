"""The replicas section judges each replica's share of a step's tokens against its share of the requests in flight
(the users it held), not against 1/N: fewer users than replicas, or a count the replicas do not divide, is uneven by
design, and a replica that serves its users slower is what the warning is for."""

from __future__ import annotations

from analysis.prices import PriceBook
from analysis.replicas_section import replica_rows
from analysis.report_model import build_section
from core.rundir.models import ReplicaInfo, ServerInfo

REPLICAS = 8


def spread_run(kit, slow: int | None = None):
    """Three steps over 8 replicas (1, 12 and 8 users), every user streaming 20-token replies at one pace, each
    request served by its user's replica, back to back; ``slow``: a replica that streams its replies at half the pace
    at 8 users (each reply takes 2 s, so its user gets half as many)."""
    replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=2) for i in range(REPLICAS)]
    server = ServerInfo(args=["-np", "16"], host="127.0.0.1", port=8080, parallel_slots=16, replicas=replicas)
    steps, records = [], []
    for index, users in enumerate((1, 12, 8)):
        start = kit.T0 + 100 * (index + 1)
        steps.append(kit.window(index, users, start=start, end=start + 10))
        for user in range(users):
            replica = user % REPLICAS
            pace = 2.0 if index == 2 and replica == slow else 1.0
            records += [kit.record(f"{index}-{user}-{n}", step=index, users=users, t_start=start + n * pace,
                                   ttft=0.1, decode=pace - 0.1, tokens=20).model_copy(update={"replica": replica})
                        for n in range(int(10 / pace))]
    return build_section(kit.make_run("spread", steps, {"p0": records}, server=server), PriceBook([]))


def test_users_fewer_than_replicas_or_not_divided_by_them_are_not_called_uneven(kit) -> None:
    rows, warnings = replica_rows(spread_run(kit))
    assert warnings == []
    assert [rows[0][f"replica {i}: share"] for i in range(REPLICAS)] == ["100%"] + ["0%"] * 7  # 1 user: one replica
    assert [rows[1][f"replica {i}: share"] for i in range(REPLICAS)] == ["17%"] * 4 + ["8%"] * 4  # 2, 2, 2, 2, 1 ...


def test_a_replica_serving_less_than_its_users_ask_is_named(kit) -> None:
    _, warnings = replica_rows(spread_run(kit, slow=5))
    assert warnings == ["8 users: replica 5 served 7% of the output tokens (it held 12% of the requests in flight): "
                        "the spread is uneven"]

