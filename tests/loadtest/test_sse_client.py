"""The lean client's framing on real loopback sockets: a scripted server writes each answer in
pieces (with a pause between, so each piece is its own ``recv``) and the records must not care
where the pieces were cut. Every test against the scripted server runs twice: with blocking
reads and with the event-loop reads of a watched client (the load processes' way)."""

from __future__ import annotations

import json
import random
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from loadtest.sse_client import EventSplitter, SSEClient
from loadtest.stall_watch import StallWatch
from loadtest.streaming import RequestMeta, build_payload, make_client, stream_chat

META = RequestMeta(shard="t", step=0, users=1, phase="measure", category="chat")
PAUSE_S = 0.002  # long enough that the next piece arrives in its own recv()

# One answer: the pieces to write (a number: a pause of that many seconds), and whether to close after them.
Script = Callable[[int], tuple[list[bytes | float], bool]]


def payload(max_tokens: int = 4) -> dict:
    return build_payload([{"role": "user", "content": "hi"}], model="m", max_tokens=max_tokens, temperature=0.0,
                         cache_prompt=False, ignore_eos=True)


def chunk_event(content: str | None = None, finish: str | None = None, **extra: object) -> dict:
    delta = {"content": content} if content is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra}


def sse(events: list[dict], newline: bytes = b"\n") -> bytes:
    body = b"".join(b"data: " + json.dumps(e).encode() + newline + newline for e in events)
    return body + b"data: [DONE]" + newline + newline


def chunked(body_parts: list[bytes]) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in body_parts) + b"0\r\n\r\n"


def head(status: str = "200 OK", framing: str = "Transfer-Encoding: chunked", extra: str = "") -> bytes:
    return f"HTTP/1.1 {status}\r\nContent-Type: text/event-stream\r\n{framing}\r\n{extra}\r\n".encode()


def cut(data: bytes, points: int, seed: int) -> list[bytes]:
    """``data`` split at ``points`` seeded places (a piece may be one byte)."""
    places = sorted(random.Random(seed).sample(range(1, len(data)), points))
    return [data[a:b] for a, b in zip([0, *places], [*places, len(data)], strict=True)]


class ScriptedServer:
    """Answers the n-th request with ``script(n)``; counts connections and requests."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None, watched: bool = False):
        self.script = script
        self.tls = tls
        self.watched = watched  # clients of this server read in the event loop, under the watchdog
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.connections = 0
        self.requests = 0
        self.bodies: list[dict] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.listener.getsockname()[1]}"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:
            try:
                conn = self.tls.wrap_socket(conn, server_side=True)
            except (OSError, ssl.SSLError):
                conn.close()
                return
        buffer = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buffer:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                request_head, buffer = buffer.split(b"\r\n\r\n", 1)
                length = int(request_head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                while len(buffer) < length:
                    buffer += conn.recv(65536)
                self.bodies.append(json.loads(buffer[:length]))
                buffer = buffer[length:]
                pieces, close = self.script(self.requests)
                self.requests += 1
                try:
                    for piece in pieces:
                        if isinstance(piece, float):
                            time.sleep(piece)
                            continue
                        conn.sendall(piece)
                        time.sleep(PAUSE_S)
                except OSError:
                    return
                if close:
                    return

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(params=["blocking", "event_loop"])
def serve(request) -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: Script, tls: ssl.SSLContext | None = None) -> ScriptedServer:
        servers.append(ScriptedServer(script, tls, watched=request.param == "event_loop"))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


GOOD = [chunk_event("Hel"), chunk_event("lo"), chunk_event(" world"), chunk_event(finish="stop",
        usage={"prompt_tokens": 2, "completion_tokens": 3})]


def one(server: ScriptedServer, read_timeout: float = 2.0, requests: int = 1):
    with make_client(server.url, read_timeout=read_timeout, connect_timeout=2.0) as client:
        if server.watched:
            StallWatch().watch(client)
        return [stream_chat(client, payload(), META) for _ in range(requests)]


def assert_good(result) -> None:
    record = result.record
    assert record.error_kind is None, record.error_message
    assert record.content_chunks == 3 and len(result.chunk_times) == 3
    assert (record.completion_tokens, record.prompt_tokens, record.tokens_counted_by) == (3, 2, "usage")
    assert record.partial_text is None


@pytest.mark.parametrize("seed", range(4))
def test_chunk_and_event_boundaries_split_anywhere_across_reads(serve, seed: int) -> None:
    """Chunk sizes, chunk data, CRLFs and ``data:`` lines cut at seeded places, on a kept connection."""
    body = sse(GOOD)
    response = head() + chunked(cut(body, 5, seed))  # events split across chunks ...
    server = serve(lambda n: (cut(response, 25, seed * 10 + n), False))  # ... and the bytes across reads
    for result in one(server, requests=2):
        assert_good(result)
    assert server.connections == 1, "the connection is kept between requests"


def test_crlf_events_and_several_events_in_one_read(serve) -> None:
    body = sse(GOOD, newline=b"\r\n")
    server = serve(lambda n: ([head() + chunked([body])], False) if n == 0 else
                   (cut(head() + chunked([body]), 30, n), False))
    for result in one(server, requests=2):
        assert_good(result)


def test_a_data_line_split_mid_line_and_multi_line_events_with_comments(serve) -> None:
    text = json.dumps(GOOD[0])
    middle = text.index(", ") + 1  # between two JSON values: the joining newline is whitespace there
    body = (b": a comment\n" + b"data: " + text[:middle].encode() + b"\ndata:" + text[middle:].encode() + b"\n\n"
            + sse(GOOD[1:]))
    server = serve(lambda n: (cut(head() + chunked([body]), 12, 7), False))
    record = one(server)[0].record
    # the two data lines are joined by a newline, which JSON reads as whitespace
    assert record.error_kind is None and record.content_chunks == 3


def test_content_length_body_and_http10_body_until_close(serve) -> None:
    body = sse(GOOD)
    with_length = head(framing=f"Content-Length: {len(body)}") + body
    until_close = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + body
    server = serve(lambda n: (cut(with_length, 6, n), False) if n == 0 else (cut(until_close, 6, n), True))
    for result in one(server, requests=2):
        assert_good(result)
    assert server.connections == 1


def test_closed_mid_event_is_a_disconnect_and_keeps_the_chunks_before(serve) -> None:
    first = sse(GOOD[:1])[:-14]  # the first event, without the [DONE] after it
    answer = head() + chunked([sse(GOOD)])
    server = serve(lambda n: ([answer[: len(head()) + 5 + len(first) + 20]], True))  # 20 bytes into the second event
    record = one(server)[0].record
    assert record.error_kind == "disconnect" and record.content_chunks == 1
    assert record.partial_text == "Hel" and record.tokens_counted_by == "chunks"
    assert record.completion_tokens is None


def test_non_json_event_is_malformed_and_the_next_request_gets_a_fresh_connection(serve) -> None:
    bad = head() + chunked([b"data: <html>oops</html>\n\n"])
    server = serve(lambda n: ([bad], False) if n == 0 else ([head() + chunked([sse(GOOD)])], False))
    bad_result, good = one(server, requests=2)
    assert bad_result.record.error_kind == "malformed_sse"
    assert bad_result.record.error_message == "event data is not JSON: '<html>oops</html>'"
    assert_good(good)
    assert server.connections == 2


def test_a_keep_alive_connection_closed_between_requests_is_retried_once(serve) -> None:
    """The server closes after each answer without saying so: the second request fails before
    any response byte on the kept connection, and goes again on a fresh one."""
    server = serve(lambda n: ([head() + chunked([sse(GOOD)])], True))
    for result in one(server, requests=3):
        assert_good(result)
    assert server.requests == 3 and server.connections == 3


@pytest.mark.timing
def test_the_read_timeout_bounds_each_wait_not_the_stream(serve) -> None:
    slow = [head()] + [b"%x\r\n%s\r\n" % (len(p), p) for p in (sse(GOOD[:1])[:-14], sse(GOOD[1:]))] + [b"0\r\n\r\n"]

    def script(n: int) -> tuple[list[bytes | float], bool]:
        if n == 0:  # pieces 0.3 s apart: 0.9 s in all, past the 0.5 s timeout, every gap within it
            return [slow[0], 0.3, slow[1], 0.3, slow[2], 0.3, slow[3]], False
        return [head(), 1.0], True  # nothing for 1 s

    server = serve(script)
    started = time.monotonic()
    ok, stalled = one(server, read_timeout=0.5, requests=2)
    assert_good(ok)
    assert stalled.record.error_kind == "timeout"
    assert stalled.record.error_message == "stream stalled: no byte arrived within 0.5 s"
    assert time.monotonic() - started < 2.5


@pytest.mark.timing
def test_a_watched_client_waits_without_a_timer_and_the_watchdog_ends_a_stall(serve) -> None:
    """With ``watched`` the socket has no timeout; ``abort_if_stalled`` (the load processes' watchdog)
    ends a wait past the read timeout with the same error, and leaves a shorter one alone."""
    server = serve(lambda n: ([head(), 3.0], True))  # a head, then nothing for 3 s
    client = make_client(server.url, read_timeout=0.5, connect_timeout=2.0)
    client.watched = True
    results = []
    waiting = threading.Thread(target=lambda: results.append(stream_chat(client, payload(), META)))
    started = time.monotonic()
    waiting.start()
    time.sleep(0.3)
    assert client.waiting_since is not None and not client.abort_if_stalled(time.monotonic())
    time.sleep(0.4)
    assert client.abort_if_stalled(time.monotonic())
    waiting.join(timeout=2)
    record = results[0].record
    assert record.error_kind == "timeout" and record.error_message == "stream stalled: no byte arrived within 0.5 s"
    assert time.monotonic() - started < 1.5 and not client.stalled


def test_error_status_with_chunked_body_keeps_the_connection(serve) -> None:
    answer = b'{"error": {"message": "model not found: m"}}'
    server = serve(lambda n: ([head("404 Not Found") + chunked([answer])], False) if n == 0
                   else ([head() + chunked([sse(GOOD)])], False))
    missing, good = one(server, requests=2)
    assert (missing.record.error_kind, missing.record.http_status) == ("bad_model", 404)
    assert missing.record.error_message == "model not found: m"  # the server's words, not its JSON
    assert_good(good)
    assert server.connections == 1


def test_per_chunk_counts_fill_streamed_and_first_chunk_tokens(serve) -> None:
    """llama-server's cumulative ``timings.predicted_n`` on every chunk, three tokens a chunk."""
    def counted(n: int) -> dict:
        return chunk_event("abc", timings={"predicted_n": n, "predicted_ms": 1.0})

    events = [counted(3), counted(6), counted(9)]
    finished = sse([*events, chunk_event(finish="length", usage={"prompt_tokens": 2, "completion_tokens": 9})])
    server = serve(lambda n: ([head() + chunked([finished])], False) if n == 0
                   else ([head() + chunked([sse(events)[:-14]])[:-5]], True))
    done, cut_short = one(server, requests=2)
    record = done.record
    assert (record.completion_tokens, record.streamed_tokens, record.first_chunk_tokens) == (9, 9, 3)
    assert record.tokens_counted_by == "usage" and record.timings.predicted_n == 9
    assert server.bodies[0]["timings_per_token"] is True
    record = cut_short.record
    assert record.error_kind == "disconnect" and record.completion_tokens is None
    assert (record.streamed_tokens, record.first_chunk_tokens, record.tokens_counted_by) == (9, 3, "per_chunk")
    assert record.partial_text is None


def test_events_framed_by_lf_crlf_and_cr_split_at_every_byte() -> None:
    for newline in (b"\n", b"\r\n", b"\r"):
        stream = b"data: a" + newline + b"data: b" + newline + newline + b"id: 1" + newline + newline
        stream += b"data:c" + newline + newline + b"data: [DONE]" + newline + newline
        splitter = EventSplitter()
        events = [event for i in range(len(stream)) for event in splitter.feed(stream[i : i + 1])]
        assert events + splitter.close() == [b"a\nb", b"c", b"[DONE]"], newline


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_streams_through_tls_and_the_shared_context_refuses_an_unknown_certificate(serve, tmp_path: Path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server_side = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_side.load_cert_chain(cert, key)
    server = serve(lambda n: (cut(head() + chunked([sse(GOOD)]), 8, n), False), tls=server_side)
    trusting = ssl.create_default_context(cafile=str(cert))
    with SSEClient(server.url, read_timeout=2.0, connect_timeout=2.0, ssl_context=trusting) as client:
        for _ in range(2):
            assert_good(stream_chat(client, payload(), META))
    assert server.connections == 1
    refused = one(server)[0].record  # make_client's context trusts the public CAs only
    assert refused.error_kind == "connect" and "CERTIFICATE_VERIFY_FAILED" in refused.error_message
