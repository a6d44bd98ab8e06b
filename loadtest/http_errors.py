"""One line for a failed side request to the server (/health, /tokenize, /metrics, ...).

httpx's own messages span lines and end in a web link ("For more information check: ..."); a
run's manifest and a command's stop line need the request, what came back and the server's words.
"""

from __future__ import annotations

import httpx

from loadtest.streaming import server_words


def describe_http_error(error: httpx.HTTPError) -> str:
    """``POST /tokenize answered HTTP 501: Not implemented`` and the like, on one line."""
    try:
        request = error.request
        asked = f"{request.method} {request.url.path}"
    except RuntimeError:  # an error raised before a request existed
        asked = "the request"
    if isinstance(error, httpx.HTTPStatusError):
        words = server_words(error.response.text)
        return f"{asked} answered HTTP {error.response.status_code}" + (f": {words}" if words else "")
    if isinstance(error, httpx.TimeoutException):
        return f"{asked}: no answer in time ({type(error).__name__})"
    first_line = (str(error).strip().splitlines() or [""])[0][:200]
    return f"{asked} failed: {type(error).__name__}" + (f": {first_line}" if first_line else "")
