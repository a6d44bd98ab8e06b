"""The pre-flight check: the URL's form, then the server's /health and one streamed reply, each failure one line."""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import ClassVar

import pytest

from core.errors import LoadTestError, UsageError
from loadtest.ground_truth import GroundTruthConfig, GroundTruthServer
from loadtest.model_list import listed_model, read_model_list
from loadtest.preflight import check_health, check_reply, check_url, preflight


@pytest.mark.parametrize(
    "text, root",
    [("http://127.0.0.1:8080", "http://127.0.0.1:8080"), ("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
     (" https://rig.example:443 ", "https://rig.example:443"), ("http://[::1]:8080", "http://[::1]:8080")],
)
def test_a_server_root_is_accepted(text: str, root: str) -> None:
    assert check_url(text) == root


@pytest.mark.parametrize(
    "text, message",
    [
        ("127.0.0.1:8080", "--url: '127.0.0.1:8080' has no scheme; expected http://HOST:PORT, e.g. http://127.0.0.1:8080"),
        ("not a url", "--url: 'not a url' has no scheme; expected http://HOST:PORT, e.g. http://127.0.0.1:8080"),
        ("http://127.0.0.1:8080/v1", "--url: 'http://127.0.0.1:8080/v1' has an API path (/v1); give the server's "
                                     "root, http://127.0.0.1:8080, and rigbench adds the paths"),
        ("http://h:8080/v1/chat/completions", "--url: 'http://h:8080/v1/chat/completions' has an API path "
                                              "(/v1/chat/completions); give the server's root, http://h:8080, and "
                                              "rigbench adds the paths"),
        ("http://h:8080?x=1", "--url: 'http://h:8080?x=1' has an API path (?x=1); give the server's root, "
                              "http://h:8080, and rigbench adds the paths"),
        ("ftp://h", "--url: 'ftp://h' is not an http:// or https:// URL; expected http://HOST:PORT"),
        ("http://h:99999", "--url: 'http://h:99999' has a port that is not a number from 0 to 65535"),
        ("http://:8080", "--url: 'http://:8080' names no host rigbench can reach; expected http://HOST:PORT, e.g. "
                         "http://127.0.0.1:8080"),
    ],
)
def test_anything_else_is_refused_with_the_url_meant(text: str, message: str) -> None:
    with pytest.raises(UsageError) as refused:
        check_url(text)
    assert str(refused.value) == message


class Behaviour(http.server.BaseHTTPRequestHandler):
    """A server that answers /health, /v1/models and the chat path one wrong way (its ``mode``)."""

    mode = "ok"
    asked: ClassVar[Counter[tuple[str, str]]] = Counter()  # GETs by (mode, path), across every mode's server

    def log_message(self, *args: object) -> None:
        pass

    def answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        self.asked[self.mode, self.path] += 1
        if self.mode == "loading" and self.path == "/health":
            self.answer(503, "application/json", b'{"error": {"message": "Loading model"}}')
        elif self.mode == "no-health" and self.path == "/v1/models":
            self.answer(200, "application/json", b'{"data": [{"id": "m"}]}')
        elif self.mode in ("no-health", "not-an-api"):
            self.answer(404, "text/plain", b"not found")
        elif self.mode == "teapot" and self.path == "/health":
            self.answer(418, "text/plain", b"I'm a teapot")
        else:
            self.answer(200, "application/json", b'{"status": "ok"}')

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "json-not-stream":
            self.answer(200, "application/json", json.dumps({"choices": [{"message": {"content": "OK"}}]}).encode())
        elif self.mode == "stall":
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            self.wfile.flush()
            time.sleep(3)  # longer than the test's read timeout: not one event
        elif self.mode == "no-chat":
            self.answer(404, "text/plain", b"File Not Found")
        elif self.mode == "bad-model":
            self.answer(404, "application/json", b'{"error": {"message": "model not found: default"}}')
        elif self.mode == "error-event":
            self.answer(200, "text/event-stream", b'data: {"error": {"code": 500, "message": "boom"}}\n\n')
        else:
            chunk = {"choices": [{"delta": {"content": "OK"}, "finish_reason": "stop"}]}
            self.answer(200, "text/event-stream", f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    modes = ["ok", "loading", "no-health", "not-an-api", "teapot", "json-not-stream", "stall", "no-chat", "bad-model",
             "error-event"]
    running = {}
    for mode in modes:
        handler = type(f"Handler-{mode}", (Behaviour,), {"mode": mode})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        running[mode] = server
    yield {mode: f"http://127.0.0.1:{server.server_address[1]}" for mode, server in running.items()}
    for server in running.values():
        server.shutdown()
        server.server_close()


def dead_url() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


HEALTH = {
    "loading": "{url}/health answers 503 (Loading model): the server is still loading "
               "its model; wait until it answers 200, then run again",
    "not-an-api": "{url}: /health and /v1/models both answer 404, so this is not the root of an OpenAI-compatible "
                  "server; check the URL (no API path) and the port",
    "teapot": "{url}/health answers HTTP 418: I'm a teapot",
}
REPLY = {
    "json-not-stream": "{url}/v1/chat/completions: a two-token streamed reply failed: malformed_sse (the 200 answer "
                       "is 'application/json', not text/event-stream); the server does not stream OpenAI-style JSON "
                       "events: is it an OpenAI-compatible server?",
    "stall": "{url}/v1/chat/completions: a two-token streamed reply failed: timeout (stream stalled: no byte arrived "
             "within 1 s); the server accepted the request but sent nothing in time; check its log (stuck, or still "
             "loading?)",
    "no-chat": "{url}/v1/chat/completions answers HTTP 404 (File Not Found): the server has no OpenAI chat endpoint "
               "at this root; check the URL and the server",
    "bad-model": "{url}/v1/chat/completions refused the model name 'default' (model not "
                 "found: default): the server does not know the model name: pass --model-name as it lists at "
                 "/v1/models",
    "error-event": "{url}/v1/chat/completions: a two-token streamed reply failed: server_error (error event, code "
                   "500: boom); the server gave up on a two-token reply; check its log",
}


@pytest.mark.integration
@pytest.mark.parametrize("mode", sorted(HEALTH))
def test_a_health_answer_that_is_not_ok_is_one_line(servers: dict[str, str], mode: str) -> None:
    with pytest.raises(LoadTestError) as refused:
        check_health(servers[mode])
    assert str(refused.value) == HEALTH[mode].replace("{url}", servers[mode])


@pytest.mark.integration
@pytest.mark.parametrize("mode", sorted(REPLY))
def test_a_reply_that_does_not_stream_whole_is_one_line(servers: dict[str, str], mode: str) -> None:
    with pytest.raises(LoadTestError) as refused:
        check_reply(servers[mode], timeout=1.0)
    assert str(refused.value) == REPLY[mode].replace("{url}", servers[mode])


@pytest.mark.timing
@pytest.mark.integration
def test_nothing_listening_is_said_at_once(tmp_path) -> None:
    url = dead_url()
    started = time.monotonic()
    with pytest.raises(LoadTestError) as refused:
        preflight(url)
    assert str(refused.value) == (f"{url}: nothing is listening (connection refused); start the server, or check the "
                                  "URL's host and port")
    assert time.monotonic() - started < 1.0


@pytest.mark.integration
def test_servers_that_answer_pass(servers: dict[str, str], tmp_path) -> None:
    assert check_health(servers["ok"]) == "/health"
    assert check_health(servers["no-health"]) == "/v1/models", "an OpenAI-compatible server without /health"
    check_reply(servers["ok"])
    with GroundTruthServer(GroundTruthConfig(ttft_ms=1, itl_ms=1, model="default"), tmp_path / "truth.jsonl") as gt:
        assert preflight(gt.base_url + "/") == gt.base_url


@pytest.mark.integration
def test_a_model_list_already_read_is_the_health_check_without_asking_again(servers: dict[str, str]) -> None:
    before = Behaviour.asked["no-health", "/v1/models"]
    models = read_model_list(servers["no-health"])
    assert check_health(servers["no-health"], models=models) == "/v1/models"
    assert listed_model(models) == "m"
    assert Behaviour.asked["no-health", "/v1/models"] - before == 1
    with pytest.raises(LoadTestError) as refused:  # a list that answered 404 is the same 404 to the check
        check_health(servers["not-an-api"], models=read_model_list(servers["not-an-api"]))
    assert str(refused.value) == HEALTH["not-an-api"].replace("{url}", servers["not-an-api"])
