"""A lean HTTP/1.1 client for one streamed POST at a time, on one keep-alive socket.

The load path spends its CPU per streamed chunk, and a general-purpose client (httpx over
httpcore and h11, then httpx-sse) costs several layers of objects and state checks per chunk.
This one does only what a streaming chat completion needs: the request bytes are built once
and written with one ``sendall``, and every byte that arrives is pushed through one parser
(:class:`ResponseParser`: status line and headers, chunked or sized framing, SSE events), which
hands each event to the caller with the time its bytes arrived.

Two ways to wait for bytes, one parser:

* **blocking** ``recv`` calls. Under Locust the sockets are gevent's (Locust monkey-patches
  them), so every ``recv`` yields to the other users; elsewhere it is a plain blocking call. The
  read timeout applies to each ``recv``: a stream that stalls longer than it raises
  :class:`ReadTimedOut`, however long the whole stream runs.
* **in the event loop** (a ``watched`` client on plain HTTP, under gevent): the socket's
  readiness runs the parser as a callback in gevent's hub, and the user's greenlet sleeps until
  the response is complete. Why: a greenlet that ``recv``s pays, per chunk, a switch into it and
  back, a timer-less wait object and a second ``recv`` that finds nothing; a callback pays one
  ``recv``. That is over a third of the load process's CPU per chunk at hundreds of streams.
  A watched client has no socket timeout (it would cost a timer per wait): the process's
  watchdog (``loadtest.stall_watch``) ends a wait that has outlasted the read timeout
  (:meth:`SSEClient.abort_if_stalled`), with the same error. TLS connections always block
  (readiness of the socket is not readiness of decrypted bytes).

Bodies framed by ``Content-Length``, by ``Transfer-Encoding: chunked`` or by the connection's
close are read; only the first two leave the connection reusable.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import time
from collections.abc import Callable
from urllib.parse import urlsplit

RECV_SIZE = 65536
MAX_HEAD_BYTES = 65536
MAX_BODY_BYTES = 1 << 20  # a non-event body (an error's) is kept up to this, then the connection is dropped

OnEvent = Callable[[bytes, float], None]  # an event's data and the unix time its last bytes arrived


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
    """A response head, parsed from the status line and headers."""

    __slots__ = ("status", "headers", "length", "chunked", "keep_alive", "event_stream")

    def __init__(self, status: int, headers: dict[str, str], http10: bool):
        self.status = status
        self.headers = headers
        self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        self.length = int(length) if length is not None and not self.chunked else None
        connection = headers.get("connection", "").lower()
        framed = self.chunked or self.length is not None
        self.keep_alive = framed and ("keep-alive" in connection if http10 else "close" not in connection)
        self.event_stream = "text/event-stream" in headers.get("content-type", "")


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
        # a bad URL fails each request (the caller's client_error), not the set-up: every record then says why
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
            raise WriteTimedOut(f"the request was not written within {self.connect_timeout:g} s") from None
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

    def read_response(self, parser: ResponseParser) -> None:
        """Read the answer to the request just sent into ``parser``, to its end (the parser is the
        caller's, so what arrived before a failure is still on it). The connection is kept for
        the next request only when the answer was whole and allows it."""
        try:
            if self.watched and not self.tls:
                self._read_in_event_loop(parser)
            else:
                self._read_blocking(parser)
        except BaseException:
            self.close()  # the response was left part-read: its connection cannot carry the next request
            raise
        if not parser.reusable:
            self.close()

    def _read_blocking(self, parser: ResponseParser) -> None:
        sock = self._connected()
        clock = time.time
        while not parser.done:
            self.waiting_since = time.monotonic()
            try:
                data = sock.recv(RECV_SIZE)
            except TimeoutError:
                raise self._timed_out(parser.responded) from None
            except OSError as error:
                raise self._broken(error, parser.responded) from None
            finally:
                self.waiting_since = None
            if self.stalled and not data:
                raise self._timed_out(parser.responded)
            if data:
                parser.feed(data, clock())
            else:
                parser.feed_eof(clock())

    def _read_in_event_loop(self, parser: ResponseParser) -> None:
        """The parser runs as the socket's readiness callback in gevent's hub; this greenlet
        sleeps until the response is complete or failed (see the module's docstring for why)."""
        # gevent is loaded here only: outside Locust (a pre-flight check, a test) the client blocks and
        # the caller's process must stay free of gevent; a watched client exists only under Locust
        from gevent import get_hub
        from gevent.hub import Waiter

        sock = self._connected()
        sock.setblocking(False)
        hub = get_hub()
        waiter = Waiter(hub)
        watcher = hub.loop.io(sock.fileno(), 1)
        recv, clock, monotonic = sock.recv, time.time, time.monotonic

        def readable() -> None:
            try:
                try:
                    data = recv(RECV_SIZE)
                except BlockingIOError:
                    return
                except OSError as error:
                    raise self._broken(error, parser.responded) from None
                if self.stalled and not data:
                    raise self._timed_out(parser.responded)
                self.waiting_since = monotonic()
                if data:
                    parser.feed(data, clock())
                else:
                    parser.feed_eof(clock())
                if parser.done:
                    watcher.stop()
                    waiter.switch(None)
            except Exception as error:  # noqa: BLE001 - handed to the waiting greenlet, which raises it
                watcher.stop()
                waiter.switch(error)

        self.waiting_since = monotonic()
        watcher.start(readable)
        try:
            failure = waiter.get()
        finally:
            watcher.stop()
            watcher.close()
            self.waiting_since = None
        if failure is not None:
            raise failure

    def _connected(self) -> socket.socket:
        if self._sock is None:
            raise ConnectionLost("the connection was closed")
        return self._sock

    def _timed_out(self, responded: bool) -> ReadTimedOut:
        self.stalled = False
        timed_out = ReadTimedOut(f"no byte arrived within {self.read_timeout:g} s")
        timed_out.responded = responded
        return timed_out

    def _broken(self, error: OSError, responded: bool) -> TransportError:
        if self.stalled:  # the watchdog shut the socket down
            return self._timed_out(responded)
        return _lost(f"connection broke: {error}", responded=responded)


def _lost(message: str, *, responded: bool) -> ConnectionLost:
    error = ConnectionLost(message)
    error.responded = responded
    return error


class EventSplitter:
    """SSE events cut from body pieces pushed in as they arrive: each event's ``data`` (its
    ``data:`` lines joined by newlines; events without data are skipped). Events end on a blank
    line, written with LF, CRLF or CR line ends, and both events and line ends may be split
    anywhere across pieces."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, piece: bytes) -> list[bytes]:
        buffer = self._buffer + piece if self._buffer else piece
        held = b""
        if b"\r" in buffer:
            if buffer.endswith(b"\r"):
                buffer, held = buffer[:-1], b"\r"  # a CR whose LF may be in the next piece
            buffer = buffer.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        events: list[bytes] = []
        start = 0
        end = buffer.find(b"\n\n")
        while end >= 0:
            if buffer.startswith(b"data: ", start) and buffer.find(b"\n", start, end) < 0:
                events.append(buffer[start + 6 : end])
            else:
                data = _event_data(buffer[start:end])
                if data is not None:
                    events.append(data)
            start = end + 2
            end = buffer.find(b"\n\n", start)
        self._buffer = (buffer[start:] if start else buffer) + held
        return events

    def close(self) -> list[bytes]:
        """The body's end: a CR held back was a line end after all. An event the body ended
        inside (no blank line after it) is dropped, as the SSE spec says."""
        if not self._buffer.endswith(b"\r"):
            return []
        buffer, self._buffer = self._buffer[:-1] + b"\n", b""
        return self.feed(buffer)


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


_HEAD, _SIZE, _DATA, _CRLF, _TRAILERS, _SIZED, _UNTIL_CLOSE, _DONE = range(8)


class ResponseParser:
    """One response, parsed from the bytes pushed into :meth:`feed` as they arrive.

    A ``200 text/event-stream`` body goes out as SSE events to ``on_event``, each as soon as its
    bytes are here (a chunk's data is not held back until the whole chunk came); any other body
    is kept in :attr:`body` (up to ``MAX_BODY_BYTES``). A ``200`` that is not an event stream
    raises :class:`NotEventStream`; bytes that are not HTTP/1.1 as the head frames them raise
    :class:`ConnectionLost`. :attr:`done` once the body is complete; :attr:`reusable` whether
    the connection may carry the next request."""

    __slots__ = ("on_event", "response", "done", "reusable", "responded", "body", "_buffer", "_state",
                 "_remaining", "_events", "_body_size")

    def __init__(self, on_event: OnEvent):
        self.on_event = on_event
        self.response: Response | None = None
        self.done = False
        self.reusable = False
        self.responded = False  # whether any byte of the response had arrived
        self.body: list[bytes] = []
        self._buffer = b""
        self._state = _HEAD
        self._remaining = 0
        self._events: EventSplitter | None = None
        self._body_size = 0

    def feed(self, data: bytes, arrived: float) -> None:
        self.responded = True
        buffer = self._buffer + data if self._buffer else data
        self._buffer = b""
        if self._state == _HEAD:
            buffer = self._head(buffer)
            if buffer is None or self.done:
                return
        pieces: list[bytes] = []
        state, remaining, position, size = self._state, self._remaining, 0, len(buffer)
        while position < size and state != _DONE:
            if state in (_DATA, _SIZED):
                take = min(remaining, size - position)
                pieces.append(buffer[position : position + take])
                position += take
                remaining -= take
                if not remaining:
                    state = _CRLF if state == _DATA else _DONE
            elif state == _SIZE:
                line_end = buffer.find(b"\r\n", position)
                if line_end < 0:
                    if size - position > 4096:
                        raise self._bad_chunk(buffer[position:])
                    break
                try:
                    remaining = int(buffer[position:line_end].split(b";", 1)[0], 16)
                except ValueError:
                    raise self._bad_chunk(buffer[position:]) from None
                position = line_end + 2
                state = _DATA if remaining else _TRAILERS
            elif state == _CRLF:
                if size - position < 2:
                    break
                if buffer[position : position + 2] != b"\r\n":
                    raise self._bad_chunk(buffer[position:])
                position += 2
                state = _SIZE
            elif state == _TRAILERS:
                rest = buffer[position:]
                if not (rest.startswith(b"\r\n") or b"\r\n\r\n" in rest):
                    break
                position, state = size, _DONE
            else:  # _UNTIL_CLOSE
                pieces.append(buffer[position:])
                position = size
        self._state, self._remaining = state, remaining
        if position < size and state != _DONE:
            self._buffer = buffer[position:]
        if pieces:
            self._deliver(pieces[0] if len(pieces) == 1 else b"".join(pieces), arrived)
        if state == _DONE:
            self._finish(arrived)

    def feed_eof(self, arrived: float) -> None:
        """The connection closed: the end of a body framed by the close, else a cut response."""
        if self._state == _UNTIL_CLOSE:
            self._finish(arrived)
            return
        if self._state == _HEAD:
            raise _lost("the server closed the connection inside the response head" if self.responded
                        else "the server closed the connection without answering", responded=self.responded)
        if self._state == _SIZED:
            raise _lost(f"the server closed the connection with {self._remaining} body bytes still to come",
                        responded=True)
        where = {_SIZE: "a chunk size", _DATA: "a chunk's data", _CRLF: "a chunk's end",
                 _TRAILERS: "the last chunk's end"}[self._state]
        raise _lost(f"the server closed the connection before the chunked body's end (cut in {where})",
                    responded=True)

    def _head(self, buffer: bytes) -> bytes | None:
        """Parse the head (interim 1xx answers skipped); the bytes after it, or None for more."""
        while True:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise _lost("response head longer than 64 KiB", responded=True)
                self._buffer = buffer
                return None
            head, buffer = buffer[:end].decode("latin-1"), buffer[end + 4 :]
            lines = head.split("\r\n")
            version, _, rest = lines[0].partition(" ")
            code = rest[:3]
            if not version.startswith("HTTP/1.") or not code.isdigit():
                raise _lost(f"not an HTTP/1.x status line: {lines[0][:80]!r}", responded=True)
            status = int(code)
            if 100 <= status < 200:
                continue
            headers = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            try:
                response = Response(status, headers, version == "HTTP/1.0")
            except ValueError:
                raise _lost(f"bad Content-Length: {headers.get('content-length')!r}", responded=True) from None
            if status == 200 and not response.event_stream:
                raise NotEventStream(f"the 200 answer is {headers.get('content-type', '')!r}, not text/event-stream")
            self.response = response
            if status == 200:
                self._events = EventSplitter()
            if response.chunked:
                self._state = _SIZE
            elif response.length is not None:
                self._state, self._remaining = (_SIZED, response.length) if response.length else (_DONE, 0)
            else:
                self._state = _UNTIL_CLOSE
            if self._state == _DONE:
                self._finish(0.0)
            return buffer

    def _deliver(self, piece: bytes, arrived: float) -> None:
        events = self._events
        if events is None:
            self._body_size += len(piece)
            if self._body_size > MAX_BODY_BYTES:
                self._state, self.done = _DONE, True  # enough of an error's body: the connection is dropped
                return
            self.body.append(piece)
            return
        on_event = self.on_event
        for data in events.feed(piece):
            on_event(data, arrived)

    def _finish(self, arrived: float) -> None:
        if self._events is not None:
            for data in self._events.close():
                self.on_event(data, arrived)
        self.done = True
        self.reusable = self._state == _DONE and self.response is not None and self.response.keep_alive \
            and self._body_size <= MAX_BODY_BYTES
        self._state = _DONE

    @staticmethod
    def _bad_chunk(buffer: bytes) -> ConnectionLost:
        return _lost(f"bad chunked framing near {bytes(buffer[:40])!r}", responded=True)
