"""Load over several servers: plain Locust with --replica-urls against two ground-truth servers, closed and open
loop; every user keeps its replica, the users split evenly, and every record names the one it went to."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from analysis.figures import TOKENS_COUNTER, counter_rate, counter_tok_s
from core.rundir import RunDir
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def hand_run(tmp_path: Path, hosts: list[str], *load: str) -> RunDir:
    runs = tmp_path / "runs"
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--headless", "--host", hosts[0],
         "--replica-urls", ",".join(hosts), *load, "--warmup", "0.3", "--measure", "1.5", "--max-tokens", "8",
         "--ignore-eos", "--runs-dir", str(runs), "--only-summary"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = [p for p in runs.iterdir() if p.is_dir()]
    return RunDir(path)


def test_users_and_arrivals_spread_evenly_over_the_replicas_and_records_name_theirs(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=10, itl_ms=2, tokens=8, model="default", slots=8)
    with GroundTruthServer(config, tmp_path / "a.jsonl") as first, \
            GroundTruthServer(config, tmp_path / "b.jsonl") as second:
        hosts = [first.base_url, second.base_url]
        closed = hand_run(tmp_path / "closed", hosts, "--steps", "1,4")
        opened = hand_run(tmp_path / "open", hosts, "--rates", "20")
        served = [len(Path(tmp_path / name).read_text().splitlines()) for name in ("a.jsonl", "b.jsonl")]
    records = [r for r in closed.read_records() if not r.interrupted]
    assert {r.replica for r in records if r.users == 1} == {0}, "one user: the first replica"
    users_per_replica = defaultdict(set)
    for record in records:
        users_per_replica[record.replica].add(record.request_id.rsplit("-", 1)[0])
    at_four = Counter(r.replica for r in records if r.users == 4 and r.phase == "measure")
    assert set(at_four) == {0, 1} and abs(at_four[0] - at_four[1]) <= 0.25 * sum(at_four.values()), at_four
    arrivals = [r for r in opened.read_records() if not r.interrupted]
    counts = Counter(r.replica for r in arrivals)
    assert abs(counts[0] - counts[1]) <= 1, "arrival n to replica n mod 2"
    assert all(count > 0 for count in served), "both servers were sent requests"
    # telemetry from every replica: each boundary read from both, and the rig's counter rate is their sum
    telemetry = closed.read_telemetry()
    read = defaultdict(set)
    for snapshot in telemetry:
        read[snapshot.step, snapshot.boundary].add(snapshot.replica)
    assert read and all(replicas == {0, 1} for replicas in read.values()), read
    per_replica = []
    for replica in (0, 1):
        (start,) = [s for s in telemetry if (s.step, s.boundary, s.replica) == (1, "measure", replica)]
        (end,) = [s for s in telemetry if (s.step, s.boundary, s.replica) == (1, "end", replica)]
        tokens = end.metrics[TOKENS_COUNTER] - start.metrics[TOKENS_COUNTER]
        per_replica.append(tokens / (end.taken_at - start.taken_at))
    assert all(rate > 0 for rate in per_replica), per_replica
    assert counter_tok_s(telemetry, 1) == pytest.approx(sum(per_replica))
    assert counter_rate(telemetry, 1, TOKENS_COUNTER, per_server=True) == pytest.approx(sum(per_replica) / 2)


def test_a_replica_that_is_no_server_root_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py", "--headless", "--host",
         "http://127.0.0.1:9", "--replica-urls", "127.0.0.1:8080,http://127.0.0.1:8081", "--steps", "1",
         "--runs-dir", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and "--replica-urls: '127.0.0.1:8080' is not a server root" in done.stderr
