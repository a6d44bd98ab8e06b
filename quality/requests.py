"""What an eval sends for one question and what it reads back, in either prompt mode.

Chat mode sends messages to ``/v1/chat/completions`` and the server's chat template makes the
prompt; completion mode sends the few-shot text itself to ``/v1/completions`` (a base model has
no template to lean on). Both ask the same decoding and come back as the same :class:`Reply`,
so one grader and one set of failure kinds read either.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from core.errors import UsageError
from core.rundir.quality import EvalSettings, Question
from quality.fewshot import completion_text

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
# What a server without the completions endpoint answers: no such path, or not that method.
NO_ENDPOINT_STATUSES = (404, 405, 501)
PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Reply:
    text: str
    finish_reason: str | None
    reasoning: str | None


def endpoint(settings: EvalSettings) -> str:
    return COMPLETIONS_PATH if settings.mode == "completion" else CHAT_PATH


def _decoding(settings: EvalSettings) -> dict:
    """The sampling every request asks, whatever the mode: each of these changes answers."""
    body: dict = {
        "temperature": settings.temperature,
        "seed": settings.seed,
        "max_tokens": settings.max_tokens,
        "cache_prompt": settings.cache_prompt,
        "stream": False,
    }
    if settings.stop:
        body["stop"] = list(settings.stop)
    return body


def request_body(question: Question, settings: EvalSettings) -> dict:
    if settings.mode == "completion":
        assert settings.prompt is not None  # EvalSettings refuses completion mode without one
        return {"prompt": completion_text(settings.prompt, question), **_decoding(settings)}
    messages = []
    if settings.system_prompt:
        messages.append({"role": "system", "content": settings.system_prompt})
    messages.append({"role": "user", "content": question.question})
    return {
        "messages": messages,
        **_decoding(settings),
        "chat_template_kwargs": {"enable_thinking": settings.thinking},
    }


def read_reply(body: dict, settings: EvalSettings) -> Reply:
    """The reply's text, why it ended, and any reasoning the server split off (chat only)."""
    choice = (body.get("choices") or [{}])[0]
    if settings.mode == "completion":
        return Reply(text=choice.get("text") or "", finish_reason=choice.get("finish_reason"), reasoning=None)
    message = choice.get("message") or {}
    return Reply(
        text=message.get("content") or "",
        finish_reason=choice.get("finish_reason"),
        reasoning=message.get("reasoning_content"),
    )


def check_completions_endpoint(url: str) -> None:
    """One one-token completion before any question: a chat-only server is refused in one line
    while nothing has been written, not found out question by question as http errors."""
    try:
        response = httpx.post(
            f"{url}{COMPLETIONS_PATH}",
            json={"prompt": "Question:", "max_tokens": 1, "temperature": 0.0, "cache_prompt": False},
            timeout=httpx.Timeout(10.0, read=PROBE_TIMEOUT_S),
        )
    except httpx.HTTPError as error:
        raise UsageError(
            f"--mode completion: {url}{COMPLETIONS_PATH} could not be asked ({type(error).__name__}: {error}); "
            "check that the server is up"
        ) from None
    if response.status_code in NO_ENDPOINT_STATUSES:
        raise UsageError(
            f"--mode completion: {url} has no {COMPLETIONS_PATH} (it answered HTTP {response.status_code}); "
            "ask it with --mode chat, or serve the model with llama-server"
        )
