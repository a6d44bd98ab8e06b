"""Completion requests and their replies, on hand-made answers: a reply cut at the stop string is
graded clean, one that never met it is graded and marked cut_off, and a server without
/v1/completions is refused in one line before anything is written."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from core.errors import UsageError
from core.rundir.quality import EvalSettings, Question
from core.rundir.quality_files import write_question_file
from quality.eval import ask
from quality.fewshot import STOP, ExemplarPool, few_shot_prompt
from quality.requests import check_completions_endpoint, request_body
from rigbench.cli import app

QUESTION = Question(id="q1", question="Ava has 3 apples and buys 2 more. How many apples does Ava have now?",
                    answer="3 + 2 = 5\n#### 5")
EXEMPLAR = Question(id="e1", question="Ben has 10 coins and gives 4 away. How many coins does Ben have now?",
                    answer="10 - 4 = 6\n#### 6")


def completion_settings(max_tokens: int = 48) -> EvalSettings:
    prompt = few_shot_prompt(ExemplarPool([EXEMPLAR], "hand"), [QUESTION], shots=1, seed=0)
    return EvalSettings(mode="completion", shots=1, stop=STOP, prompt=prompt, max_tokens=max_tokens)


def answered(text: str, finish_reason: str) -> tuple[dict, httpx.Client]:
    """A client whose server answers every completion with ``text``; the request it saw is kept."""
    seen: dict = {}

    def reply(request: httpx.Request) -> httpx.Response:
        seen.update(path=request.url.path, body=json.loads(request.content))
        return httpx.Response(200, json={
            "choices": [{"text": text, "index": 0, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 40, "completion_tokens": 9},
            "timings": {"predicted_per_second": 30.0},
        })

    return seen, httpx.Client(transport=httpx.MockTransport(reply))


def test_a_completion_request_carries_the_few_shot_prompt_and_the_stop() -> None:
    body = request_body(QUESTION, completion_settings())
    assert body["prompt"] == (f"Question: {EXEMPLAR.question}\nAnswer: 10 - 4 = 6\n#### 6\n\n"
                              f"Question: {QUESTION.question}\nAnswer:")
    assert body["stop"] == ["\n\nQuestion:"] and body["max_tokens"] == 48 and body["temperature"] == 0.0
    assert body["cache_prompt"] is False and body["seed"] == 0 and "messages" not in body
    chat = request_body(QUESTION, EvalSettings())
    assert "stop" not in chat and chat["messages"] == [{"role": "user", "content": QUESTION.question}]


def test_a_reply_cut_at_the_stop_is_graded_clean() -> None:
    seen, client = answered(" 3 + 2 = 5\n#### 5", "stop")
    with client:
        record = ask(client, "http://server", QUESTION, completion_settings(), 0)
    assert seen["path"] == "/v1/completions"
    assert record.right and record.extracted == "5" and record.failures == []
    assert record.finish_reason == "stop" and record.completion_tokens == 9 and record.decode_tokens_per_second == 30


def test_a_reply_that_never_meets_the_stop_is_graded_and_cut_off() -> None:
    rambling = " 3 + 2 = 5\n#### 5\nQuestion 2: Ava then gives 1 away, so 5 - 1 = 4 apples"
    _, client = answered(rambling, "length")
    with client:
        record = ask(client, "http://server", QUESTION, completion_settings(max_tokens=24), 0)
    assert record.http_status == 200 and record.failures == ["cut_off"]
    assert record.text == rambling and record.extracted == "5" and record.right


class ChatOnlyServer(http.server.BaseHTTPRequestHandler):
    """Healthy, streams a chat reply, and has no /v1/completions: what a chat-only server looks like."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        self.answer(200, "application/json", b'{"status": "ok"}')

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path != "/v1/chat/completions":
            self.answer(404, "text/plain", b"no such path")
            return
        events = [{"choices": [{"delta": {"content": "OK"}, "finish_reason": None}]},
                  {"choices": [{"delta": {}, "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 3, "completion_tokens": 1}}]
        body = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + "data: [DONE]\n\n"
        self.answer(200, "text/event-stream", body.encode())

    def answer(self, status: int, content_type: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def chat_only_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ChatOnlyServer)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_chat_only_server_asked_for_completions_is_refused_before_anything_is_written(
    chat_only_url: str, tmp_path: Path
) -> None:
    with pytest.raises(UsageError, match=r"^--mode completion: .* has no /v1/completions \(it answered HTTP 404\)"):
        check_completions_endpoint(chat_only_url)
    questions = tmp_path / "q.jsonl"
    write_question_file(questions, [QUESTION], "test")
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, ["quality", "eval", "--url", chat_only_url, "--questions", str(questions),
                                      "--out", str(out), "--mode", "completion", "--shots", "1"])
    assert isinstance(result.exception, UsageError) and result.exception.exit_code == 2
    assert str(result.exception) == (
        f"--mode completion: {chat_only_url} has no /v1/completions (it answered HTTP 404); ask it with --mode chat, "
        "or serve the model with llama-server"
    )
    assert not out.exists()
