"""``rigbench sweep --replicas-file``: the replicas read from a file into the run's manifest."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import UsageError
from core.rundir import LoadSettings, new_manifest, server_at
from rigbench.replica_list import read_replicas, with_replicas

LISTED = [{"index": 0, "url": "http://127.0.0.1:9000/", "slots": 2, "gpu": 0, "cpus": [0, 1]},
          {"index": 1, "url": "http://127.0.0.1:9001", "slots": 2, "gpu": 1, "cpus": [2, 3]}]


def write(tmp_path: Path, listed: object) -> Path:
    path = tmp_path / "replicas.json"
    path.write_text(json.dumps(listed))
    return path


def test_replicas_from_a_file_fill_the_manifests_server(tmp_path: Path) -> None:
    replicas = read_replicas(write(tmp_path, LISTED), [(None, "http://127.0.0.1:9000")])
    assert [(r.url, r.gpu, r.cpus) for r in replicas] == [("http://127.0.0.1:9000", 0, [0, 1]),
                                                          ("http://127.0.0.1:9001", 1, [2, 3])]
    load = LoadSettings(user_steps=[2], warmup_seconds=1, measure_seconds=2, max_tokens=8)
    manifest = new_manifest("x", "p", load=load, server=server_at("http://127.0.0.1:9000", [], 2, "server"))
    server = with_replicas(manifest, replicas).server
    assert server.replicas == replicas and (server.parallel_slots, server.slots_from) == (4, "flags")
    assert read_replicas(None, []) == [] and with_replicas(manifest, []) == manifest


@pytest.mark.parametrize(("listed", "arms", "said"), [
    (LISTED, [(None, "http://127.0.0.1:9001")], "give one bare --url, the first replica's (http://127.0.0.1:9000)"),
    (LISTED, [("a", "http://127.0.0.1:9000")], "give one bare --url"),
    (LISTED[:1], [(None, "http://127.0.0.1:9000")], "lists 1 replica; give 2 or more"),
    ([{"index": 0, "url": "http://127.0.0.1:9000"}], [(None, "http://127.0.0.1:9000")], "0.slots: Field required"),
    ([LISTED[0], {**LISTED[1], "url": "127.0.0.1:9001"}], [(None, "http://127.0.0.1:9000")],
     "--replicas-file replica 1: '127.0.0.1:9001' has no scheme"),
])
def test_a_bad_replicas_file_is_one_line(tmp_path: Path, listed: object, arms: list, said: str) -> None:
    with pytest.raises(UsageError) as raised:
        read_replicas(write(tmp_path, listed), arms)
    assert said in str(raised.value) and "\n" not in str(raised.value)
