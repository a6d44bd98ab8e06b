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
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import httpx

from core.errors import LoadTestError, UsageError
from core.rundir import LoadSettings, RequestRecord
from core.rundir.models import ServerDescription, SettingOrigin
from loadtest.error_watch import fix_for
from loadtest.http_errors import describe_http_error
from loadtest.lengths import longest_request
from loadtest.long_context import context_for_tokens, document_tokens
from loadtest.model_list import MODELS_PATH, ModelList, listed_model, read_model_list
from loadtest.path_answer import CONNECT_FIX, ask_path
from loadtest.server_description import (
    check_conversation_fits,
    check_drawn_fit,
    check_reply_fits,
    describe_server,
)
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


DEFAULT_MODEL_NAME = "default"  # what llama-server takes whatever model it serves


@dataclass
class CheckedServer:
    """One server as the checks before a sweep found it: the model name its requests carry and where that
    came from, how it described itself, and what of the load may not fit it (by document length)."""

    url: str
    model_name: str
    model_from: SettingOrigin
    description: ServerDescription
    fit_warnings: dict[int, list[str]] = field(default_factory=dict)


def sent_model_name(models: ModelList, given: str | None) -> tuple[str, SettingOrigin]:
    """The model name requests carry, and its origin: ``--model-name``, else the one model the server
    lists at /v1/models, else ``default`` (llama-server takes any name)."""
    if given:
        return given, "flag"
    listed = listed_model(models)
    return (listed, "server") if listed else (DEFAULT_MODEL_NAME, "rigbench")


def check_servers(urls: list[str], settings: LoadSettings, contexts: list[int], *, model_name: str | None,
                  health: bool = True, replicas: list[str] | None = None) -> list[CheckedServer]:
    """Every server before a run exists: its /v1/models (read once: it names the model to send, stands in
    for a missing /health, and may say how many tokens a request holds), /health and one streamed reply
    (``health``; every replica's too), the longest document, system prompt and drawn or traced prompt cut
    by its own tokens, and whether the longest request fits its context (refused) or a reply may be cut
    short (a warning per document length). Each problem is one line naming the option."""
    checked = []
    for url in urls:
        models = read_model_list(url)
        name, origin = sent_model_name(models, model_name)
        if health:
            for root in [url, *(replica for replica in replicas or [] if replica != url)]:
                check_health(root, models=models if root == url else None)
                check_reply(root, name, timeout=settings.read_timeout_seconds)
        checked.append(CheckedServer(url, name, origin, describe_server(url, models=models)))
    _check_texts(checked, settings, contexts)
    return checked


def _check_texts(servers: list[CheckedServer], settings: LoadSettings, contexts: list[int]) -> None:
    """Texts cut by the servers' tokens, and what the longest request asks of each server's context."""
    system_prompt = settings.sessions.system_prompt_tokens if settings.sessions is not None else 0
    longest, longest_reply = longest_request(settings.trace, settings.prompt_length, settings.output_length)
    drawn = [flag for flag, value in (("--prompt-length", settings.prompt_length),
                                      ("--output-length", settings.output_length)) if value is not None]
    lengths_from = "--trace" if settings.trace is not None else " and ".join(drawn)
    for server in servers:
        if max(contexts) > 0:
            check_context(server.url, max(contexts))
        if system_prompt:
            check_context(server.url, system_prompt, "--system-prompt-tokens")
        if longest:
            check_prompt_cuts(server.url, longest, "--trace" if settings.trace is not None else "--prompt-length")
        if lengths_from:
            reply = longest_reply if longest_reply is not None else settings.max_tokens
            check_drawn_fit(server.url, server.description, prompt_tokens=longest + max(contexts),
                            reply_tokens=reply, options=lengths_from)
        for context in contexts:
            said = [check_reply_fits(server.url, server.description, max_tokens=settings.max_tokens,
                                     ignore_eos=settings.ignore_eos, context_tokens=context)]
            if (sessions := settings.sessions) is not None:  # a turn resends its history: the longest must fit
                options = " ".join([f"--sessions --turns {sessions.turns_min}-{sessions.turns_max}", *drawn])
                prompts, replies = settings.prompt_length, settings.output_length
                prompt_tokens = (prompts.minimum, prompts.maximum) if prompts is not None else (0, 0)
                reply_tokens = ((replies.minimum, replies.maximum) if replies is not None else
                                (settings.max_tokens if settings.ignore_eos else 0, settings.max_tokens))
                said.append(check_conversation_fits(server.url, server.description, sessions=sessions,
                                                    context_tokens=context, prompt_tokens=prompt_tokens,
                                                    reply_tokens=reply_tokens, options=options))
            server.fit_warnings[context] = [warning for warning in said if warning]
