"""Count the tokens of requests cut mid-stream with the server's own ``/tokenize``, after the run.

A request cut before its final ``usage`` (still streaming when a window or the sweep ended, or
stopped by an error) has no token count from the server, and a server that packs several tokens
per chunk and streams no running count would have its tokens under-counted as chunks. Such a
record keeps its streamed text (``partial_text``); once the load is over, this asks the server
to tokenize it, which costs the server nothing while it is measured, and writes the counts to
``token_counts.jsonl`` beside the records (which stay as the client wrote them). A server
without ``/tokenize`` leaves those requests counted by chunks, and the manifest says how many.
"""

from __future__ import annotations

import json

import httpx

from core.rundir import RunDir, TokenCount
from core.wording import counted
from loadtest.http_errors import describe_http_error

TOKENIZE_PATH = "/tokenize"


def cut_texts(run: RunDir) -> dict[str, str]:
    """Request id -> streamed text of every record that still counts its tokens by chunks."""
    texts = {}
    for path in run.shard_paths():
        for _, line, _ in run.iter_record_lines(path):
            if '"partial_text"' not in line:
                continue  # most lines: no JSON decoding
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a truncated last line; `rigbench check` names it
            if record.get("tokens_counted_by") == "chunks" and record.get("partial_text"):
                texts[record["request_id"]] = record["partial_text"]
    return texts


def tokenize_count(client: httpx.Client, text: str) -> int:
    """Tokens in ``text`` by the server's tokenizer (no special tokens: they were not streamed)."""
    response = client.post(TOKENIZE_PATH, json={"content": text, "add_special": False})
    response.raise_for_status()
    tokens = response.json().get("tokens")
    if not isinstance(tokens, list):
        raise ValueError(f"{TOKENIZE_PATH} answered without a 'tokens' list")
    return len(tokens)


def count_cut_requests(run: RunDir, base_url: str, *, timeout: float = 10.0) -> str | None:
    """Write ``token_counts.jsonl`` for the run's cut requests; returns a warning for the
    manifest when some could not be counted, else None."""
    texts = cut_texts(run)
    if not texts:
        return None
    counts: list[TokenCount] = []
    problem = None
    with httpx.Client(base_url=base_url, timeout=timeout) as client:
        for request_id, text in texts.items():
            try:
                counts.append(TokenCount(request_id=request_id, streamed_tokens=tokenize_count(client, text)))
            except httpx.HTTPError as error:
                problem = describe_http_error(error)
                break
            except ValueError as error:
                problem = str(error)[:160]
                break
    if counts:
        run.write_token_counts(counts)
    if problem is None:
        return None
    return (
        f"{len(texts) - len(counts)} of {counted(len(texts), 'cut request')} could not be counted with the server's "
        f"{TOKENIZE_PATH} ({problem}): their tokens are counted as streamed chunks, which under-counts a "
        "server that packs several tokens per chunk"
    )
