"""The session both Locust users send through: per request, one record in the shard, one tally, one event.

Run in a child process: importing Locust monkey-patches with gevent. The child drives each user
by hand on an environment of its own (its own events, so each user's events are counted apart),
the way Locust's runner would: ``on_start``, requests, ``on_stop``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from core.network import free_port
from core.rundir import LoadSettings, RunDir, new_manifest, server_at
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer, read_truth_log
from loadtest.locust_options import LOCUST_REQUEST_NAME

ROOT = Path(__file__).resolve().parents[2]
REQUESTS = 3
DRIVE_USERS = """
import json, sys, time
from locust import argument_parser
from locust.env import Environment
from locust.event import Events
import loadtest.locustfile  # the project's options on Locust's parser
from loadtest.load_process import load_process
from loadtest.open_loop import OpenLoopDispatcher
from loadtest.users import StreamingChatUser

url, dead, closed_run, open_run, dead_run, requests = sys.argv[1:7]
requests = int(requests)

def environment(host, run_dir, *args):
    options = argument_parser.get_parser().parse_args(
        ["--host", host, "--run-dir", run_dir, "--max-tokens", "4", "--warmup", "0", "--measure", "60", *args])
    options.rigbench_t0 = time.time()
    env = Environment(events=Events(), host=host, parsed_options=options)
    fired = []
    env.events.request.add_listener(lambda **event: fired.append(
        {"name": event["name"], "tokens": event["response_length"],
         "exception": None if event["exception"] is None else str(event["exception"])}))
    return env, fired

def tallied(env):
    return sum(tally.requests for tally in load_process(env).live.steps.values())

report = {}
for name, host, run_dir in (("closed", url, closed_run), ("dead", dead, dead_run)):
    env, fired = environment(host, run_dir, "--steps", "2")
    user = type("Closed", (StreamingChatUser,), {"host": host})(env)
    user.on_start()
    for _ in range(requests if name == "closed" else 1):
        user.chat()
    user.on_stop()
    report[name] = {"events": fired, "tallied": tallied(env)}

env, fired = environment(url, open_run, "--rates", "2")
dispatcher = type("Open", (OpenLoopDispatcher,), {"host": url})(env)
dispatcher.on_start()
intended = [time.time() + 0.05 * (number + 1) for number in range(requests)]
for number, when in enumerate(intended):
    dispatcher.pool.spawn(dispatcher._send, number, when)
dispatcher.pool.join(timeout=30)
dispatcher.on_stop()
report["open"] = {"events": fired, "tallied": tallied(env), "intended": intended}
print(json.dumps(report))
"""


def new_run(root: Path, name: str, url: str) -> RunDir:
    load = LoadSettings(user_steps=[2], warmup_seconds=0, measure_seconds=60, max_tokens=4)
    return RunDir.create(root / name, new_manifest(name, name, load=load, server=server_at(url, slots=2)))


def test_each_request_of_either_user_writes_one_record_tallies_it_and_fires_one_event(tmp_path: Path) -> None:
    config = GroundTruthConfig(ttft_ms=5, itl_ms=2, tokens=4, model="default", slots=4)
    dead = f"http://127.0.0.1:{free_port()}"
    with GroundTruthServer(config, tmp_path / "truth.jsonl") as server:
        runs = {name: new_run(tmp_path, name, server.base_url) for name in ("closed", "open", "dead")}
        done = subprocess.run(
            [sys.executable, "-c", DRIVE_USERS, server.base_url, dead,
             *(str(runs[name].path) for name in ("closed", "open", "dead")), str(REQUESTS)],
            capture_output=True, text=True, cwd=ROOT, timeout=120,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert len(read_truth_log(tmp_path / "truth.jsonl")) == 2 * REQUESTS, "the server saw each request once"

    for name in ("closed", "open"):
        records = runs[name].read_records()
        events = report[name]["events"]
        assert len(records) == len(events) == report[name]["tallied"] == REQUESTS, name
        assert all(record.ok and record.phase == "measure" for record in records), name
        assert [event["tokens"] for event in events] == [record.completion_tokens for record in records] == [4] * 3
        assert all(event["name"] == LOCUST_REQUEST_NAME and event["exception"] is None for event in events), name
    assert all(record.t_intended is None for record in runs["closed"].read_records())
    assert sorted(r.t_intended for r in runs["open"].read_records()) == report["open"]["intended"]

    (refused,) = runs["dead"].read_records()
    (event,) = report["dead"]["events"]
    assert refused.error_kind == "connect" and event["exception"].startswith("connect: ")
    assert report["dead"]["tallied"] == 1, "a failed measured request is tallied too (as an error)"
