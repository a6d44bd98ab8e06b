"""Locust started by hand: the truth in its own statistics, the per-step tab, the options' one spelling, a bad host."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from core.network import free_port
from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.locust_options import LOCUST_REQUEST_NAME

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
LOCUST = [sys.executable, "-m", "locust", "-f", "loadtest/locustfile.py"]


def locust(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*LOCUST, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def only_run(runs: Path) -> RunDir:
    found = [path for path in runs.iterdir() if path.is_dir()]
    assert len(found) == 1, found
    return RunDir(found[0])


@pytest.mark.timing
def test_a_headless_hand_run_counts_each_request_once(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    config = GroundTruthConfig(ttft_ms=20, itl_ms=5, tokens=16, model="default", slots=4)
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        done = locust("--headless", "--host", server.base_url, "--steps", "2,4", "--warmup", "0.5", "--measure",
                      "2.5", "--max-tokens", "16", "--ignore-eos", "--runs-dir", str(runs), "--csv",
                      str(tmp_path / "locust"), "--only-summary")
    assert done.returncode == 0, done.stderr[-2000:]
    run = only_run(runs)
    manifest = run.read_manifest()
    assert manifest.status == "complete" and manifest.server.parallel_slots == 4, "a hand run asks /slots"
    with open(tmp_path / "locust_stats.csv") as handle:
        rows = {row["Name"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {LOCUST_REQUEST_NAME, "Aggregated"}, "one Locust entry per request: no separate TTFT entry"
    # a request the harness stopped fires no event; one that ends as Locust writes its statistics may miss them
    records = [r for r in run.read_records() if not r.interrupted]
    counted = int(rows["Aggregated"]["Request Count"])
    assert len(records) - 4 <= counted <= len(records), "at most one request of each of the 4 users uncounted"
    # Locust's requests/s is its count over its own span: from the first users' spawn to the last request it
    # counted. That span is the records' span, less at most one request at the end (one that ended as Locust
    # wrote its statistics); a doubled count would halve it
    locust_span = counted / float(rows["Aggregated"]["Requests/s"])
    span = max(r.t_end for r in records) - min(r.t_start for r in records)
    longest = max(r.t_end - r.t_start for r in records)
    assert span - longest - 0.25 <= locust_span <= span + 0.25, "Locust starts its clock as users spawn"
    with open(tmp_path / "locust_rigbench_steps.csv") as handle:
        steps = list(csv.DictReader(handle))
    assert [int(row["step"]) for row in steps] == [0, 1] and [int(row["users"]) for row in steps] == [2, 4]
    measured = [r for r in records if r.phase == "measure"]
    assert sum(int(row["requests"]) for row in steps) == len(measured)
    assert all(float(row["output_tok_s"]) > 0 and float(row["ttft_p50_s"]) >= 0.020 for row in steps)


def test_the_options_have_one_spelling_and_a_spelling_from_before_is_refused(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    with GroundTruthServer(GroundTruthConfig(ttft_ms=5, itl_ms=2, model="m"), tmp_path / "truth.jsonl") as server:
        done = locust("--headless", "--host", server.base_url, "--steps", "1", "--warmup", "0.3", "--measure", "1.5",
                      "--model-name", "m", "--max-tokens", "4", "--runs-dir", str(runs), "--only-summary")
        assert done.returncode == 0, done.stderr[-2000:]
        manifest = only_run(runs).read_manifest()
        assert manifest.status == "complete" and manifest.load.user_steps == [1]
        for old in ("--rigbench-steps", "--rigbench-measure"):
            refused = locust("--headless", "--host", server.base_url, old, "1", "--runs-dir", str(runs), timeout=60)
            assert refused.returncode == 2 and f"unrecognized arguments: {old}" in refused.stderr, refused.stderr
    assert len(list(runs.iterdir())) == 1, "a refused spelling made no run"


@pytest.mark.parametrize(
    "host, line",
    [
        ("127.0.0.1:8080", "rigbench: error: --host: '127.0.0.1:8080' has no scheme; expected http://HOST:PORT, e.g. "
                           "http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1", "rigbench: error: --host: 'http://127.0.0.1:8080/v1' has an API path (/v1); "
                                     "give the server's root, http://127.0.0.1:8080, and rigbench adds the paths"),
    ],
)
def test_a_bad_host_stops_a_hand_run_before_any_load(tmp_path: Path, host: str, line: str) -> None:
    done = locust("--headless", "--host", host, "--steps", "1", "--runs-dir", str(tmp_path / "runs"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == line
    assert not (tmp_path / "runs").exists(), "nothing was created"


def test_a_dead_host_stops_a_hand_run_in_one_line(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}"
    done = locust("--headless", "--host", url, "--steps", "1", "--runs-dir", str(tmp_path / "runs"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"rigbench: error: {url}: nothing is listening (connection refused); start the server, or check the URL's "
        "host and port")


def test_the_web_ui_shows_tok_s_and_ttft_per_step(tmp_path: Path) -> None:
    port = free_port()
    with GroundTruthServer(GroundTruthConfig(ttft_ms=10, itl_ms=2, model="default"), tmp_path / "truth.jsonl") as gt:
        process = subprocess.Popen(
            [*LOCUST, "--host", gt.base_url, "--web-host", "127.0.0.1", "--web-port", str(port), "--autostart",
             "--autoquit", "3", "--steps", "2", "--warmup", "0.3", "--measure", "3", "--max-tokens", "8",
             "--runs-dir", str(tmp_path / "runs")],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ},
        )
        try:
            page = rows = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not rows:
                time.sleep(0.5)
                try:
                    page = page or httpx.get(f"http://127.0.0.1:{port}/", timeout=5).text
                    stats = httpx.get(f"http://127.0.0.1:{port}/stats/requests", timeout=5).json()
                except httpx.HTTPError:
                    continue
                rows = next((e["data"] for e in stats.get("extended_stats", []) if e["key"] == "rigbench-steps"), None)
            table = httpx.get(f"http://127.0.0.1:{port}/rigbench/steps.csv", timeout=5).text
        finally:
            _, stderr = process.communicate(timeout=90)
    assert "rigbench: tok/s and TTFT per step" in page and "rigbench-steps" in page
    assert rows and rows[0]["users"] == 2 and rows[0]["requests"] > 0 and rows[0]["ttft_p50_s"] >= 0.010, rows
    assert table.splitlines()[0].startswith("step,users,requests,errors,output_tokens,output_tok_s")
    assert process.returncode == 0, stderr[-2000:]
    assert json.loads(only_run(tmp_path / "runs").manifest_path.read_text())["status"] == "complete"


@pytest.mark.parametrize(
    "args, line",
    [
        ((), "rigbench: error: --host: no server given; pass its root, e.g. --host http://127.0.0.1:8080"),
        (("--host", "http://127.0.0.1:9", "--run-dir", "{tmp}/not-a-run"),
         "rigbench: error: --run-dir {tmp}/not-a-run: no manifest.json there; leave --run-dir out and a new run "
         "directory is made under --runs-dir"),
    ],
    ids=["headless-without-host", "run-dir-without-manifest"],
)
def test_a_hand_run_without_a_server_or_with_a_made_up_run_dir_is_refused(
    tmp_path: Path, args: tuple[str, ...], line: str
) -> None:
    args = tuple(arg.replace("{tmp}", str(tmp_path)) for arg in args)
    done = locust("--headless", *args, "--steps", "1", "--runs-dir", str(tmp_path / "runs"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == line.replace("{tmp}", str(tmp_path))
    assert not (tmp_path / "runs").exists() and not (tmp_path / "not-a-run").exists()


def test_an_option_refuses_a_value_of_the_wrong_type(tmp_path: Path) -> None:
    done = locust("--headless", "--host", "http://127.0.0.1:9", "--warmup", "ten", timeout=60)
    assert done.returncode == 2
    assert "argument --warmup: invalid float value: 'ten'" in done.stderr


def test_the_server_is_checked_for_an_existing_run_dir_too(tmp_path: Path) -> None:
    """rigbench sweep passes --no-preflight (it has checked); anyone else naming --run-dir gets the check."""
    url = f"http://127.0.0.1:{free_port()}"
    load = LoadSettings(user_steps=[1], warmup_seconds=0, measure_seconds=1, max_tokens=4)
    run = RunDir.create(tmp_path / "runs", new_manifest("t", "t", load=load, server=server_at(url, slots=1)))
    done = locust("--headless", "--host", url, "--run-dir", str(run.path), "--steps", "1", timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("nothing is listening (connection refused); start the "
                                                         "server, or check the URL's host and port")
    assert run.read_manifest().status == "running" and not run.shard_paths(), "no load was sent"


def start_web_ui(tmp_path: Path, port: int, *host: str) -> subprocess.Popen:
    return subprocess.Popen(
        [*LOCUST, *host, "--web-host", "127.0.0.1", "--web-port", str(port), "--steps", "2", "--warmup", "0.3",
         "--measure", "2", "--max-tokens", "8", "--runs-dir", str(tmp_path / "runs")],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def press_start(port: int, host: str) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            answer = httpx.post(f"http://127.0.0.1:{port}/swarm", data={"host": host}, timeout=10)
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert answer.status_code == 200 and answer.json()["success"], answer.text


def test_a_host_typed_in_the_web_ui_is_checked_when_start_is_pressed(tmp_path: Path) -> None:
    port, dead = free_port(), f"http://127.0.0.1:{free_port()}"
    process = start_web_ui(tmp_path, port)
    try:
        press_start(port, dead)
        state, deadline = "", time.monotonic() + 60
        while state != "stopped" and time.monotonic() < deadline:
            time.sleep(0.3)
            state = httpx.get(f"http://127.0.0.1:{port}/stats/requests", timeout=5).json()["state"]
    finally:
        process.terminate()
        _, stderr = process.communicate(timeout=60)
    assert state == "stopped", "Locust stops and waits for the next start, with another host"
    assert f"rigbench: {dead}: nothing is listening (connection refused)" in stderr, stderr[-2000:]
    assert "the sweep does not start" in stderr
    assert not (tmp_path / "runs").exists(), "no run was made for a host that does not answer"


def test_a_web_ui_start_against_another_host_gets_its_own_run(tmp_path: Path) -> None:
    port = free_port()
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, model="default", slots=2)
    with (GroundTruthServer(config, tmp_path / "a.jsonl") as first,
          GroundTruthServer(config, tmp_path / "b.jsonl") as second):
        process = start_web_ui(tmp_path, port, "--host", first.base_url)
        try:
            press_start(port, second.base_url)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                manifests = [RunDir(p).read_manifest() for p in (tmp_path / "runs").iterdir()]
                if any(m.status == "complete" for m in manifests):
                    break
                time.sleep(0.5)
        finally:
            process.terminate()
            process.communicate(timeout=60)
    by_port = {m.server.port: m for m in manifests}
    assert by_port[second.port].status == "complete"
    assert by_port[first.port].status == "failed"
    assert by_port[first.port].status_detail.startswith("never started: the web UI's first start named another host")
