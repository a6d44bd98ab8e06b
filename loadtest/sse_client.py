"""A lean HTTP/1.1 client for one streamed POST at a time, on one keep-alive socket.

The load path spends its CPU per streamed chunk, and a general-purpose client (httpx over
httpcore and h11, then httpx-sse) costs several layers of objects and state checks per chunk.
This one does only what a streaming chat completion needs: the request bytes are built once
and written with one ``sendall``, the response head is parsed once, and the body is read with
one ``recv`` per arrival, de-chunked and cut into SSE events in place.

Blocking socket calls are used throughout: under Locust the sockets are gevent's (Locust
monkey-patches them), so every ``recv`` yields to the other users; elsewhere it is a plain
blocking call. The read timeout applies to each ``recv``: a stream that stalls longer than it
raises :class:`ReadTimedOut`, however long the whole stream runs. A socket timeout costs gevent a
timer per wait (a few µs per chunk); a client that a watchdog looks after (``watched``: the load
processes' ``loadtest.stall_watch``) waits without one, and the watchdog ends a wait that has
outlasted the read timeout (:meth:`SSEClient.abort_if_stalled`), with the same error.

Bodies framed by ``Content-Length``, by ``Transfer-Encoding: chunked`` or by the connection's
close are read; only the first two leave the connection reusable.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import ssl
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

RECV_SIZE = 65536
MAX_HEAD_BYTES = 65536


class TransportError(Exception):
    """Base of the failures below; ``responded`` says whether any response byte had arrived."""

    responded = False


class ConnectFailed(TransportError):
    """No connection (refused, unknown host, TLS handshake failed, or the connect timed out)."""


class ReadTimedOut(TransportError):
    """No byte arrived within the read timeout."""


class WriteTimedOut(TransportError):
    """The request could not be written within the timeout."""


class ConnectionLost(TransportError):
    """The connection closed or broke, or the server's bytes were not HTTP/1.1 as it frames them."""


class NotEventStream(TransportError):
    """A 200 answer that is not ``text/event-stream``."""

    responded = True


class Response:
    """A response head; its body is read through :meth:`SSEClient.iter_body`."""

    __slots__ = ("status", "headers", "length", "chunked", "keep_alive", "_rest")

    def __init__(self, status: int, headers: dict[str, str], rest: bytes, http10: bool):
        self.status = status
        self.headers = headers
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self.length = int(length) if length is not None and not self.chunked else None
        connection = headers.get("connection", "").lower()
        framed = self.chunked or self.length is not None
        self.keep_alive = framed and ("keep-alive" in connection if http10 else "close" not in connection)
        self._rest = rest


class SSEClient:
    """One simulated user's connection to one server: ``base_url`` is ``http://`` or ``https://``
    host[:port][/prefix]; requests go to the prefix plus their path."""

    def __init__(
        self,
        base_url: str,
        *,
        read_timeout: float = 60.0,
        connect_timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        parts = urlsplit(base_url)
        # a bad URL fails each request (the caller's client_error), as an httpx client's does, not the set-up
        self._unusable = None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            self._unusable = f"{base_url!r}: expected an http:// or https:// URL with a host"
        self.tls = parts.scheme == "https"
        self.host = parts.hostname or ""
        try:
            self.port = parts.port or (443 if self.tls else 80)
        except ValueError as error:
            self._unusable, self.port = f"{base_url!r}: {error}", 0
        self.prefix = parts.path.rstrip("/")
        self.read_timeout = read_timeout
        self.connect_timeout = connect_timeout
        self.ssl_context = ssl_context
        default_port = self.port == (443 if self.tls else 80)
        authority = self.host if default_port else f"{self.host}:{self.port}"
        if ":" in self.host:
            authority = f"[{self.host}]" if default_port else f"[{self.host}]:{self.port}"
        self._host_header = f"Host: {authority}\r\nUser-Agent: rigbench\r\n".encode("idna")
        self._sock: socket.socket | None = None
        self.reused = False  # whether the last request went out on a connection used before
        self.watched = False  # a watchdog enforces the read timeout (no socket timeout per wait)
        self.waiting_since: float | None = None  # monotonic time the current recv began waiting
        self.stalled = False

    def __enter__(self) -> SSEClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def request_bytes(self, method: str, path: str, body: bytes, headers: dict[str, str]) -> bytes:
        """The whole request, built before TTFT starts counting."""
        extra = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        return b"".join(
            (
                f"{method} {self.prefix}{path} HTTP/1.1\r\n".encode(),
                self._host_header,
                f"{extra}Content-Length: {len(body)}\r\n\r\n".encode("latin-1"),
                body,
            )
        )

    def send(self, request: bytes) -> None:
        """Write the request on the kept connection, or on a new one."""
        if self._unusable is not None:
            raise ValueError(self._unusable)
        self.reused = self._sock is not None
        if self._sock is None:
            self._sock = self._connect()
        sock = self._sock
        try:
            sock.settimeout(self.connect_timeout)
            sock.sendall(request)
            sock.settimeout(None if self.watched else self.read_timeout)
        except TimeoutError:
            self.close()
            raise WriteTimedOut("WriteTimeout") from None
        except OSError as error:
            self.close()
            raise ConnectionLost(f"could not write the request: {error}") from None

    def _connect(self) -> socket.socket:
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except TimeoutError as error:
            raise ConnectFailed(f"connect timed out: {error or 'no answer'}") from None
        except OSError as error:
            raise ConnectFailed(str(error) or type(error).__name__) from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls:
                context = self.ssl_context or ssl.create_default_context()
                sock = context.wrap_socket(sock, server_hostname=self.host)
        except (OSError, ssl.SSLError) as error:
            sock.close()
            raise ConnectFailed(f"TLS handshake failed: {error}") from None
        return sock

    def _recv(self, responded: bool) -> bytes:
        sock = self._sock
        if sock is None:
            raise ConnectionLost("the connection was closed")
        self.waiting_since = time.monotonic()
        try:
            data = sock.recv(RECV_SIZE)
        except TimeoutError:
            data = None
        except OSError as error:
            if not self.stalled:
                self.close()
                lost = ConnectionLost(f"connection broke: {error}")
                lost.responded = responded
                raise lost from None
            data = None
        finally:
            self.waiting_since = None
        if data is None or (self.stalled and not data):
            self.close()
            self.stalled = False
            timed_out = ReadTimedOut("ReadTimeout")
            timed_out.responded = responded
            raise timed_out
        return data

    def abort_if_stalled(self, now: float) -> bool:
        """End a wait for bytes that has lasted longer than the read timeout (the watchdog's
        call): the waiting ``recv`` then raises :class:`ReadTimedOut`, as with a socket timeout."""
        since, sock = self.waiting_since, self._sock
        if since is None or sock is None or now - since <= self.read_timeout:
            return False
        self.stalled = True
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        return True

    def read_head(self) -> Response:
        """The response's status line and headers (interim 1xx answers skipped)."""
        buffer = b""
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self.close()
                    raise self._lost("response head longer than 64 KiB", responded=True)
                data = self._recv(responded=bool(buffer))
                if not data:
                    self.close()
                    raise self._lost(
                        "server disconnected mid-way through the response head"
                        if buffer
                        else "server disconnected without sending a response",
                        responded=bool(buffer),
                    )
                buffer += data
                continue
            head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
            lines = head.split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                self.close()
                raise self._lost(f"not an HTTP/1.x status line: {lines[0][:80]!r}", responded=True)
            status = int(code)
            if 100 <= status < 200:
                continue
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                return Response(status, headers, buffer, version == "HTTP/1.0")
            except ValueError:
                self.close()
                raise self._lost(f"bad Content-Length: {headers.get('content-length')!r}", responded=True) from None

    @staticmethod
    def _lost(message: str, *, responded: bool) -> ConnectionLost:
        error = ConnectionLost(message)
        error.responded = responded
        return error

    def iter_body(self, response: Response) -> Iterator[bytes]:
        """The body's bytes, piece by piece as they arrive (chunk framing removed); at its end
        the connection is kept for the next request when the response allows it."""
        if response.chunked:
            yield from self._iter_chunked(response._rest)
        elif response.length is not None:
            yield from self._iter_length(response._rest, response.length)
        else:
            yield from self._iter_until_close(response._rest)
        if not response.keep_alive:
            self.close()

    def read_body(self, response: Response, limit: int = 1 << 20) -> bytes:
        """A whole (short) body, such as an error's."""
        parts: list[bytes] = []
        size = 0
        for piece in self.iter_body(response):
            parts.append(piece)
            size += len(piece)
            if size > limit:
                self.close()
                break
        return b"".join(parts)

    def _iter_length(self, rest: bytes, length: int) -> Iterator[bytes]:
        if len(rest) >= length:
            if length:
                yield rest[:length]
            return
        if rest:
            yield rest
        remaining = length - len(rest)
        recv = self._recv
        while remaining > 0:
            data = recv(True)
            if not data:
                self.close()
                raise self._lost(f"server disconnected with {remaining} body bytes still to come", responded=True)
            remaining -= len(data)
            yield data if remaining >= 0 else data[:remaining]

    def _iter_until_close(self, rest: bytes) -> Iterator[bytes]:
        if rest:
            yield rest
        while data := self._recv(True):
            yield data
        self.close()

    def _iter_chunked(self, buffer: bytes) -> Iterator[bytes]:
        """De-chunk as bytes arrive: a chunk's data is handed on as soon as any of it is here,
        so an event inside a large chunk is not held back until the whole chunk came."""
        recv = self._recv
        while True:
            line_end = buffer.find(b"\r\n")
            while line_end < 0:
                if len(buffer) > 4096:
                    raise self._bad_chunk(buffer)
                data = recv(True)
                if not data:
                    raise self._cut("a chunk size")
                buffer += data
                line_end = buffer.find(b"\r\n")
            try:
                size = int(buffer[:line_end].split(b";", 1)[0], 16)
            except ValueError:
                raise self._bad_chunk(buffer) from None
            if size == 0:
                self._read_trailers(buffer[line_end + 2 :])
                return
            start = line_end + 2
            end = start + size
            while len(buffer) < end:
                if len(buffer) > start:
                    yield buffer[start:]
                size = end - len(buffer)
                buffer = recv(True)
                if not buffer:
                    raise self._cut("a chunk's data")
                start, end = 0, size
            yield buffer[start:end]
            buffer = buffer[end:]
            while len(buffer) < 2:
                data = recv(True)
                if not data:
                    raise self._cut("a chunk's end")
                buffer += data
            if buffer[:2] != b"\r\n":
                raise self._bad_chunk(buffer)
            buffer = buffer[2:]

    def _read_trailers(self, buffer: bytes) -> None:
        while not (buffer.startswith(b"\r\n") or b"\r\n\r\n" in buffer):
            data = self._recv(True)
            if not data:
                raise self._cut("the last chunk's end")
            buffer += data

    def _cut(self, what: str) -> ConnectionLost:
        self.close()
        return self._lost(f"peer closed connection without sending complete message body: cut in {what}",
                          responded=True)

    def _bad_chunk(self, buffer: bytes) -> ConnectionLost:
        self.close()
        return self._lost(f"bad chunked framing near {bytes(buffer[:40])!r}", responded=True)


def iter_events(pieces: Iterator[bytes]) -> Iterator[bytes]:
    """SSE events cut from body pieces: each event's ``data`` (its ``data:`` lines joined by
    newlines; events without data are skipped). Events end on a blank line, written with LF,
    CRLF or CR line ends, and both events and line ends may be split anywhere across pieces."""
    buffer = b""
    for piece in itertools.chain(pieces, (None,)):
        if piece is None:  # the body's end: a CR held back is a line end after all
            if not buffer.endswith(b"\r"):
                break
            piece = b""
        buffer = buffer + piece if buffer else piece
        held = b""
        if b"\r" in buffer:
            if piece and buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"  # a CR whose LF may be in the next piece
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        start = 0
        end = buffer.find(b"\n\n")
        while end >= 0:
            if buffer.startswith(b"data: ", start) and buffer.find(b"\n", start, end) < 0:
                yield buffer[start + 6 : end]
            else:
                data = _event_data(buffer[start:end])
                if data is not None:
                    yield data
            start = end + 2
            end = buffer.find(b"\n\n", start)
        buffer = (buffer[start:] if start else buffer) + held
    # an event the body ended inside (no blank line after it) is dropped, as the SSE spec says


def _event_data(block: bytes) -> bytes | None:
    """The general case: several lines, comments, other fields, ``data:`` without a space."""
    data: list[bytes] = []
    for line in block.split(b"\n"):
        if line.startswith(b"data"):
            if line == b"data":
                data.append(b"")
            elif line[4:5] == b":":
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
    return b"\n".join(data) if data else None
