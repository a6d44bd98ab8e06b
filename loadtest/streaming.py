"""One streaming chat-completion request, measured: httpx stream + httpx-sse parsing.

Usable with or without Locust: under Locust's gevent the sync ``httpx.Client`` streams
cooperatively (Locust has patched the sockets), elsewhere it is a plain blocking call.

What is recorded is raw: unix timestamps taken as each SSE event is parsed, the count of
events that carried content, and the server's own ``usage`` and ``timings``. Tokens are
never counted on the client (a content chunk may hold several tokens, e.g. with a
drafter); only ``usage``/``timings`` say how many tokens there were.

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

import functools
import json
import ssl
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import certifi
import httpx
from httpx_sse import EventSource, SSEError
from pydantic import ValidationError

from core.rundir import RequestRecord, ServerTimings

CHAT_PATH = "/v1/chat/completions"
REQUEST_ID_HEADER = "X-Request-Id"
TIMELINES = "timelines"  # run-dir folder of per-chunk arrival times, one file per shard


@dataclass
class RequestMeta:
    """Who sent the request and when in the sweep: copied into the record verbatim."""

    shard: str
    step: int
    users: int
    phase: str
    category: str
    context_tokens: int = 0


@dataclass
class StreamResult:
    record: RequestRecord
    chunk_times: list[float] = field(default_factory=list)


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
        "stream_options": {"include_usage": True},
        "max_tokens": max_tokens,
        "temperature": temperature,
        "cache_prompt": cache_prompt,
    }
    if ignore_eos:
        payload["ignore_eos"] = True
    return payload


def make_client(base_url: str, *, read_timeout: float = 60.0, connect_timeout: float = 10.0) -> httpx.Client:
    """One client (and so one connection) per simulated user: httpx re-checks every pooled
    connection per request, so a shared pool costs CPU growing with concurrency squared."""
    timeout = httpx.Timeout(connect=connect_timeout, read=read_timeout, write=connect_timeout, pool=connect_timeout)
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    return httpx.Client(
        base_url=base_url,
        timeout=timeout,
        limits=limits,
        verify=_shared_ssl_context(),
        event_hooks={"request": [_stamp_send_time]},
    )


@functools.cache
def _shared_ssl_context() -> ssl.SSLContext:
    """One TLS context per process: building one loads the CA bundle (~25 ms of CPU), which
    at a step of 64 new users would stall every stream in the process for over a second."""
    return ssl.create_default_context(cafile=certifi.where())


SENT_AT = "rigbench_sent_at"


def _stamp_send_time(request: httpx.Request) -> None:
    """Runs once the request is built, just before it is written: TTFT starts here, so the
    client's own JSON encoding and request building are not charged to the server."""
    request.extensions[SENT_AT] = time.time()


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


def stream_chat(
    client: httpx.Client,
    payload: dict[str, Any],
    meta: RequestMeta,
    *,
    path: str = CHAT_PATH,
    on_abort: Callable[[StreamResult], None] | None = None,
) -> StreamResult:
    """Send one request and follow its stream to the end; never raises for server faults
    (they become the record's ``error_kind``), so a sweep goes on past bad responses.

    If the caller is torn down mid-stream (Locust killing a user greenlet, Ctrl-C), the
    partial request goes to ``on_abort`` marked ``interrupted`` before the exception
    continues, so what was already measured is not lost."""
    request_id = uuid.uuid4().hex
    chunk_times: list[float] = []
    state: dict[str, Any] = {"status": None, "usage": None, "timings": None, "done": False, "finished": False}
    error_kind: str | None = None
    error_message: str | None = None
    t_start = time.time()
    try:
        for attempt in (1, 2):
            try:
                t_start = _send_and_follow(client, path, payload, request_id, chunk_times, state)
                break
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
                # A keep-alive connection the server closed between requests (llama-server's
                # HTTP library closes after 100 requests or 5 s idle) fails before any response:
                # the request never reached the server, so it is sent once more, on a fresh one.
                if attempt == 2 or state["status"] is not None:
                    raise
        if state["status"] != 200:
            error_kind, error_message = state["error"]
        elif not (state["done"] or state["finished"]):
            error_kind, error_message = "disconnect", "stream ended before finish_reason or [DONE]"
    except httpx.ConnectError as error:
        error_kind, error_message = "connect", str(error) or type(error).__name__
    except (httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as error:
        error_kind, error_message = "timeout", f"stream stalled: {type(error).__name__}"
    except httpx.ConnectTimeout as error:
        error_kind, error_message = "connect", f"connect timed out: {error}"
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
        error_kind, error_message = "disconnect", str(error)[:300] or type(error).__name__
    except _ServerErrorEvent as error:
        error_kind, error_message = "server_error", str(error)
    except (_Malformed, SSEError, httpx.DecodingError) as error:
        error_kind, error_message = "malformed_sse", str(error)[:300]
    except Exception as error:  # noqa: BLE001 - recorded as the client's own failure, never as a stop
        error_kind, error_message = "client_error", f"{type(error).__name__}: {error}"[:300]
    except BaseException:
        if on_abort is not None:
            record = _kept_record(request_id, meta, t_start, time.time(), chunk_times, state, None, None)
            on_abort(StreamResult(record=record.model_copy(update={"interrupted": True}), chunk_times=chunk_times))
        raise
    record = _kept_record(request_id, meta, t_start, time.time(), chunk_times, state, error_kind, error_message)
    return StreamResult(record=record, chunk_times=chunk_times)


def _kept_record(request_id: str, meta: RequestMeta, t_start: float, t_end: float, chunk_times: list[float],
                 state: dict[str, Any], error_kind: str | None, error_message: str | None) -> RequestRecord:
    """The record; when the server's usage or timings are not what the protocol says, the request is
    still kept, as ``malformed_sse`` without them."""
    try:
        return _make_record(request_id, meta, t_start, t_end, chunk_times, state, error_kind, error_message)
    except (ValidationError, AttributeError, TypeError) as error:
        detail = f"usage or timings not as OpenAI/llama-server send them: {str(error).splitlines()[0]}"[:300]
        state = {**state, "usage": None, "timings": None}
        return _make_record(request_id, meta, t_start, t_end, chunk_times, state, "malformed_sse", detail)


def _send_and_follow(
    client: httpx.Client, path: str, payload: dict[str, Any], request_id: str, chunk_times: list[float], state: dict
) -> float:
    """One attempt; returns the time the request was handed to the socket."""
    t_start = time.time()
    headers = {REQUEST_ID_HEADER: request_id, "Accept": "text/event-stream"}
    with client.stream("POST", path, json=payload, headers=headers) as response:
        state["status"] = response.status_code
        t_start = response.request.extensions.get(SENT_AT, t_start)
        if response.status_code != 200:
            body = response.read().decode("utf-8", "replace")[:500]
            state["error"] = (_error_kind_for_status(response.status_code, body), body.strip()[:300] or None)
        else:
            _follow_events(EventSource(response), chunk_times, state)
    return t_start


def _follow_events(source: EventSource, chunk_times: list[float], state: dict[str, Any]) -> None:
    for event in source.iter_sse():
        arrived = time.time()
        data = event.data
        if data.strip() == "[DONE]":
            # keep reading to the end of the body: an unfinished response cannot hand its
            # connection back, and a new connection per request would be charged to TTFT
            state["done"] = True
            continue
        if not data:
            continue
        try:
            chunk = json.loads(data)
        except json.JSONDecodeError:
            raise _Malformed(f"event data is not JSON: {data[:80]!r}") from None
        if not isinstance(chunk, dict):
            raise _Malformed(f"event data is not a JSON object: {data[:80]!r}")
        if "error" in chunk:
            raise _ServerErrorEvent(describe_error_event(chunk["error"])[:300])
        choices = chunk.get("choices") or []
        if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
            raise _Malformed(f"event 'choices' is not a list of objects: {data[:80]!r}")
        for choice in choices:
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise _Malformed(f"event 'delta' is not an object: {data[:80]!r}")
            if delta.get("content") or delta.get("reasoning_content"):
                chunk_times.append(arrived)
            if choice.get("finish_reason"):
                state["finished"] = True
        if chunk.get("usage"):
            state["usage"] = chunk["usage"]
        if chunk.get("timings"):
            state["timings"] = chunk["timings"]


def _make_record(
    request_id: str,
    meta: RequestMeta,
    t_start: float,
    t_end: float,
    chunk_times: list[float],
    state: dict[str, Any],
    error_kind: str | None,
    error_message: str | None,
) -> RequestRecord:
    usage = state["usage"] or {}
    timings = ServerTimings.model_validate(state["timings"]) if state["timings"] else None
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
        http_status=state["status"],
        error_kind=error_kind,
        error_message=error_message,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        timings=timings,
    )
