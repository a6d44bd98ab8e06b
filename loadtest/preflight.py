"""Before any load: is the URL a server's root, and does that server stream a chat reply?

Why: a sweep against the wrong place still "runs". A URL without a scheme made every request
fail inside the client; a URL with an API path gave hundreds of 404s; nothing listening gave
thousands of refused connections a second. Each of those ends here, in one line that names
the URL, what answered and the fix, before a run folder exists.

The check is two requests: ``GET /health`` (llama-server; ``GET /v1/models`` for other
OpenAI-compatible servers) and one streamed chat completion of a token or two, sent through
the very code the load uses (:func:`loadtest.streaming.stream_chat`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import httpx

from core.errors import LoadTestError, UsageError
from core.rundir import RequestRecord
from loadtest.error_watch import fix_for
from loadtest.http_errors import describe_http_error
from loadtest.long_context import context_for_tokens, document_tokens
from loadtest.model_list import MODELS_PATH, ModelList
from loadtest.path_answer import CONNECT_FIX, ask_path
from loadtest.streaming import CHAT_PATH, RequestMeta, build_payload, make_client, server_words, stream_chat

HEALTH_TIMEOUT_S = 5.0
REPLY_TIMEOUT_S = 60.0
HOST = re.compile(r"[A-Za-z0-9._:-]+")  # a name, an IPv4 address or an IPv6 address (brackets removed)
HOST_AND_PORT = re.compile(r"[A-Za-z0-9._-]+(:[0-9]+)?")
PROBE_META = RequestMeta(shard="preflight", step=0, users=1, phase="warmup", category="preflight")

# Before the load, what to do differs from a failure mid-sweep (loadtest.error_watch) for these kinds.
FIXES = {
    "connect": CONNECT_FIX,
    "timeout": "the server accepted the request but sent nothing in time; check its log (stuck, or still loading?)",
    "server_error": "the server gave up on a two-token reply; check its log",
    "client_error": "this is a bug in rigbench's client; please report it with this line",
}


def check_url(text: str, option: str = "--url") -> str:
    """The server's root URL, ``http(s)://host[:port]``, without a trailing slash; anything else
    is refused with the URL that was probably meant."""
    given = text.strip()
    if "://" not in given:
        example = f"http://{given}" if HOST_AND_PORT.fullmatch(given) else "http://127.0.0.1:8080"
        raise UsageError(f"{option}: {text!r} has no scheme; expected http://HOST:PORT, e.g. {example}")
    parts = urlsplit(given)
    if parts.scheme not in ("http", "https"):
        raise UsageError(f"{option}: {text!r} is not an http:// or https:// URL; expected http://HOST:PORT")
    try:
        parts.port  # noqa: B018 - raises on a port that is not a number
    except ValueError:
        raise UsageError(f"{option}: {text!r} has a port that is not a number from 0 to 65535") from None
    if not parts.hostname or not HOST.fullmatch(parts.hostname):
        raise UsageError(f"{option}: {text!r} names no host rigbench can reach; expected http://HOST:PORT, e.g. http://127.0.0.1:8080")
    root = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
    extra = parts.path.rstrip("/") + (f"?{parts.query}" if parts.query else "") + (
        f"#{parts.fragment}" if parts.fragment else "")
    if extra:
        raise UsageError(
            f"{option}: {text!r} has an API path ({extra}); give the server's root, {root}, and rigbench adds the paths"
        )
    return root


def check_health(url: str, timeout: float = HEALTH_TIMEOUT_S, models: ModelList | None = None) -> str:
    """``/health`` (or ``/v1/models``) answers 200; returns which one did. ``models``: the server's
    ``/v1/models`` as already read, so that a server without ``/health`` is not asked for it again."""
    for path in ("/health", MODELS_PATH):
        answer = models.answer if models is not None and path == MODELS_PATH else ask_path(url, path, timeout)
        if answer.failure is not None:
            raise LoadTestError(answer.failure)
        if answer.status == 200:
            return path
        if answer.status == 503:
            raise LoadTestError(
                f"{url}{path} answers 503 ({server_words(answer.text) or 'no reason given'}): the server is still "
                "loading its model; wait until it answers 200, then run again"
            )
        if answer.status == 400 and url.startswith("http://") and "https" in answer.text.lower():
            raise LoadTestError(
                f"{url}{path} answers 400 ({answer.text.strip()[:120]}): the server speaks TLS; use "
                f"https://{url.removeprefix('http://')}"
            )
        if answer.status != 404:
            words = server_words(answer.text)
            raise LoadTestError(f"{url}{path} answers HTTP {answer.status}" + (f": {words}" if words else ""))
    raise LoadTestError(
        f"{url}: /health and /v1/models both answer 404, so this is not the root of an OpenAI-compatible "
        "server; check the URL (no API path) and the port"
    )


def probe_reply(url: str, prompt: str, model_name: str, *, max_tokens: int, ignore_eos: bool,
                timeout: float) -> RequestRecord:
    """One streamed reply at temperature 0, on a client of its own, as the load would send it."""
    payload = build_payload(
        [{"role": "user", "content": prompt}],
        model=model_name,
        max_tokens=max_tokens,
        temperature=0.0,
        cache_prompt=False,
        ignore_eos=ignore_eos,
    )
    with make_client(url, read_timeout=timeout, connect_timeout=HEALTH_TIMEOUT_S) as client:
        return stream_chat(client, payload, PROBE_META).record


def check_reply(url: str, model_name: str = "default", timeout: float = REPLY_TIMEOUT_S) -> None:
    """One streamed chat completion of two tokens comes back whole within ``timeout`` seconds."""
    record = probe_reply(url, "Say OK.", model_name, max_tokens=2, ignore_eos=False, timeout=timeout)
    if record.ok:
        return
    kind = record.error_kind or "unknown"
    detail = f" ({record.error_message})" if record.error_message else ""
    if kind.startswith("http_"):
        code = kind.removeprefix("http_")
        fix = (
            "the server has no OpenAI chat endpoint at this root; check the URL and the server"
            if code == "404"
            else "check the server's log"
        )
        raise LoadTestError(f"{url}{CHAT_PATH} answers HTTP {code}{detail}: {fix}")
    if kind == "bad_model":
        raise LoadTestError(f"{url}{CHAT_PATH} refused the model name {model_name!r}{detail}: {fix_for(kind)}")
    fix = FIXES.get(kind) or fix_for(kind)
    raise LoadTestError(f"{url}{CHAT_PATH}: a two-token streamed reply failed: {kind}{detail}; {fix}")


def check_context(url: str, tokens: int, option: str = "--context-tokens") -> None:
    """A sweep that puts a text of so many tokens ahead of its prompts (a long context, a system prompt)
    needs a server that counts tokens (``/tokenize``, ``/detokenize``): the text is cut with them, so
    without them every user would fail on its first request."""
    _check_cut(lambda: context_for_tokens(url, tokens), url, f"{option} {tokens}", "/tokenize")


def check_prompt_cuts(url: str, tokens: int, option: str) -> None:
    """Drawn or traced prompt lengths are cut from a document by the server's tokens (``/tokenize``
    with pieces): a server that cannot is said before any run exists."""
    _check_cut(lambda: document_tokens(url, tokens), url, option, "/tokenize with pieces")


def _check_cut(cut: Callable[[], object], url: str, asked: str, needs: str) -> None:
    """Run ``cut`` (text cut by the server's tokens); a failure is one line naming what asked for it."""
    try:
        cut()
    except httpx.HTTPError as error:
        raise LoadTestError(f"{url}: {asked} needs {needs}, which failed: {describe_http_error(error)}") from None
    except LoadTestError as error:
        raise LoadTestError(f"{asked}: {error}") from None


def preflight(url: str, model_name: str = "default") -> str:
    """Check the URL and the server before a run exists; returns the normalised root URL."""
    root = check_url(url)
    check_health(root)
    check_reply(root, model_name)
    return root


def probe_decode_rate(
    url: str, model_name: str = "default", tokens: int = 32, timeout: float = REPLY_TIMEOUT_S
) -> float:
    """One user's decode tok/s, from one streamed reply of ``tokens``: the most a user can ask of
    a load process (batched users each decode slower), so users x this bounds a step's demand."""
    record = probe_reply(url, "Count from one upwards.", model_name, max_tokens=tokens, ignore_eos=True,
                         timeout=timeout)
    count = record.completion_tokens or record.streamed_tokens or record.content_chunks
    first = record.first_chunk_tokens or 1
    if not record.ok or record.t_first_token is None or record.t_last_token is None or count <= first:
        raise LoadTestError(f"{url}{CHAT_PATH}: a {tokens}-token probe reply gave no decode rate "
                            f"({record.error_kind or 'too few tokens'}); give --processes N")
    return (count - first) / max(record.t_last_token - record.t_first_token, 1e-6)
