"""When to stop a sweep for its errors, and the line that says why (no Locust here: plain counts in).

Three rules, looked at once a second by the controller in the Locust master:

- a ``client_error`` (an exception in rigbench's own request code) fails the sweep at once: its
  figures would measure the client, not the server;
- refused connections with no successful request between them mean the server is gone: users
  back off after a refusal, so their count stays low and the error rate alone would not see it
  (as many as the step has users, and at least ``--min-requests-for-error-rate``, and only in a
  second with no success, so a server that refuses a few connections under load while it streams
  to the others is not taken for gone);
- otherwise the share of failed requests is held to ``--max-error-rate``; the stop names the
  most common error kind and what to do about it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# A failure is "<kind>: <message>"; a worker's reaches the master as the exception's repr, so search.
ERROR_KIND = re.compile(r"\b(http_\d+|bad_model|connect|timeout|disconnect|malformed_sse|server_error|client_error):")
# What to do when most failed requests are of a kind.
FIXES = {
    "connect": "nothing answers at the URL any more: is the server still running?",
    "timeout": "streams stall past --read-timeout: the server is stuck or overloaded (fewer users, or a longer "
               "--read-timeout)",
    "disconnect": "the server closes streams early: check its log (a crash or a restart?)",
    "server_error": "the server ended streams with an error event: its words are above, its log says more",
    "malformed_sse": "the server does not stream OpenAI-style JSON events: is it an OpenAI-compatible server?",
    "bad_model": "the server does not know the model name: pass --model-name as it lists at /v1/models",
    "http_404": "the server answers 404: the URL must be its root (no API path)",
    "http_503": "the server is busy or still loading: wait for /health to answer 200, or serve fewer users",
    "http_429": "the server limits the request rate: serve fewer users or raise its limit",
    "http_502": "a proxy in front of the server got no answer from it: is the server behind it running?",
    "http_504": "a proxy in front of the server timed out waiting for it: the server is overloaded (fewer users)",
}


def error_kind(message: str) -> str:
    match = ERROR_KIND.search(message)
    return match.group(1) if match else "unknown"


def fix_for(kind: str) -> str:
    if kind in FIXES:
        return FIXES[kind]
    if kind.startswith("http_5"):
        return "the server failed requests: check its log"
    return "check the server log and the records' error_message"


@dataclass
class ErrorWatch:
    """The controller's error rules, fed the master's running totals once a second."""

    max_error_rate: float
    min_requests: int
    successes: int = 0
    refused: int = 0
    refused_since_success: int = 0

    def observe(self, requests: int, failures: int, errors: list[tuple[str, int]], users: int = 1) -> str | None:
        """``errors`` are (failure message, occurrences) as Locust keeps them, ``users`` the step's;
        returns why the sweep must stop, or None to go on."""
        kinds: dict[str, int] = {}
        for message, count in errors:
            kind = error_kind(message)
            kinds[kind] = kinds.get(kind, 0) + count
        if kinds.get("client_error"):
            bug = next(message for message, _ in errors if error_kind(message) == "client_error")
            return (
                f"the load generator's own request code failed ({bug[:300]}); the sweep is stopped, the records "
                "written so far are kept. This is a bug in rigbench: please report it with this line"
            )
        successes, refused = requests - failures, kinds.get("connect", 0)
        answered = False
        if successes < self.successes or refused < self.refused:
            pass  # the totals went down: a stats reset (web UI), so they are only the new baseline
        elif successes > self.successes:
            # a success came in: the refusals before it were not a dead server; this second's may have come
            # after it (the server died), so they start the new count, but a second with a success never stops
            answered = True
            self.refused_since_success = refused - self.refused
        else:
            self.refused_since_success += refused - self.refused
        self.successes, self.refused = successes, refused
        if not answered and self.refused_since_success >= max(self.min_requests, users):
            return (
                f"the server stopped answering: {self.refused_since_success} refused connections since the last "
                f"successful request ({FIXES['connect']}). Sweep stopped, records kept"
            )
        if requests < self.min_requests or failures / requests <= self.max_error_rate:
            return None
        dominant, count = max(kinds.items(), key=lambda item: item[1]) if kinds else ("unknown", 0)
        words = server_said(errors, dominant)
        return (
            f"error rate {failures / requests:.0%} over {requests} requests exceeds the limit of "
            f"{self.max_error_rate:.0%}; most are {dominant} ({count} of {failures}"
            f"{f', the server said: {words!r}' if words else ''}): {fix_for(dominant)}. "
            "Sweep stopped, records kept (--max-error-rate sets the limit)"
        )


def server_said(errors: list[tuple[str, int]], kind: str) -> str | None:
    """The most common message of the failures of ``kind``, as the record has it (the server's words)."""
    messages: dict[str, int] = {}
    for message, count in errors:
        if error_kind(message) == kind:
            text = message[ERROR_KIND.search(message).end():].strip()  # type: ignore[union-attr]
            if message.startswith("Exception(") and text[-2:] in ("')", '")'):
                text = text[:-2]  # a worker's failure, as the exception's repr
            messages[text] = messages.get(text, 0) + count
    found = max(messages.items(), key=lambda item: item[1])[0] if messages else ""
    return found[:160] or None
