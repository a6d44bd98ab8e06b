"""Long contexts: the first D tokens of a long document, counted by the server itself.

The document is CPython's own ``pydoc_data/topics.py`` text (about a megabyte of English
prose and code that every Python install carries), repeated if D asks for more. The
prefix is cut with the served model's ``/tokenize`` and ``/detokenize``, then counted
again with ``/tokenize`` so the D in the records is exact for that model, not estimated.

Drawn prompts (``loadtest.lengths``) need a prompt of any length, per request, without a
``/tokenize`` per request: ``DocumentTokens`` tokenizes the document once per load process with
its pieces (llama-server's ``with_pieces``) and cuts N consecutive pieces from any token
offset. Text cut at token edges tokenizes back to within a few tokens of N (a piece may merge
with its neighbour at the edges; the chat template adds its own tokens around it).
"""

from __future__ import annotations

import functools
from pydoc_data.topics import topics

import httpx
import numpy as np

from core.errors import LoadTestError


@functools.cache
def document_text() -> str:
    return "\n\n".join(topics[name] for name in sorted(topics))


def _tokenize(client: httpx.Client, text: str) -> list[int]:
    response = client.post("/tokenize", json={"content": text})
    if response.status_code != 200:
        raise LoadTestError(
            f"{client.base_url}/tokenize answered HTTP {response.status_code}; a run that cuts text by tokens (a "
            "long context, a system prompt, drawn prompt lengths) needs llama-server's /tokenize to count them exactly"
        )
    return list(response.json()["tokens"])


def _detokenize(client: httpx.Client, tokens: list[int]) -> str:
    response = client.post("/detokenize", json={"tokens": tokens})
    if response.status_code != 200:
        raise LoadTestError(f"{client.base_url}/detokenize answered HTTP {response.status_code}")
    return str(response.json()["content"])


def context_for_tokens(base_url: str, tokens: int, *, attempts: int = 4) -> tuple[str, int]:
    """(text, exact token count) for a prefix of about ``tokens`` tokens; ("", 0) for 0.

    Detokenised text does not always re-tokenise to the same count at the cut, so the cut
    is nudged a few times; the count returned is the server's for the text returned."""
    if tokens <= 0:
        return "", 0
    with httpx.Client(base_url=base_url, timeout=120) as client:
        document = document_text()
        # a generous prefix first (English runs ~4 characters a token), the whole text if short
        all_tokens = _tokenize(client, document[: tokens * 8])
        if len(all_tokens) < tokens:
            all_tokens = _tokenize(client, document)
        if not all_tokens:
            raise LoadTestError(f"{base_url}/tokenize returned no tokens for the context document")
        while len(all_tokens) < tokens:
            all_tokens = all_tokens + all_tokens
        cut = tokens
        text, count = "", 0
        for _ in range(attempts):
            text = _detokenize(client, all_tokens[:cut])
            count = len(_tokenize(client, text))
            if count == tokens:
                break
            cut += tokens - count
        return text, count


# Distinct places a drawn prompt may start at, beyond the longest prompt: prompts differ from their
# first token, so a server's prompt cache cannot answer one with another's prefix.
PROMPT_STARTS = 4096


class DocumentTokens:
    """The document as the served model's tokens: its text's bytes and where each token starts."""

    def __init__(self, text: bytes, starts: np.ndarray):
        self.text = text
        self.starts = starts  # one offset per token, then the end of the text

    @property
    def tokens(self) -> int:
        return len(self.starts) - 1

    def cut(self, tokens: int, at: float) -> str:
        """``tokens`` consecutive tokens' text, from the place ``at`` (a share in [0, 1)) of the
        places such a cut fits in; a byte sequence split at either edge is dropped."""
        if not 1 <= tokens <= self.tokens:
            raise LoadTestError(f"a prompt of {tokens} tokens: the tokenized document holds 1 to {self.tokens}")
        first = min(int(at * (self.tokens - tokens + 1)), self.tokens - tokens)
        return self.text[self.starts[first]: self.starts[first + tokens]].decode("utf-8", "ignore")


def _tokenize_pieces(client: httpx.Client, text: str) -> list[bytes]:
    response = client.post("/tokenize", json={"content": text, "with_pieces": True})
    if response.status_code != 200:
        raise LoadTestError(
            f"{client.base_url}/tokenize answered HTTP {response.status_code}; drawn prompt lengths need "
            "llama-server's /tokenize to cut prompts by the served model's tokens"
        )
    pieces = response.json().get("tokens") or []
    if not all(isinstance(token, dict) and "piece" in token for token in pieces):
        raise LoadTestError(f"{client.base_url}/tokenize gave no pieces (with_pieces); drawn prompt lengths need "
                            "a llama-server that returns each token's text")
    # a piece that is not whole UTF-8 comes as its bytes' values
    return [token["piece"].encode() if isinstance(token["piece"], str) else bytes(token["piece"])
            for token in pieces]


def document_tokens(base_url: str, longest: int) -> DocumentTokens:
    """The document tokenized once, with room for a prompt of ``longest`` tokens from any of
    ``PROMPT_STARTS`` places (the document repeats where it is shorter)."""
    wanted = longest + PROMPT_STARTS
    with httpx.Client(base_url=base_url, timeout=120) as client:
        document = document_text()
        pieces = _tokenize_pieces(client, document[: wanted * 8])
        if len(pieces) < wanted:
            pieces = _tokenize_pieces(client, document)
    if not pieces:
        raise LoadTestError(f"{base_url}/tokenize returned no tokens for the prompt document")
    pieces = pieces * -(-wanted // len(pieces))
    starts = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(piece) for piece in pieces], out=starts[1:])
    return DocumentTokens(b"".join(pieces), starts)
