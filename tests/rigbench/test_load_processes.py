"""``--processes auto``: from the measured per-process capacity, a probe of the server and the cores left."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.process_capacity import processes_for, save_capacity
from rigbench.cli import app
from rigbench.load_processes import auto_processes, parse_processes, server_cores_here


def test_the_count_covers_the_demand_within_the_cores_free() -> None:
    assert processes_for(5000, 6000, cores_free=8)[0] == 1
    count, line = processes_for(25_000, 6000, cores_free=8)
    assert count == 5 and "6000 tok/s per process" in line
    count, line = processes_for(25_000, 6000, cores_free=2)
    assert count == 2 and "5 would be needed" in line
    with pytest.raises(UsageError, match="run `rigbench selftest` once"):
        processes_for(100, None, cores_free=2)


def test_processes_is_a_count_or_auto() -> None:
    assert parse_processes("3") == 3 and parse_processes("auto") is None and parse_processes(" AUTO ") is None
    for bad, said in (("two", "neither a whole number nor auto"), ("0", "below 1")):
        with pytest.raises(UsageError, match=f"--processes: .*{said}"):
            parse_processes(bad)


def test_a_local_server_takes_its_cores() -> None:
    assert server_cores_here("http://127.0.0.1:8080", 6) == 6
    assert server_cores_here("http://127.0.0.1:8080", None) == 1
    assert server_cores_here("http://10.0.0.7:8080", None) == 0


@pytest.mark.timing
@pytest.mark.integration
def test_auto_probes_one_users_rate_against_the_saved_capacity(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))
    config = GroundTruthConfig(ttft_ms=5, itl_ms=5, model="default")  # 200 tok/s per user
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        with pytest.raises(UsageError, match="per-process capacity"):
            auto_processes(server.base_url, "default", user_steps=[64], rate_steps=[], max_tokens=32)
        save_capacity(4000.0, 1)
        count, line = auto_processes(server.base_url, "default", user_steps=[8, 64], rate_steps=[], max_tokens=32,
                                     server_threads=0)
    # 64 users x ~200 tok/s = ~12,800 tok/s at 4,000 per process: 4 processes, if the cores are there
    demand = float(re.search(r"demand up to (\d+) tok/s", line).group(1))
    assert 10_000 < demand < 13_000 and count == min(4, os.cpu_count())


@pytest.mark.integration
def test_sweep_refuses_auto_without_a_capacity_and_a_bad_count_before_any_run(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))
    runs = tmp_path / "runs"
    with GroundTruthServer(GroundTruthConfig(model="default"), tmp_path / "truth.jsonl") as server:
        for value, said in (("auto", "per-process capacity"), ("two", "neither a whole number nor auto")):
            result = CliRunner().invoke(app, ["sweep", "--url", server.base_url, "--steps", "1", "--processes", value,
                                              "--runs-dir", str(runs)])
            assert result.exception.exit_code == 2 and said in str(result.exception), result.output
    assert not runs.exists()
