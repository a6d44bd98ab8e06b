"""Each request's prompt and reply lengths: drawn from the run's distributions, or a trace row's.

One fixed prompt and reply length hides what a real service's long tail does to the batch: a
few long prompts stall every stream sharing the server while they are read, a few long replies
hold slots. ``--prompt-length`` and ``--output-length`` draw each request's token counts from
a ``LengthDistribution`` (fixed, uniform, normal, or lognormal = median x exp(sigma x N(0, 1))),
rounded to whole tokens and clipped to its [minimum, maximum].

Draws are reproducible and do not depend on ``--processes``: each request's draw is seeded by
the run's ``workload_seed`` and a key that names the request whichever process sends it (a
closed-loop user's run-wide number and its count of requests sent, or an open-loop arrival's
number), not by a stream shared in a process.

A reply of N tokens is asked for as ``max_tokens`` N with ``ignore_eos``, so the server makes
exactly N. A prompt of N tokens is N consecutive tokens of one document cut by the served
model's own tokens (``loadtest.long_context.DocumentTokens``: the document is tokenized once
per load process), from a drawn place, so prompts differ from their first token. The server's
``usage.prompt_tokens`` says what it read: N and the chat template's tokens, and at most a token
or two where a piece merges at the cut's edges. The record keeps N in ``context_tokens`` (the
document's tokens the request carried, with ``--context-tokens``' document ahead of it if any)
and the server's count in ``prompt_tokens``. Turns of one trace conversation start at the same
place, so a later, longer turn begins with an earlier turn's prompt, as a resent history does. A
``--sessions`` turn cuts only its new message (``cut_prompt``) and its record counts only that one
(and the ``--context-tokens`` document): the earlier turns' messages are in its history, in
``prompt_tokens``.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from core.rundir import LoadSettings
from core.rundir.models import LengthDistribution, TraceSource
from loadtest.long_context import DocumentTokens, document_tokens
from loadtest.prompts import Prompt
from loadtest.trace import TraceRow, trace_rows

# A request's key, before its own numbers: the two kinds of load never share a draw.
CLOSED_LOOP_KEY = 0
OPEN_LOOP_KEY = 1
CONVERSATION_KEY = 2  # a trace conversation's place in the document
# Another use of the workload seed (sessions' turns and think times) draws from other streams.
LENGTH_STREAM = 0x4C454E  # "LEN"
DRAWN_CATEGORY = "drawn"  # the category of a prompt cut to a drawn length
TRACE_CATEGORY = "trace"  # the category of a trace row's prompt


@dataclass(frozen=True)
class RequestLengths:
    """What one request asks for beyond its prompt set's prompt."""

    prompt_tokens: int | None = None  # a prompt cut to this many tokens (None: the prompt set's prompt)
    output_tokens: int | None = None  # max_tokens with ignore_eos (None: the run's max_tokens)
    at: float = 0.0  # where in the document the prompt is cut, as a share of the places it fits
    conversation: str | None = None  # a trace row's conversation and turn, copied into its record
    turn: int | None = None


def draw_length(distribution: LengthDistribution, rng: np.random.Generator) -> int:
    """One token count from ``distribution``, rounded and clipped to its bounds."""
    low, high = distribution.minimum, distribution.maximum
    if distribution.kind == "fixed":
        value = float(distribution.value or low)
    elif distribution.kind == "uniform":
        return int(rng.integers(low, high + 1))
    elif distribution.kind == "normal":
        value = rng.normal(distribution.mean or 0.0, distribution.sd or 0.0)
    else:
        value = (distribution.median or 1.0) * float(np.exp((distribution.sigma or 0.0) * rng.standard_normal()))
    return int(min(max(round(value), low), high))


def draw_lengths(prompt: LengthDistribution | None, output: LengthDistribution | None, seed: int,
                 key: tuple[int, ...]) -> RequestLengths:
    """The lengths of the request named by ``key``, the same in every process and every run of the seed."""
    rng = np.random.default_rng([seed % 2**64, LENGTH_STREAM, *key])
    prompt_tokens = draw_length(prompt, rng) if prompt is not None else None
    output_tokens = draw_length(output, rng) if output is not None else None
    return RequestLengths(prompt_tokens, output_tokens, float(rng.random()))


def conversation_place(seed: int, conversation: str) -> float:
    """Where a trace conversation's prompts are cut: one place for all its turns."""
    key = (CONVERSATION_KEY, zlib.crc32(conversation.encode()))
    return float(np.random.default_rng([seed % 2**64, LENGTH_STREAM, *key]).random())


def row_lengths(row: TraceRow, seed: int, number: int, repeat: int) -> RequestLengths:
    """A trace row's lengths; ``repeat`` (the trace's pass, from 0) tells a repeated conversation
    from the first pass's (``c7`` again is ``c7#2``)."""
    conversation = row.conversation
    if conversation is not None and repeat:
        conversation = f"{conversation}#{repeat + 1}"
    if conversation is not None:
        at = conversation_place(seed, conversation)
    else:
        at = float(np.random.default_rng([seed % 2**64, LENGTH_STREAM, OPEN_LOOP_KEY, number]).random())
    return RequestLengths(row.prompt_tokens, row.output_tokens, at, conversation, row.turn)


def longest_request(trace: TraceSource | None, prompt_length: LengthDistribution | None,
                    output_length: LengthDistribution | None) -> tuple[int, int | None]:
    """(the most tokens a drawn or traced prompt may hold, 0 where the prompt set's prompts are sent; the
    longest drawn or traced reply, None where replies run to max_tokens)."""
    if trace is not None:
        rows = trace_rows(trace)
        return max(row.prompt_tokens for row in rows), max(row.output_tokens for row in rows)
    return (prompt_length.maximum if prompt_length is not None else 0,
            output_length.maximum if output_length is not None else None)


def longest_prompt(settings: LoadSettings) -> int:
    """The most tokens a drawn or traced prompt may hold (0: the prompt set's prompts are sent)."""
    return longest_request(settings.trace, settings.prompt_length, settings.output_length)[0]


class WorkloadLengths:
    """One load process's lengths: the draws (or the trace's rows) and the document prompts are cut from."""

    def __init__(self, settings: LoadSettings, document: DocumentTokens | None = None):
        self.settings = settings
        self.rows = trace_rows(settings.trace) if settings.trace is not None else ()
        self.document = document  # what prompts are cut from (None: no prompt is cut)

    @classmethod
    def served(cls, settings: LoadSettings, host: str) -> WorkloadLengths:
        """The lengths, with the document tokenized by the server at ``host`` where prompts are cut."""
        longest = longest_prompt(settings)
        return cls(settings, document_tokens(host, longest) if longest else None)

    @property
    def active(self) -> bool:
        settings = self.settings
        return bool(self.rows) or settings.prompt_length is not None or settings.output_length is not None

    def for_user(self, user: int) -> Iterator[RequestLengths | None]:
        """A closed-loop user's lengths, request after request (``user``: its number in the run)."""
        if not self.active:
            return itertools.repeat(None)
        settings = self.settings
        return (draw_lengths(settings.prompt_length, settings.output_length, settings.workload_seed,
                             (CLOSED_LOOP_KEY, user, sent)) for sent in itertools.count())

    def for_arrival(self, number: int) -> RequestLengths | None:
        """Open-loop arrival ``number``'s lengths: a trace's row (it repeats past its end), or drawn."""
        settings = self.settings
        if self.rows:
            repeat, index = divmod(number, len(self.rows))
            return row_lengths(self.rows[index], settings.workload_seed, number, repeat)
        if not self.active:
            return None
        return draw_lengths(settings.prompt_length, settings.output_length, settings.workload_seed,
                            (OPEN_LOOP_KEY, number))

    def apply(self, prompt: Prompt, lengths: RequestLengths, options: dict[str, Any]) -> tuple[Prompt, dict[str, Any]]:
        """The prompt and ``build_payload`` options a request with ``lengths`` is sent with."""
        return self.cut_prompt(prompt, lengths), self.reply_options(lengths, options)

    def cut_prompt(self, prompt: Prompt, lengths: RequestLengths) -> Prompt:
        """The prompt cut to ``lengths.prompt_tokens`` of the document (``prompt`` itself where none is drawn).
        A conversation's turn cuts only its new message, before it joins the history it resends."""
        if lengths.prompt_tokens is None:
            return prompt
        if self.document is None:
            raise ValueError("a drawn prompt length without the tokenized document")
        text = self.document.cut(lengths.prompt_tokens, lengths.at)
        category = TRACE_CATEGORY if self.rows else DRAWN_CATEGORY
        return Prompt(category, ({"role": "user", "content": text},))

    @staticmethod
    def reply_options(lengths: RequestLengths, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` asking for exactly ``lengths.output_tokens`` (max_tokens with ignore_eos), where drawn."""
        if lengths.output_tokens is None:
            return options
        return {**options, "max_tokens": lengths.output_tokens, "ignore_eos": True}
