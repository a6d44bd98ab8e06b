"""How long a serve took to be ready: until each server answered ``/health`` and until it streamed a first token.

The serve step times its servers from its own start, on this machine around the commands it runs on the rig. The
first token is a real request: a one-token streamed completion sent from the rig itself with ``curl`` (no tunnel, no
WAN in the figure), through the model and the API key, so a server that answers ``/health`` but cannot generate shows
as a warning and no figure. The figures travel in the serve step's result (``ServeState.timings``).
"""

from __future__ import annotations

import json
import shlex
import time
from typing import Protocol

from fabric import Connection
from invoke.exceptions import CommandTimedOut
from pydantic import Field

from core.strict import Strict
from provision.connection import run


class Service(Protocol):
    """What a first-token request needs of a served server (``provision.serve.Service`` has it)."""

    index: int | None
    port: int

    @property
    def label(self) -> str: ...

FIRST_TOKEN_REQUEST = json.dumps({"prompt": "Hello", "n_predict": 1, "stream": True, "cache_prompt": False})
FIRST_TOKEN_TIMEOUT_S = 300  # a large model's first request on a cold GPU


class ServerTimes(Strict):
    """How long one server took to be ready, in seconds from the start of the serve step that started it."""

    index: int | None = Field(None, description="the replica; None: the profile's one server")
    port: int
    health_seconds: float = Field(ge=0, description="until its /health answered 200")
    first_token_seconds: float | None = Field(
        None, ge=0, description="until a one-token streamed completion sent to it from the rig returned its token; "
        "None when that request failed (a warning line says why)")


class ServeTimings(Strict):
    """How long a serve took to be ready, in seconds from the step's start (reading the build, uploading helpers,
    starting the supervisors included): the whole, and each replica's where there are replicas."""

    health_seconds: float = Field(ge=0, description="until every server answered /health")
    first_token_seconds: float | None = Field(
        None, ge=0, description="until every server had streamed its first token; None when one request failed")
    replicas: list[ServerTimes] = Field(default_factory=list, description="each replica's; empty for one server")


def first_token(c: Connection, service: Service, key_header: str | None) -> str | None:
    """Send ``service`` a one-token streamed completion from the rig itself (no tunnel, no WAN in the figure) and
    wait for it to end; None when a token came back, else what went wrong."""
    words = ["curl", "-sS", "-N", "--max-time", str(FIRST_TOKEN_TIMEOUT_S), "-w", "\\n%{http_code}",
             "-H", "Content-Type: application/json", *(["-H", f"@{key_header}"] if key_header else []),
             "--data-binary", FIRST_TOKEN_REQUEST, f"http://127.0.0.1:{service.port}/completion"]
    try:
        result = run(c, " ".join(shlex.quote(word) for word in words), warn=True, timeout=FIRST_TOKEN_TIMEOUT_S + 30)
    except CommandTimedOut:
        return f"no reply within {FIRST_TOKEN_TIMEOUT_S} s"
    lines = result.stdout.strip().splitlines()
    if result.ok and lines and lines[-1] == "200" and any(line.startswith("data: ") for line in lines):
        return None
    said = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return f"curl exited {result.exited}: {said[-1] if said else 'no output'}"


def time_first_tokens(c: Connection, started_services: list[Service], started: float,
                      healthy_at: dict[int | None, float], key_header: str | None) -> ServeTimings:
    """Each server's /health and first-token times from ``started`` (the step's ``time.monotonic()``), one request
    after another once all are healthy; a failed request is a warning line and no figure, not a failed serve."""
    each = []
    for service in started_services:
        problem = first_token(c, service, key_header)
        token_at = time.monotonic()
        if problem is not None:
            print(f"[serve] warning: the first-token request to {service.label} (port {service.port}) failed: "
                  f"{problem}", flush=True)
        each.append(ServerTimes(index=service.index, port=service.port,
                                health_seconds=round(healthy_at[service.index] - started, 3),
                                first_token_seconds=None if problem else round(token_at - started, 3)))
    tokens = [server.first_token_seconds for server in each]
    return ServeTimings(health_seconds=max(server.health_seconds for server in each),
                        first_token_seconds=None if None in tokens else max(tokens),
                        replicas=[] if len(each) == 1 and each[0].index is None else each)
