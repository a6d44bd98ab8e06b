"""Long contexts: the first D tokens of a long document, counted by the server itself.

The document is CPython's own ``pydoc_data/topics.py`` text (about a megabyte of English
prose and code that every Python install carries), repeated if D asks for more. The
prefix is cut with the served model's ``/tokenize`` and ``/detokenize``, then counted
again with ``/tokenize`` so the D in the records is exact for that model, not estimated.
"""

from __future__ import annotations

import functools
from pydoc_data.topics import topics

import httpx

from core.errors import LoadTestError


@functools.cache
def document_text() -> str:
    return "\n\n".join(topics[name] for name in sorted(topics))


def _tokenize(client: httpx.Client, text: str) -> list[int]:
    response = client.post("/tokenize", json={"content": text})
    if response.status_code != 200:
        raise LoadTestError(
            f"{client.base_url}/tokenize answered HTTP {response.status_code}; a long-context run needs "
            "llama-server's /tokenize to count tokens exactly"
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
