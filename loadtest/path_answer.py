"""How a server answered one GET, kept as a record so that every check needing it reads the same answer.

Why a record and not the response: before the load, one path may serve several checks (``/v1/models``
names the model to send, stands in for ``/health`` on a server without one, and may say how many tokens a
request holds); read once and passed on, the server is asked once and every check judges the same answer.
A GET that got no answer keeps the one line the health check says for it, so a check reading the record
later says what it would have said asking itself.
"""

from __future__ import annotations

from typing import Any

import httpx
from pydantic import BaseModel, Field

from loadtest.http_errors import describe_http_error

CONNECT_FIX = "start the server, or check the URL's host and port"


class PathAnswer(BaseModel):
    """One GET of ``path`` at a server's root: what came back, or why nothing did."""

    path: str
    status: int | None = Field(None, description="the HTTP status; None when no answer came (``failure``)")
    text: str = Field("", description="the answer's text, for the server's own words on a refusal")
    body: Any = Field(None, description="the JSON of a 200 answer; None for any other answer, or one not JSON")
    failure: str | None = Field(None, description="why no answer came, as one line naming the URL and the fix")


def ask_path(url: str, path: str, timeout: float) -> PathAnswer:
    """``GET url+path``; never raises for the server's faults (they are the record's ``failure``)."""
    try:
        response = httpx.get(url + path, timeout=timeout)
    except httpx.ConnectError as error:
        return PathAnswer(path=path, failure=unreachable(url, error))
    except httpx.TimeoutException:
        return PathAnswer(path=path, failure=f"{url}: no answer to GET {path} within {timeout:g} s; check the "
                                             "host, the port and any firewall")
    except httpx.HTTPError as error:
        return PathAnswer(path=path, failure=f"{url}: {describe_http_error(error)}")
    body = None
    if response.status_code == 200:
        try:
            body = response.json()
        except ValueError:
            body = None
    return PathAnswer(path=path, status=response.status_code, text=response.text, body=body)


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
    return f"{url}: nothing is listening (connection refused); {CONNECT_FIX}"
