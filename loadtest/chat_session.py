"""The session a Locust user streams through, as Locust's ``FastHttpSession`` is a ``FastHttpUser``'s.

It owns the user's connections to the server, one lean SSE client each with one request at a
time on it (a closed-loop user needs one, the open-loop dispatcher as many as it has requests in
flight), and does, in one place for both kinds of user, what every request owes the run once it
ends: its record (and chunk times) written to the process's shard, the live per-step tally, and
one Locust request event. A request the harness stops mid-stream is written, ``interrupted``,
and adds nothing to the tallies. No Locust import: the event is fired on the user's environment.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.rundir import RequestRecord
from loadtest.lengths import RequestLengths
from loadtest.load_process import load_process
from loadtest.locust_options import LOCUST_REQUEST_NAME, LOCUST_REQUEST_TYPE
from loadtest.prompts import Prompt
from loadtest.sse_client import SSEClient
from loadtest.streaming import RequestMeta, StreamResult, build_payload, make_client, stream_chat
from loadtest.window_share import window_share

FAILURE_MESSAGE_CHARS = 200  # of a failed request's "<error_kind>: <message>" in Locust's statistics


class ChatSession:
    """One user's streamed chat completions against ``host``, each kept as the run needs it."""

    def __init__(self, environment: Any, host: str, replica: int | None = None):
        self.environment = environment
        self.host = host
        self.replica = replica
        self.process = load_process(environment)
        self.context = self.process.context(environment)
        self.request_options = self.context.request_options()
        self.idle: list[SSEClient] = []  # clients free for the next request
        self.closed = False

    def chat(self, prompt: Prompt, *, intended: float | None = None, slot: int | None = None,
             conversation: str | None = None, turn: int | None = None,
             lengths: RequestLengths | None = None) -> StreamResult:
        """Stream one reply to ``prompt`` (the run's document put ahead of it) and keep it.

        Without ``intended`` (a closed loop) the request goes now and belongs to the step and
        phase of its exact start; with it (an open loop's scheduled unix time) the request is
        built, sent at that time, and belongs to the step and phase it was meant to start in.
        ``slot``: the server slot it asks for (``--pin-slots``). ``conversation`` and ``turn``: the request
        is that turn of a conversation (``loadtest.sessions``), ``prompt`` its whole history (which holds the
        run's document already), and the reply's text comes back. ``lengths``: its drawn or traced
        prompt and reply lengths (``loadtest.lengths``: the prompt is cut to that many tokens, the reply
        asked for with ignore_eos; a trace row's conversation and turn name the record; a turn's prompt
        is its history, whose new message was cut already). Returns the
        kept record with what the answer said beyond it (a refusal's ``Retry-After``, for the user's backoff)."""
        context = self.context
        options = self.request_options
        if lengths is not None and conversation is None:
            prompt, options = context.lengths.apply(prompt, lengths, options)
        elif lengths is not None:  # a turn: its new message was cut before it joined the history (loadtest.users)
            options = context.lengths.reply_options(lengths, options)
        if conversation is None:
            prompt = prompt.with_context(context.context_text)
        if lengths is not None and lengths.conversation is not None:
            conversation, turn = lengths.conversation, lengths.turn
        payload = build_payload(list(prompt.messages), **options)
        if slot is not None:
            payload["id_slot"] = slot
        category = prompt.category
        meta = context.unplaced_meta(category) if intended is None else context.meta_for(intended, category)
        if lengths is not None and lengths.prompt_tokens is not None:  # the document's tokens it carries
            meta = dataclasses.replace(meta, context_tokens=meta.context_tokens + lengths.prompt_tokens)

        def keep_stopped(stopped: StreamResult) -> None:
            context.write(self._placed(stopped, meta, intended, conversation, turn), self.environment)

        client = self._client()
        self.process.in_flight += 1
        try:
            result = stream_chat(client, payload, meta, not_before=intended, on_abort=keep_stopped,
                                 keep_reply=conversation is not None)
        finally:
            self.process.in_flight -= 1
            self._release(client)
        result = self._placed(result, meta, intended, conversation, turn)
        context.write(result, self.environment)
        self.process.live.add(result.record)
        self._fire_request_event(result.record)
        return result

    def close(self) -> None:
        """Close every connection; a request still streaming closes its own as it ends."""
        self.closed = True
        for client in self.idle:
            client.close()
        self.idle.clear()

    def _client(self) -> SSEClient:
        if self.idle:
            return self.idle.pop()
        client = make_client(self.host, read_timeout=self.context.settings.read_timeout_seconds)
        self.process.stall_watch.watch(client)
        return client

    def _release(self, client: SSEClient) -> None:
        """Back to the idle ones: the client has already dropped a connection that the last answer
        left unusable, and opens a new one for the next request."""
        if self.closed:
            client.close()
        else:
            self.idle.append(client)

    def _placed(self, result: StreamResult, meta: RequestMeta, intended: float | None, conversation: str | None = None,
                turn: int | None = None) -> StreamResult:
        """The record in its step and phase, with its share of that step's measured window: by its
        scheduled start (kept as ``t_intended``), where ``meta`` was located before it was sent, or by
        its exact start, located now (the stream is what knows it)."""
        record = result.record
        if intended is not None:
            update: dict[str, Any] = {"t_intended": intended}
        else:
            meta = self.context.meta_for(record.t_start, meta.category)
            update = {"step": meta.step, "users": meta.users, "phase": meta.phase}
        if self.replica is not None:
            update["replica"] = self.replica
        if conversation is not None:
            update |= {"conversation": conversation, "turn": turn}
        if meta.window is not None:
            total = record.completion_tokens if record.completion_tokens is not None else record.streamed_tokens
            update["window_chunks"], update["window_tokens"] = window_share(
                result.chunk_times, result.chunk_counts, total, *meta.window)
        return dataclasses.replace(result, record=record.model_copy(update=update))

    def _fire_request_event(self, record: RequestRecord) -> None:
        """One Locust request per request: its whole time, and its output tokens as the "size"
        (the entry's name says so); TTFT and tok/s per step are in the web UI's rigbench tab."""
        failure = None
        if not record.ok:
            failure = Exception(f"{record.error_kind}: {record.error_message or ''}"[:FAILURE_MESSAGE_CHARS])
        self.environment.events.request.fire(
            request_type=LOCUST_REQUEST_TYPE,
            name=LOCUST_REQUEST_NAME,
            response_time=(record.t_end - record.t_start) * 1000.0,
            response_length=record.completion_tokens or 0,
            exception=failure,
            context={},
        )
