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
from urllib.parse import urlsplit, urlunsplit

import httpx

from core.errors import LoadTestError, UsageError
from core.rundir import RequestRecord
from loadtest.error_watch import fix_for
from loadtest.http_errors import describe_http_error
from loadtest.long_context import context_for_tokens
from loadtest.streaming import CHAT_PATH, RequestMeta, build_payload, make_client, server_words, stream_chat

HEALTH_TIMEOUT_S = 5.0
REPLY_TIMEOUT_S = 60.0
HOST = re.compile(r"[A-Za-z0-9._:-]+")  # a name, an IPv4 address or an IPv6 address (brackets removed)
HOST_AND_PORT = re.compile(r"[A-Za-z0-9._-]+(:[0-9]+)?")
PROBE_META = RequestMeta(shard="preflight", step=0, users=1, phase="warmup", category="preflight")

# Before the load, what to do differs from a failure mid-sweep (loadtest.error_watch) for these kinds.
FIXES = {
    "connect": "start the server, or check the URL's host and port",
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


def check_health(url: str, timeout: float = HEALTH_TIMEOUT_S) -> str:
    """``/health`` (or ``/v1/models``) answers 200; returns which one did."""
    for path in ("/health", "/v1/models"):
        try:
            response = httpx.get(url + path, timeout=timeout)
        except httpx.ConnectError as error:
            raise LoadTestError(unreachable(url, error)) from None
        except httpx.TimeoutException:
            raise LoadTestError(
                f"{url}: no answer to GET {path} within {timeout:g} s; check the host, the port and any firewall"
            ) from None
        except httpx.HTTPError as error:
            raise LoadTestError(f"{url}: {describe_http_error(error)}") from None
        if response.status_code == 200:
            return path
        if response.status_code == 503:
            raise LoadTestError(
                f"{url}{path} answers 503 ({server_words(response.text) or 'no reason given'}): the server is still "
                "loading its model; wait until it answers 200, then run again"
            )
        if response.status_code == 400 and url.startswith("http://") and "https" in response.text.lower():
            raise LoadTestError(
                f"{url}{path} answers 400 ({response.text.strip()[:120]}): the server speaks TLS; use "
                f"https://{url.removeprefix('http://')}"
            )
        if response.status_code != 404:
            words = server_words(response.text)
            raise LoadTestError(f"{url}{path} answers HTTP {response.status_code}" + (f": {words}" if words else ""))
    raise LoadTestError(
        f"{url}: /health and /v1/models both answer 404, so this is not the root of an OpenAI-compatible "
        "server; check the URL (no API path) and the port"
    )


def unreachable(url: str, error: Exception) -> str:
    """Why no connection was made, in one line: a TLS handshake that failed is not "nothing listening"."""
    text = str(error)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        reason = text.split("certificate verify failed:", 1)[-1].split("(_ssl", 1)[0].strip(" )") or text
        return f"{url}: its TLS certificate is not trusted ({reason}); serve a certificate this machine trusts"
    if "SSL" in text or "TLS" in text:
        plain = f"http://{url.removeprefix('https://')}"
        return (f"{url}: the TLS handshake failed ({text.split(' (_ssl', 1)[0]}): the server does not speak TLS "
                f"on this port; for a plain-HTTP server use {plain}")
    return f"{url}: nothing is listening (connection refused); {FIXES['connect']}"


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


def listed_model(url: str, timeout: float = HEALTH_TIMEOUT_S) -> str | None:
    """The one model the server lists at ``/v1/models`` (OpenAI's list), the name its requests must carry;
    None when it lists none or has no such list. A server listing several is refused: which one to load
    is the user's choice (``--model-name``)."""
    try:
        response = httpx.get(f"{url}/v1/models", timeout=timeout)
        listed = response.json().get("data") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    names = [str(entry["id"]) for entry in listed or [] if isinstance(entry, dict) and entry.get("id")]
    if len(names) > 1:
        shown = ", ".join(repr(name) for name in names[:5]) + (", ..." if len(names) > 5 else "")
        raise UsageError(f"--model-name: {url} serves {len(names)} models ({shown}); name the one to load")
    return names[0] if names else None


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


def check_context(url: str, tokens: int) -> None:
    """A long-context sweep's server counts tokens (``/tokenize``, ``/detokenize``): the context is cut
    with them, so without them every user would fail on its first request."""
    try:
        context_for_tokens(url, tokens)
    except httpx.HTTPError as error:
        raise LoadTestError(f"{url}: --context-tokens {tokens} needs /tokenize, which failed: "
                            f"{describe_http_error(error)}") from None
    except LoadTestError as error:
        raise LoadTestError(f"--context-tokens {tokens}: {error}") from None


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
