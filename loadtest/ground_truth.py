"""A ground-truth SSE server: OpenAI chat-completions streams with exactly known timing.

The load generator is judged against it: a reply's first token is made ``ttft_ms`` after
the request arrived and every following token ``itl_ms`` after the previous one (``jitter``
spreads each gap uniformly by up to that share, seeded, so the mean stays ``itl_ms``); a chunk
leaves when ``tokens_per_chunk`` tokens are made (servers that batch or draft pack several),
and the server logs the unix time each chunk actually left and how many tokens it carried (one
JSON line per request, keyed by the client's ``X-Request-Id``, or ``gt-<n>`` for a client that
sends none; a stream the client cut is logged too, with what it got). What the client measured
minus what the server logged is the load generator's own error.

With ``per_chunk_counts`` the server streams running token counts where a client asks, as
llama-server does for ``timings_per_token`` (a ``timings`` object on every chunk) and vLLM for
``stream_options.continuous_usage_stats`` (a ``usage`` object on every chunk).

It speaks just enough HTTP/1.1 (keep-alive, chunked transfer) on plain asyncio streams so
that the server itself stays cheap at 64 users x 100 tok/s; it runs in its own process
(``python -m loadtest.ground_truth``) so its timing never shares a CPU loop with the
client. Like llama-server, the last chunk carries ``usage`` and ``timings``; ``/metrics``,
``/slots``, ``/tokenize`` and ``/health`` exist for the sweep's telemetry.

With ``prompt_cache`` the server says how many prompt tokens each request could take from a cache
(``cache_n``), as llama-server does, and logs it (``cached``): the conversations of a sessions
sweep are then judged against a known reuse, whatever the client thought it sent.

Faults for tests: ``fault_cycle`` gives request *i* the fault ``fault_cycle[i % n]``:
``none``, ``http_500``, ``http_503`` and ``http_429`` (overload answers with ``Retry-After:
retry_after_s`` and an OpenAI-style error body), ``disconnect`` (closes mid-stream), ``malformed``
(a non-JSON event), ``stall`` (stops sending for ``stall_seconds``), ``error_event`` (llama-server's
mid-stream ``{"error": {"code": 500, ...}}`` event after two tokens), ``no_done`` (streams every token of the
reply at its pace, then neither the finish chunk nor ``data: [DONE]``: the connection stays open until the
client closes it, logged ``no_done`` with what was sent, or the server stops, as a server that hangs at the
end of a reply; only a client's read timeout ends it); with ``overload_after`` every
request from that one on is answered ``http_503``, as a server that tips over mid-run. A model name other than
``model`` gets a 404 ``model_not_found``, as OpenAI answers. With ``queue`` at most ``slots``
replies stream at once and the rest wait, as on a real server: its capacity is then
``slots`` / (one reply's time), and the log's ``t_received`` keeps the time a request arrived,
so the wait is in the truth's latency as it is in an open-loop client's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import itertools
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel, Field

from core.errors import LoadTestError
from core.network import free_port, server_url

# The overload answers, in llama-server's words where it has them; each carries Retry-After.
OVERLOAD = {
    "http_503": ("503 Service Unavailable", {"code": 503, "message": "Loading model", "type": "unavailable_error"}),
    "http_429": ("429 Too Many Requests", {"code": 429, "message": "Too many requests", "type": "rate_limit_error"}),
}
CONTEXT_EXCEEDED = {"code": 500, "message": "Context size has been exceeded.", "type": "server_error"}


class GroundTruthConfig(BaseModel):
    ttft_ms: float = Field(50.0, ge=0)
    itl_ms: float = Field(10.0, ge=0)
    tokens: int | None = Field(None, gt=0, description="reply length; default: the request's max_tokens")
    model: str = "ground-truth"
    slots: int = 64
    fault_cycle: list[str] = Field(default_factory=lambda: ["none"])
    stall_seconds: float = 30.0
    length_jitter: float = Field(0.0, ge=0, lt=1, description="replies shortened by up to this share, so users desync")
    tokens_per_chunk: int = Field(1, ge=1, description="tokens a content chunk carries (the last may carry fewer)")
    tokens_per_chunk_max: int | None = Field(None, ge=1, description="given: each chunk carries a random count "
                                             "from tokens_per_chunk to this (seeded per request)")
    pause_ms: float = Field(0.0, ge=0, description="one pause mid-stream, after half of a reply's tokens")
    jitter: float = Field(0.0, ge=0, lt=1, description="each token gap spread uniformly by up to this share")
    seed: int = 0
    per_chunk_counts: bool = Field(True, description="honour timings_per_token and continuous_usage_stats")
    queue: bool = Field(False, description="at most `slots` replies at once, the rest wait in arrival order")
    overload_after: int | None = Field(None, ge=0, description="from this request on, every answer is http_503")
    llama_endpoints: bool = Field(True, description="/slots, /metrics and /tokenize, as llama-server has; off: "
                                  "an OpenAI-compatible server that is not llama-server (they answer 404)")
    retry_after_s: int = Field(1, ge=0, description="the Retry-After an overload answer carries")
    max_model_len: int | None = Field(None, gt=0, description="the context /v1/models names per model, as vLLM's "
                                      "listing does (the replies are not cut by it)")
    prompt_cache: bool = Field(False, description="report the prompt tokens a request could reuse: the longest "
                               "common prefix, in words (the server's token unit), of its prompt with any prompt "
                               "and reply the server has seen before, as timings.cache_n and usage."
                               "prompt_tokens_details.cached_tokens (timings.prompt_n is then the rest, as "
                               "llama-server's). One unbounded cache for the whole server, filled in arrival order, "
                               "so the truth does not hang on which slot a request lands on; off: no cache is said")
    detokenize: bool = Field(False, description="/detokenize, as llama-server has (the ids /tokenize gives are the "
                             "words' places in a vocabulary the server grows as it meets them); off: 404, as a "
                             "server that cannot cut a long context")


class _Stats:
    def __init__(self) -> None:
        self.requests = 0
        self.processing = 0
        self.tokens_predicted = 0
        self.prompt_tokens = 0
        self.model_lists = 0  # GETs of /v1/models, so a test sees how often a client asks before the load


class PrefixCache:
    """Every word sequence the server has seen, as a trie: a request's reusable prefix is the longest
    path its prompt follows from the root (words are the server's tokens)."""

    def __init__(self) -> None:
        self.root: dict[str, dict] = {}

    def longest_prefix(self, words: list[str]) -> int:
        node, depth = self.root, 0
        for word in words:
            node = node.get(word)  # type: ignore[assignment]
            if node is None:
                break
            depth += 1
        return depth

    def add(self, words: list[str]) -> None:
        node = self.root
        for word in words:
            node = node.setdefault(word, {})


def prompt_words(messages: object) -> list[str]:
    """A request's prompt in the server's token unit: each message's content split on whitespace, in order
    (no role or template tokens, so a turn's history is a word-for-word prefix of the next turn's)."""
    if not isinstance(messages, list):
        return []
    return [word for message in messages if isinstance(message, dict)
            for word in str(message.get("content", "")).split()]


def _chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class _SendLog:
    """What one reply sent: when each chunk left and how many tokens it carried."""

    def __init__(self, request_id: str, received: float):
        self.request_id = request_id
        self.received = received
        self.sends: list[float] = []
        self.tokens: list[int] = []
        self.cached: int | None = None  # the prompt tokens it could reuse (``prompt_cache``)

    def sent(self, at: float, tokens: int) -> None:
        self.sends.append(at)
        self.tokens.append(tokens)


class _Reply:
    """One streaming reply's events: what a content chunk and the tail say, and the send log.

    A content chunk's bytes come from a template made once per reply (the text is ``t<k> ``
    words, which JSON needs no escaping for): encoding a dict per chunk was over a quarter of
    the server's CPU, and the server that judges a load generator must stay lighter than it."""

    def __init__(self, app: GroundTruthApp, request_id: str, prompt_n: int, n_tokens: int, style: str | None,
                 log: _SendLog, words: list[str] | None = None):
        self.app = app
        self.prompt_n = prompt_n
        self.words = words  # the prompt, kept for the cache with its reply once sent (``prompt_cache``)
        cached = log.cached
        # llama-server's timings count the prompt tokens it processed, beside the ones it reused
        self._prompt_counts = b'"prompt_n":%d' % prompt_n if cached is None else (
            b'"cache_n":%d,"prompt_n":%d' % (cached, prompt_n - cached))
        self.n_tokens = n_tokens
        self.style = style
        self.log = log
        self.made = 0
        self.head = {"object": "chat.completion.chunk", "model": app.config.model, "id": request_id}
        opening = json.dumps(self.head, separators=(",", ":"))[:-1].encode()
        self._opening = b"data: " + opening + b',"choices":[{"index":0,"delta":{'
        self._prompt_ms = repr(float(app.config.ttft_ms)).encode()

    def send(self, writer: asyncio.StreamWriter, made_by_now: int) -> None:
        text = "".join([f"t{k} " for k in range(self.made, made_by_now)]).encode()
        role = b'"role":"assistant",' if not self.made else b""
        counts = b""
        if self.style == "timings":
            predicted_ms = (time.time() - self.log.sends[0]) * 1000.0 if self.log.sends else 0.0
            counts = b',"timings":{%s,"prompt_ms":%s,"predicted_n":%d,"predicted_ms":%s}' % (
                self._prompt_counts, self._prompt_ms, made_by_now, repr(predicted_ms).encode())
        elif self.style == "usage":
            counts = b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                self.prompt_n, made_by_now, self.prompt_n + made_by_now)
        event = b'%s%s"content":"%s"},"finish_reason":null}]%s}\n\n' % (self._opening, role, text, counts)
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        self.log.sent(time.time(), made_by_now - self.made)
        self.app.stats.tokens_predicted += made_by_now - self.made
        self.made = made_by_now

    def tail(self) -> bytes:
        """The finish chunk, then usage and timings as llama-server sends them, then [DONE]."""
        sends, n_tokens, prompt_n = self.log.sends, self.n_tokens, self.prompt_n
        predicted_ms = (sends[-1] - sends[0]) * 1000.0 if len(sends) > 1 else 0.0
        decode_tokens = n_tokens - self.log.tokens[0]
        timings = {
            "prompt_n": prompt_n,
            "prompt_ms": self.app.config.ttft_ms,
            "predicted_n": n_tokens,
            "predicted_ms": predicted_ms,
            "predicted_per_second": decode_tokens / predicted_ms * 1000.0 if predicted_ms else None,
        }
        usage = {"prompt_tokens": prompt_n, "completion_tokens": n_tokens, "total_tokens": prompt_n + n_tokens}
        cached = self.log.cached
        if cached is not None:
            timings = {"cache_n": cached, **timings, "prompt_n": prompt_n - cached}
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            if self.words is not None:
                self.app.prompt_cache.add(self.words + [f"t{k}" for k in range(n_tokens)])
        self.app.stats.prompt_tokens += prompt_n - (cached or 0)
        tail = _event({**self.head, "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]})
        return tail + _event({**self.head, "choices": [], "usage": usage, "timings": timings}) + b"data: [DONE]\n\n"


class _Pacer:
    """One timer for every reply without a fault: at each wake-up, every chunk that is due leaves.

    Why not a sleep per chunk: that is a timer and a task switch per chunk, and at 50k chunks/s
    it fills a core on its own, while the server that judges a load generator must stay much
    lighter than it. Wake-ups are at least ``MIN_WAIT`` apart, so a chunk may leave up to that
    late; the log has the time it really left, which is what the client is judged against."""

    MIN_WAIT = 0.0002

    def __init__(self) -> None:
        self.due: list[tuple[float, int, Callable[[], float | None]]] = []
        self.order = itertools.count()
        self.task: asyncio.Task | None = None
        self.sleeping_until = math.inf

    async def stream(self, writer: asyncio.StreamWriter, reply: _Reply, plan: list[tuple[float, int]]) -> bool:
        loop = asyncio.get_running_loop()
        base = loop.time()
        done: asyncio.Future[bool] = loop.create_future()
        position = 0

        def step() -> float | None:
            nonlocal position
            if done.done():
                return None
            if writer.is_closing() or writer.transport.is_closing():
                reply.app._log(reply.log, "client_gone")
                done.set_result(False)
                return None
            reply.send(writer, plan[position][1])
            position += 1
            if position < len(plan):
                return base + plan[position][0]
            writer.write(_chunk(reply.tail()) + b"0\r\n\r\n")
            reply.app._log(reply.log, "none")
            done.set_result(True)
            return None

        first = base + plan[0][0]
        heapq.heappush(self.due, (first, next(self.order), step))
        if self.task is None or self.task.done() or first < self.sleeping_until:
            if self.task is not None:
                self.task.cancel()  # it sleeps towards a later chunk: this one is due first
            self.task = loop.create_task(self._run())
        keep = await done
        if keep:
            try:
                await writer.drain()
            except ConnectionError:
                return False
        return keep

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self.due:
            now = loop.time()
            while self.due and self.due[0][0] <= now:
                _, _, step = heapq.heappop(self.due)
                following = step()
                if following is not None:
                    heapq.heappush(self.due, (following, next(self.order), step))
            if self.due:
                self.sleeping_until = self.due[0][0]
                await asyncio.sleep(max(self.sleeping_until - loop.time(), self.MIN_WAIT))
        self.sleeping_until = math.inf


class GroundTruthApp:
    def __init__(self, config: GroundTruthConfig, log_path: Path | None):
        self.config = config
        self.stats = _Stats()
        self.anonymous = itertools.count()
        self.free_slots: asyncio.Semaphore | None = None  # made inside the event loop that serves
        self.pacer = _Pacer()
        self.log = open(log_path, "a", buffering=1) if log_path else None  # noqa: SIM115
        self.prompt_cache = PrefixCache()  # filled only with ``prompt_cache``
        self.vocabulary: dict[str, int] = {}  # /tokenize's ids, and /detokenize's words back
        self.words: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {
                    k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                received = time.time()
                keep = await self.route(method, path.split("?")[0], headers, body, received, writer, reader)
                if not keep:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            # the server is stopping with this stream open: the connection's end is the answer (a
            # cancelled handler would have asyncio print its traceback once per open stream)
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()

    async def respond(self, writer: asyncio.StreamWriter, status: str, body: bytes, ctype: str,
                      extra: str = "") -> bool:
        writer.write(
            f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode()
            + body
        )
        await writer.drain()
        return True

    async def route(self, method: str, path: str, headers: dict, body: bytes, received: float, writer,
                    reader: asyncio.StreamReader | None = None) -> bool:
        """One request's answer; ``reader`` (the connection's) lets a reply that hangs see the client leave."""
        if path == "/health":  # with the server's pid: on a port two servers raced for, the client knows which answered
            body = json.dumps({"status": "ok", "pid": os.getpid()}).encode()
            return await self.respond(writer, "200 OK", body, "application/json")
        if path in ("/metrics", "/slots", "/tokenize") and not self.config.llama_endpoints:
            return await self.respond(writer, "404 Not Found", b'{"error":"not found"}', "application/json")
        if path == "/v1/models":
            self.stats.model_lists += 1
            model: dict = {"id": self.config.model, "object": "model"}
            if self.config.max_model_len is not None:
                model["max_model_len"] = self.config.max_model_len
            listing = {"object": "list", "data": [model]}
            return await self.respond(writer, "200 OK", json.dumps(listing).encode(), "application/json")
        if path == "/metrics":
            return await self.respond(writer, "200 OK", self.metrics_text().encode(), "text/plain; version=0.0.4")
        if path == "/slots":
            slots = [{"id": i, "is_processing": i < self.stats.processing} for i in range(self.config.slots)]
            return await self.respond(writer, "200 OK", json.dumps(slots).encode(), "application/json")
        if path == "/tokenize" and method == "POST":
            asked = json.loads(body or b"{}")
            content = asked.get("content", "")
            tokens: list = [self.word_id(word) for word in content.split()]
            if asked.get("with_pieces"):  # as llama-server: each token's text, here a word and the space after it
                pieces = [match.group() for match in re.finditer(r"\S+\s*", content)]
                tokens = [{"id": token, "piece": piece} for token, piece in zip(tokens, pieces, strict=True)]
            return await self.respond(writer, "200 OK", json.dumps({"tokens": tokens}).encode(), "application/json")
        if path == "/detokenize" and method == "POST" and self.config.detokenize:
            ids = json.loads(body or b"{}").get("tokens", [])
            text = " ".join(self.words[i] for i in ids if isinstance(i, int) and 0 <= i < len(self.words))
            return await self.respond(writer, "200 OK", json.dumps({"content": text}).encode(), "application/json")
        if path == "/v1/chat/completions" and method == "POST":
            request_id = headers.get("x-request-id") or f"gt-{next(self.anonymous)}"
            if not self.config.queue:
                return await self.chat(json.loads(body), request_id, received, writer, reader)
            if self.free_slots is None:
                self.free_slots = asyncio.Semaphore(self.config.slots)
            async with self.free_slots:  # asyncio's semaphore wakes waiters first come, first served
                return await self.chat(json.loads(body), request_id, received, writer, reader)
        return await self.respond(writer, "404 Not Found", b'{"error":"not found"}', "application/json")

    def word_id(self, word: str) -> int:
        if word not in self.vocabulary:
            self.vocabulary[word] = len(self.words)
            self.words.append(word)
        return self.vocabulary[word]

    def metrics_text(self) -> str:
        s = self.stats
        return (
            "# TYPE llamacpp:tokens_predicted_total counter\n"
            f"llamacpp:tokens_predicted_total {s.tokens_predicted}\n"
            "# TYPE llamacpp:prompt_tokens_total counter\n"
            f"llamacpp:prompt_tokens_total {s.prompt_tokens}\n"
            "# TYPE llamacpp:requests_processing gauge\n"
            f"llamacpp:requests_processing {s.processing}\n"
            "# TYPE rigbench_truth_requests_total counter\n"
            f"rigbench_truth_requests_total {s.requests}\n"
            "# TYPE rigbench_truth_model_list_requests_total counter\n"
            f"rigbench_truth_model_list_requests_total {s.model_lists}\n"
        )

    def chunk_plan(self, n_tokens: int, request_index: int) -> list[tuple[float, int]]:
        """(seconds after arrival, tokens made so far) for each chunk: a token is made every
        jittered gap after the first, and a chunk leaves when its last token is made."""
        config = self.config
        rng = random.Random(config.seed * 1_000_003 + request_index)
        made_at = []
        at = config.ttft_ms
        for k in range(n_tokens):
            if k:
                spread = rng.uniform(-config.jitter, config.jitter) if config.jitter else 0.0
                at += config.itl_ms * (1.0 + spread) + (config.pause_ms if k == n_tokens // 2 else 0.0)
            made_at.append(at / 1000.0)
        plan, made = [], 0
        while made < n_tokens:
            per = config.tokens_per_chunk
            if config.tokens_per_chunk_max is not None:
                per = rng.randint(per, max(per, config.tokens_per_chunk_max))
            made = min(made + per, n_tokens)
            plan.append((made_at[made - 1], made))
        return plan

    def count_style(self, request: dict) -> str | None:
        """Which running count the client asked for and gets: llama-server's timings win when
        both are asked, as llama-server ignores ``continuous_usage_stats``."""
        if not self.config.per_chunk_counts:
            return None
        if request.get("timings_per_token"):
            return "timings"
        options = request.get("stream_options")
        return "usage" if isinstance(options, dict) and options.get("continuous_usage_stats") else None

    async def chat(self, request: dict, request_id: str, received: float, writer: asyncio.StreamWriter,
                   reader: asyncio.StreamReader | None = None) -> bool:
        config = self.config
        request_index = self.stats.requests
        fault = config.fault_cycle[request_index % len(config.fault_cycle)]
        self.stats.requests += 1
        if request.get("model", config.model) != config.model:
            body = json.dumps(
                {"error": {"code": "model_not_found", "message": f"model {request['model']!r} not found"}}
            )
            return await self.respond(writer, "404 Not Found", body.encode(), "application/json")
        if config.overload_after is not None and request_index >= config.overload_after:
            fault = "http_503"
        if fault == "http_500":
            return await self.respond(writer, "500 Internal Server Error", b'{"error":"injected"}', "application/json")
        if fault in OVERLOAD:
            status, error = OVERLOAD[fault]
            self._log(_SendLog(request_id, received), fault)
            return await self.respond(writer, status, json.dumps({"error": error}).encode(), "application/json",
                                      f"Retry-After: {config.retry_after_s}\r\n")
        n_tokens = config.tokens or int(request.get("max_tokens") or 16)
        if config.length_jitter:
            # deterministic spread (a Weyl sequence over the request counter), never below one token
            n_tokens = max(
                1, n_tokens - int(((self.stats.requests * 0.6180339887) % 1.0) * config.length_jitter * n_tokens)
            )
        words = prompt_words(request.get("messages", []))
        prompt_n = len(words)
        style = self.count_style(request)
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        self.stats.processing += 1
        log = _SendLog(request_id, received)
        if config.prompt_cache:
            log.cached = self.prompt_cache.longest_prefix(words)
            self.prompt_cache.add(words)
        reply = _Reply(self, request_id, prompt_n, n_tokens, style, log, words if config.prompt_cache else None)
        plan = self.chunk_plan(n_tokens, request_index)
        try:
            if fault == "none":
                return await self.pacer.stream(writer, reply, plan)
            return await self._stream_with_fault(writer, reply, plan, fault, reader)
        except asyncio.CancelledError:
            self._log(log, "server_stopped")
            raise
        finally:
            self.stats.processing -= 1

    async def _stream_with_fault(self, writer, reply: _Reply, plan: list[tuple[float, int]], fault: str,
                                 reader: asyncio.StreamReader | None = None) -> bool:
        """A reply with its own timer, for the faults a test asks for (rare and slow by design)."""
        loop = asyncio.get_running_loop()
        base = loop.time()
        for index, (offset, made_by_now) in enumerate(plan):
            delay = base + offset - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            if writer.is_closing() or writer.transport.is_closing():
                self._log(reply.log, "client_gone")
                return False
            if fault == "malformed" and index == 1:
                writer.write(_chunk(b"data: {this is not json\n\n"))
                await writer.drain()
                return await self._finish_chunked(writer, reply.log, fault, keep=True)
            if fault == "error_event" and index == 2:
                writer.write(_chunk(_event({"error": CONTEXT_EXCEEDED}) + b"data: [DONE]\n\n"))
                return await self._finish_chunked(writer, reply.log, fault, keep=True)
            if fault == "disconnect" and index == 2:
                writer.transport.abort()
                self._log(reply.log, fault)
                return False
            if fault == "stall" and index == 1:
                await asyncio.sleep(self.config.stall_seconds)
                writer.transport.abort()
                self._log(reply.log, fault)
                return False
            reply.send(writer, made_by_now)
        if fault == "no_done":
            return await self._hang(writer, reply.log, reader)
        writer.write(_chunk(reply.tail()))
        return await self._finish_chunked(writer, reply.log, fault, keep=True)

    async def _hang(self, writer, log: _SendLog, reader: asyncio.StreamReader | None) -> bool:
        """Every token sent, the stream never ends: wait for the client to close the connection (its read
        timeout), then log ``no_done``. Nothing is written meanwhile, not even an SSE comment, as a keep-alive
        would reset the client's read timeout; a server stop cancels the wait (logged ``server_stopped``)."""
        with contextlib.suppress(ConnectionError):
            await writer.drain()
            if reader is None:  # no connection to watch (a caller outside ``handle``): hang until the server stops
                await asyncio.Event().wait()
            else:
                while await reader.read(4096):  # a client waiting on its stream sends nothing more; EOF: it left
                    pass
        self._log(log, "no_done")
        return False

    async def _finish_chunked(self, writer, log: _SendLog, fault: str, keep: bool) -> bool:
        writer.write(b"0\r\n\r\n")
        try:
            await writer.drain()
        except ConnectionError:
            self._log(log, "client_gone")
            return False
        self._log(log, fault)
        return keep

    def _log(self, log: _SendLog, fault: str) -> None:
        if self.log is not None:
            line = {"request_id": log.request_id, "t_received": log.received, "sends": log.sends,
                    "tokens": log.tokens, "fault": fault}
            if log.cached is not None:
                line["cached"] = log.cached
            self.log.write(json.dumps(line) + "\n")


async def serve(config: GroundTruthConfig, host: str, port: int, log_path: Path | None) -> None:
    """Serve until SIGTERM or SIGINT. The signal is taken between two steps of the event loop, so a
    reply whose last bytes went out is logged before the server stops (a client that read them may
    stop the server at once and read the log), and a reply cut short is logged ``server_stopped``."""
    app = GroundTruthApp(config, log_path)
    server = await asyncio.start_server(app.handle, host, port, backlog=1024)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    server.close()  # not wait_closed(): it would wait for idle kept-alive connections; asyncio.run cancels the rest


def read_truth_log(path: Path) -> dict[str, dict]:
    """The server's send log, keyed by request id."""
    entries = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                entries[entry["request_id"]] = entry
    return entries


BIND_ATTEMPTS = 3


class GroundTruthServer:
    """The ground-truth server as a child process on a free loopback port (tests, selftest)."""

    def __init__(self, config: GroundTruthConfig, log_path: Path, host: str = "127.0.0.1", port: int | None = None):
        self.config = config
        self.log_path = Path(log_path)
        self.host = host
        self.chosen_port = port
        self.port = port or free_port(host)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return server_url("http", self.host, self.port)

    def __enter__(self) -> GroundTruthServer:
        """Start the child and wait until it, and not another process, answers /health. A free port is
        free only when looked at: another process (a test beside this one) may bind it first, so a child
        that cannot bind is started again on another port, unless the port was given."""
        for _ in range(BIND_ATTEMPTS):
            if self._start():
                return self
            if self.chosen_port is not None:
                break
            self.port = free_port(self.host)
        raise LoadTestError(f"ground-truth server could not listen on {self.base_url}: exited with "
                            f"{self.process.returncode if self.process else None} before answering /health")

    def _start(self) -> bool:
        """True once the child answers /health; False when it exited first (the port was taken)."""
        command = [
            sys.executable,
            "-m",
            "loadtest.ground_truth",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--log",
            str(self.log_path.resolve()),  # the child runs from the repository root
            "--config-json",
            self.config.model_dump_json(),
        ]
        # ``python -m`` from the repository root finds this checkout's packages, installed or not
        self.process = subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return False
            with contextlib.suppress(httpx.HTTPError, ValueError):
                answer = httpx.get(f"{self.base_url}/health", timeout=1)
                if answer.status_code == 200 and answer.json().get("pid") == self.process.pid:
                    return True
            time.sleep(0.05)
        self.__exit__()
        raise LoadTestError(f"ground-truth server on {self.base_url} did not answer /health within 20 s")

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--log", type=Path, default=None, help="JSONL file of actual send times per request")
    parser.add_argument("--config-json", default="{}", help="GroundTruthConfig as JSON")
    parser.add_argument("--ttft-ms", type=float)
    parser.add_argument("--itl-ms", type=float)
    parser.add_argument("--tokens", type=int)
    args = parser.parse_args(argv)
    config = GroundTruthConfig.model_validate_json(args.config_json)
    overrides = {k: v for k, v in (("ttft_ms", args.ttft_ms), ("itl_ms", args.itl_ms), ("tokens", args.tokens)) if v}
    config = config.model_copy(update=overrides)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, args.host, args.port, args.log))


if __name__ == "__main__":
    main()
