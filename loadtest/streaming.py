"""One streaming chat-completion request, measured, on the lean socket client of ``sse_client``.

Usable with or without Locust: under Locust's gevent the client streams cooperatively (in the
event loop, or on sockets Locust has patched), elsewhere it is a plain blocking call.

What is recorded is raw: unix timestamps taken as each SSE event is parsed, the count of
events that carried content, and the server's own ``usage`` and ``timings``. Tokens are
never counted on the client (a content chunk may hold several tokens, e.g. with a
drafter); only the server's counts say how many tokens there were. The request asks for
them on every chunk (llama-server's ``timings_per_token``, vLLM's ``continuous_usage_stats``),
so a request cut mid-stream still knows how many tokens it got (``streamed_tokens``); a cut
request from a server that sends no such counts keeps its text (``partial_text``) for the
server's ``/tokenize`` after the run. Only a finished request takes ``completion_tokens``.

Error kinds (``RequestRecord.error_kind``):

    http_<code>     the server answered with a non-200 status
    bad_model       the server refused the model name (404/400 naming the model)
    connect         no connection could be made
    timeout         the stream stalled longer than the read timeout
    disconnect      the connection closed before the stream finished
    server_error    the server sent an error event mid-stream (``data: {"error": {...}}``, e.g.
                    llama-server's "Context size has been exceeded."); the message says code and text
    malformed_sse   an event that is not the JSON chunk the protocol promises (unparseable)
    client_error    anything else raised in the request path: a bug in this client, never the
                    server's fault; a sweep that sees one fails at once

A request is ``interrupted`` only when the harness stops it (the sweep's end, a spot notice,
Ctrl-C): that arrives as a ``BaseException`` that is not an ``Exception`` (gevent's
``GreenletExit``, ``KeyboardInterrupt``), and the partial record goes to ``on_abort``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import certifi
import orjson
from pydantic import ValidationError

from core.rundir import RequestRecord, RunDir, ServerTimings
from loadtest.backoff import retry_after_seconds
from loadtest.sse_client import (
    ConnectFailed,
    ConnectionLost,
    NotEventStream,
    ReadTimedOut,
    ResponseParser,
    SSEClient,
    WriteTimedOut,
)

CHAT_PATH = "/v1/chat/completions"
REQUEST_ID_HEADER = "X-Request-Id"
TIMELINES = RunDir.TIMELINES  # run-dir folder of per-chunk arrival times, one file per shard


@dataclass
class RequestMeta:
    """Who sent the request and when in the sweep: copied into the record verbatim, but for ``window``."""

    shard: str
    step: int
    users: int
    phase: str
    category: str
    context_tokens: int = 0
    repeat: int | None = None  # the run's repeat of its arm, None in a run made alone
    # the unix times of its step's measured window, found with the step so the request's share of the
    # window is measured without locating the step again; None before the sweep's start
    window: tuple[float, float] | None = None


@dataclass
class StreamResult:
    record: RequestRecord
    chunk_times: list[float] = field(default_factory=list)
    retry_after_s: float | None = None  # a refusal's Retry-After, in seconds (loadtest.backoff)
    chunk_counts: list[int | None] = field(default_factory=list)  # the server's running count at each chunk
    reply_text: str | None = None  # the reply's content, where the caller asked to keep it (a conversation's history)


def build_payload(
    messages: list[dict[str, str]],
    *,
    model: str,
    max_tokens: int,
    temperature: float,
    cache_prompt: bool,
    ignore_eos: bool,
) -> dict[str, Any]:
    """The OpenAI-style body; ``cache_prompt`` and ``ignore_eos`` are llama-server extensions."""
    payload: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "stream": True,
        # per-chunk cumulative token counts: vLLM's usage on every chunk, llama-server's timings on every chunk
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        "timings_per_token": True,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "cache_prompt": cache_prompt,
    }
    if ignore_eos:
        payload["ignore_eos"] = True
    return payload


def make_client(base_url: str, *, read_timeout: float = 60.0, connect_timeout: float = 10.0) -> SSEClient:
    """One client (and so one keep-alive connection) per simulated user, as a user sends one
    request at a time; the read timeout bounds each wait for bytes, not the whole stream."""
    return SSEClient(
        base_url, read_timeout=read_timeout, connect_timeout=connect_timeout, ssl_context=_shared_ssl_context()
    )


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle (~25 ms of CPU), which
    at a step of 64 new users would stall every stream in the process for over a second."""
    return ssl.create_default_context(cafile=certifi.where())


def _error_kind_for_status(status: int, body: str) -> str:
    lowered = body.lower()
    if status in (400, 404) and "model" in lowered and ("not found" in lowered or "model_not_found" in lowered):
        return "bad_model"
    return f"http_{status}"


class _Malformed(Exception):
    pass


class _ServerErrorEvent(Exception):
    """An ``{"error": ...}`` event in a 200 stream: the server gave up, it did not garble."""


def describe_error_event(error: object) -> str:
    """One line from an error event's payload: ``code 500 (server_error): Context size ...``."""
    if not isinstance(error, dict):
        return f"error event: {str(error)[:200]}"
    parts = [f"code {error['code']}" if "code" in error else "no code"]
    if error.get("type"):
        parts[0] += f" ({error['type']})"
    message = error.get("message")
    return f"error event, {parts[0]}: {message}" if message else f"error event, {parts[0]}: {json.dumps(error)[:200]}"



class _Stream:
    """What one request's stream has told so far; ``event`` runs once per SSE event, so it
    decodes each event once (orjson) and looks only at the keys the record needs."""

    __slots__ = ("status", "error", "usage", "timings", "done", "finished", "count", "first_count",
                 "chunk_times", "chunk_counts", "text", "retry_after_s", "reply")

    def __init__(self, keep_reply: bool = False) -> None:
        self.status: int | None = None
        self.error: tuple[str, str | None] | None = None
        self.usage: Any = None
        self.timings: Any = None
        self.done = False
        self.finished = False
        self.count: int | None = None  # the last cumulative token count the server sent
        self.first_count: int | None = None  # the count sent with the first content chunk
        self.chunk_times: list[float] = []
        self.chunk_counts: list[int | None] = []
        self.text: list[str] | None = []  # streamed text, dropped once the server sends counts
        self.retry_after_s: float | None = None
        self.reply: list[str] | None = [] if keep_reply else None  # content only, kept whole (not reasoning)

    @property
    def completed(self) -> bool:
        return self.done or self.finished

    def event(self, data: bytes, arrived: float) -> None:
        if data[:1] != b"{":
            if data.strip() == b"[DONE]":
                # keep reading to the end of the body: an unfinished response cannot hand its
                # connection back, and a new connection per request would be charged to TTFT
                self.done = True
                return
            if not data:
                return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise _Malformed(f"event data is not JSON: {_shown(data)!r}") from None
        if type(chunk) is not dict:
            raise _Malformed(f"event data is not a JSON object: {_shown(data)!r}")
        if "error" in chunk:
            raise _ServerErrorEvent(describe_error_event(chunk["error"])[:300])
        content = False
        choices = chunk.get("choices")
        if choices:
            if type(choices) is not list:
                raise _Malformed(f"event 'choices' is not a list of objects: {_shown(data)!r}")
            for choice in choices:
                if type(choice) is not dict:
                    raise _Malformed(f"event 'choices' is not a list of objects: {_shown(data)!r}")
                delta = choice.get("delta")
                if delta:
                    if type(delta) is not dict:
                        raise _Malformed(f"event 'delta' is not an object: {_shown(data)!r}")
                    reasoning = delta.get("reasoning_content")
                    text = delta.get("content")
                    if text or reasoning:
                        content = True
                        if self.text is not None:
                            if reasoning:
                                self.text.append(str(reasoning))
                            if text:
                                self.text.append(str(text))
                        if text and self.reply is not None:
                            self.reply.append(str(text))
                if choice.get("finish_reason"):
                    self.finished = True
        count = None
        usage = chunk.get("usage")
        if usage:
            self.usage = usage
            if type(usage) is dict:
                count = usage.get("completion_tokens")
        timings = chunk.get("timings")
        if timings:
            self.timings = timings
            if count is None and type(timings) is dict:
                count = timings.get("predicted_n")
        if count is not None:
            if type(count) is int:
                self.count = count
                self.text = None
            else:
                count = None
        if content:
            if not self.chunk_times:
                self.first_count = count
            self.chunk_times.append(arrived)
            self.chunk_counts.append(count)


def _shown(data: bytes) -> str:
    return data[:240].decode("utf-8", "replace")[:80]


def stream_chat(
    client: SSEClient,
    payload: dict[str, Any],
    meta: RequestMeta,
    *,
    path: str = CHAT_PATH,
    on_abort: Callable[[StreamResult], None] | None = None,
    not_before: float | None = None,
    keep_reply: bool = False,
) -> StreamResult:
    """Send one request and follow its stream to the end; never raises for server faults
    (they become the record's ``error_kind``), so a sweep goes on past bad responses.

    If the caller is torn down mid-stream (Locust killing a user greenlet, Ctrl-C), the
    partial request goes to ``on_abort`` marked ``interrupted`` before the exception
    continues, so what was already measured is not lost. ``not_before`` (unix time): the
    request is built first and sent at that time, to within tens of µs (an open loop's
    scheduled start). ``keep_reply``: the reply's content comes back whole (``reply_text``), for a
    conversation that sends it back as history."""
    request_id = uuid.uuid4().hex
    stream = _Stream(keep_reply)
    error_kind: str | None = None
    error_message: str | None = None
    t_start = time.time()
    try:
        t_start = _follow(client, path, payload, request_id, stream, not_before)
        if stream.status != 200:
            error_kind, error_message = stream.error or ("client_error", "no status")
        elif not stream.completed:
            error_kind, error_message = "disconnect", "stream ended before finish_reason or [DONE]"
    except ConnectFailed as error:
        error_kind, error_message = "connect", str(error) or type(error).__name__
    except (ReadTimedOut, WriteTimedOut) as error:
        error_kind, error_message = "timeout", f"stream stalled: {error}"
    except ConnectionLost as error:
        error_kind, error_message = "disconnect", str(error)[:300] or type(error).__name__
    except _ServerErrorEvent as error:
        error_kind, error_message = "server_error", str(error)
    except (_Malformed, NotEventStream) as error:
        error_kind, error_message = "malformed_sse", str(error)[:300]
    except Exception as error:  # noqa: BLE001 - recorded as the client's own failure, never as a stop
        error_kind, error_message = "client_error", f"{type(error).__name__}: {error}"[:300]
    except BaseException:
        if on_abort is not None:
            record = _kept_record(request_id, meta, t_start, time.time(), stream, None, None, interrupted=True)
            on_abort(StreamResult(record=record, chunk_times=stream.chunk_times, chunk_counts=stream.chunk_counts))
        raise
    record = _kept_record(request_id, meta, t_start, time.time(), stream, error_kind, error_message)
    return StreamResult(record=record, chunk_times=stream.chunk_times, retry_after_s=stream.retry_after_s,
                        chunk_counts=stream.chunk_counts,
                        reply_text="".join(stream.reply) if stream.reply is not None else None)


def _follow(client: SSEClient, path: str, payload: dict[str, Any], request_id: str, stream: _Stream,
            not_before: float | None) -> float:
    """One request; returns the time the request was handed to the socket."""
    headers = {REQUEST_ID_HEADER: request_id, "Accept": "text/event-stream", "Content-Type": "application/json"}
    request = client.request_bytes("POST", path, orjson.dumps(payload), headers)
    if not_before is not None:
        wait_until(not_before)
    for attempt in (1, 2):
        t_start = time.time()
        parser = ResponseParser(stream.event)
        try:
            client.send(request)
            client.read_response(parser)
            break
        except ConnectionLost as error:
            # A keep-alive connection the server closed between requests (llama-server's
            # HTTP library closes after 100 requests or 5 s idle) fails before any response:
            # the request never reached the server, so it is sent once more, on a fresh one.
            if attempt == 2 or error.responded or not client.reused:
                raise
        finally:
            if parser.response is not None:
                stream.status = parser.response.status
    if stream.status != 200:
        body = b"".join(parser.body)[:2000].decode("utf-8", "replace")
        stream.error = (_error_kind_for_status(stream.status, body), server_words(body))
        if parser.response is not None:
            stream.retry_after_s = retry_after_seconds(parser.response.headers.get("retry-after"))
    return t_start


def server_words(body: str) -> str | None:
    """What a refusal's body says, in the server's words: an OpenAI-style ``{"error": {"message": …}}``
    body gives its message (with its code and type), any other body its text, at most 300 characters."""
    text = body.strip()
    if text[:1] == "{":
        with contextlib.suppress(ValueError):
            error = json.loads(text).get("error")
            if isinstance(error, dict) and error.get("message"):
                kind = f" ({error['type']})" if error.get("type") else ""
                return f"{error['message']}{kind}"[:300]
            if isinstance(error, str) and error:
                return error[:300]
    return text[:300] or None


SPIN_S = 0.0012  # timers wake up to a millisecond late (epoll's resolution): the last stretch yields in a loop


def wait_until(when: float) -> None:
    """Return at unix time ``when``, within tens of µs: a sleep to just before it, then yields
    (``time.sleep(0)``: gevent's, under Locust, which lets every other user run meanwhile)."""
    while (left := when - time.time()) > SPIN_S:
        time.sleep(left - SPIN_S)
    while time.time() < when:
        time.sleep(0)


def _kept_record(request_id: str, meta: RequestMeta, t_start: float, t_end: float, stream: _Stream,
                 error_kind: str | None, error_message: str | None, *, interrupted: bool = False) -> RequestRecord:
    """The record; when the server's usage or timings are not what the protocol says, the request is
    still kept, as ``malformed_sse`` without them."""
    try:
        return _make_record(request_id, meta, t_start, t_end, stream, error_kind, error_message, interrupted)
    except (ValidationError, AttributeError, TypeError) as error:
        detail = f"usage or timings not as OpenAI/llama-server send them: {str(error).splitlines()[0]}"[:300]
        stream.usage = stream.timings = stream.count = stream.first_count = None
        stream.chunk_counts = []
        return _make_record(request_id, meta, t_start, t_end, stream, "malformed_sse", detail, interrupted)


def _make_record(
    request_id: str,
    meta: RequestMeta,
    t_start: float,
    t_end: float,
    stream: _Stream,
    error_kind: str | None,
    error_message: str | None,
    interrupted: bool,
) -> RequestRecord:
    usage = stream.usage or {}
    timings = ServerTimings.model_validate(stream.timings) if stream.timings else None
    chunk_times = stream.chunk_times
    # a cut request (stopped, or an error mid-stream, before finish_reason or [DONE]) must not look fully counted
    finished = stream.completed
    completion_tokens = usage.get("completion_tokens") if finished else None
    if finished and (completion_tokens is not None or stream.count is not None):
        counted_by = "usage"
    elif not finished and stream.count is not None:
        counted_by = "per_chunk"
    else:
        counted_by = "chunks"
    partial_text = "".join(stream.text) if not finished and stream.text and stream.count is None else None
    return RequestRecord(
        request_id=request_id,
        shard=meta.shard,
        step=meta.step,
        users=meta.users,
        phase=meta.phase,  # type: ignore[arg-type]
        category=meta.category,
        context_tokens=meta.context_tokens,
        t_start=t_start,
        t_first_token=chunk_times[0] if chunk_times else None,
        t_last_token=chunk_times[-1] if chunk_times else None,
        t_end=t_end,
        content_chunks=len(chunk_times),
        http_status=stream.status,
        error_kind=error_kind,
        error_message=error_message,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=completion_tokens,
        streamed_tokens=stream.count,
        first_chunk_tokens=stream.first_count,
        tokens_counted_by=counted_by,
        partial_text=partial_text,
        timings=timings,
        interrupted=interrupted,
        cached_tokens=cached_tokens(usage, stream.timings),
        repeat=meta.repeat,
    )


def cached_tokens(usage: Any, timings: Any) -> int | None:
    """Prompt tokens the server reused from its cache: llama-server's ``timings.cache_n`` (on its running
    timings too, so a cut request knows it), else OpenAI's and vLLM's ``usage.prompt_tokens_details.
    cached_tokens`` (llama-server sends both, alike); None where the server says neither."""
    if isinstance(timings, dict) and timings.get("cache_n") is not None:
        return timings["cache_n"]
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    return details.get("cached_tokens") if isinstance(details, dict) else None
