"""When to stop a sweep for its errors, and the line that says why (no Locust here: plain counts in).

Four rules, looked at once a second by the controller in the Locust master, over the requests that
ended in each second (Locust counts a request when it ends):

- a ``client_error`` (an exception in rigbench's own request code) fails the sweep at once: its
  figures would measure the client, not the server;
- an outage is ridden out: failures that say the server is away (refused connections, an overload
  or proxy answer: 429, 502, 503, 504, and the streams cut as it went: disconnects) with no
  successful request between them are held, not judged, for up to ``outage_seconds``
  (``--ride-out``). A success within it ends the outage: its refusals are recorded (every record is
  kept) and left out of the error rate, and the outage is noted (``ridden``); past it they count;
- but a server whose process has ended, as the process that started it says (``core.rundir.server_ended``:
  the local rig's own llama-server, which nothing restarts), is not waited for: the sweep stops at once
  with its exit code and log (``server_ended``);
- refused connections with no successful request between them, past the ride-out, mean the server
  is gone: users back off after a refusal, so their count stays low and the error rate alone would
  not see it (as many as the step has users, and at least ``--min-requests-for-error-rate``, and
  only in a second with no success, so a server that refuses a few connections under load while it
  streams to the others is not taken for gone);
- otherwise the share of a step's failed requests is held to ``--max-error-rate``, step by step (a
  bad step is not hidden by the good steps before it); the stop names the step, its most common
  error kind, the server's words for it and what to do about it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from loadtest.backoff import REFUSAL_KINDS

# A failure is "<kind>: <message>"; a worker's reaches the master as the exception's repr, so search.
ERROR_KIND = re.compile(r"\b(http_\d+|bad_model|connect|timeout|disconnect|malformed_sse|server_error|client_error):")
# What a server that goes away and comes back looks like to its users: refusals, and the streams it cut.
OUTAGE_KINDS = REFUSAL_KINDS | {"disconnect"}
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
    "interrupted": "requests were still streaming when the sweep stopped them: a longer --measure or --drain",
}
# How each kind is said in a line that names what happened to a step's requests.
SAID = {
    "connect": "refused connections", "timeout": "timed out", "disconnect": "cut mid-stream",
    "server_error": "ended by an error event", "malformed_sse": "malformed streams", "bad_model": "unknown model",
    "interrupted": "cut by the sweep's end", "http_429": "refused (429)", "http_502": "refused (502)",
    "http_503": "refused (503)", "http_504": "refused (504)",
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


def kinds_said(kinds: dict[str, int]) -> str:
    """``12 refused (503), 3 cut mid-stream``: failure counts by kind, the commonest first."""
    ranked = sorted(kinds.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count} {SAID.get(kind, kind)}" for kind, count in ranked if count)


@dataclass
class Outage:
    """The failures of the outage kinds since the last successful request."""

    began: float  # when the first of them was seen ended (the observation before it)
    kinds: Counter = field(default_factory=Counter)
    quiet_since: float | None = None  # from here to ``quiet_until`` no request succeeded (whole observations)
    quiet_until: float | None = None
    overdue: bool = False  # past the ride-out: its failures are judged as they come

    @property
    def refused(self) -> int:
        return sum(count for kind, count in self.kinds.items() if kind in REFUSAL_KINDS)

    @property
    def quiet(self) -> bool:
        """Whether a whole second passed in it with no successful request."""
        return self.quiet_until is not None

    def span(self, now: float) -> str:
        """How long no request succeeded, as the once-a-second observations bound it (``now``: the answer)."""
        least = 0.0 if self.quiet_since is None or self.quiet_until is None else self.quiet_until - self.quiet_since
        most = max(1.0, now - self.began)
        return f"{least:.0f}-{most:.0f} s" if least >= 1 else f"up to {most:.0f} s"


@dataclass
class ErrorWatch:
    """The controller's error rules, fed the master's running totals once a second."""

    max_error_rate: float
    min_requests: int
    outage_seconds: float = 0.0
    successes: int = 0
    seen: Counter = field(default_factory=Counter)  # failures by kind, as the totals last said
    refused_since_success: int = 0
    refused_from: float | None = None  # when the first of those refusals was seen (the observation before)
    away_since: float | None = None  # when a stop says the server went away: from then on no step completed
    last_seen: float | None = None
    step: str = ""  # the step judged, as lines name it ("step 2 (8 users)")
    step_ok: int = 0
    step_failed: Counter = field(default_factory=Counter)
    outage: Outage | None = None
    users: int = 1
    ridden: list[str] = field(default_factory=list)  # outages ridden out, one line each, for the manifest

    def observe(self, requests: int, failures: int, errors: list[tuple[str, int]], users: int = 1,
                step: str = "", now: float = 0.0) -> str | None:
        """``errors`` are (failure message, occurrences) as Locust keeps them, ``users`` the step's (or its
        arrivals a second), ``step`` its name in lines, ``now`` the time of the totals; returns why the sweep
        must stop, or None to go on."""
        kinds: Counter = Counter()
        for message, count in errors:
            kinds[error_kind(message)] += count
        if kinds.get("client_error"):
            bug = next(message for message, _ in errors if error_kind(message) == "client_error")
            return (
                f"the load generator's own request code failed ({bug[:300]}); the sweep is stopped, the records "
                "written so far are kept. This is a bug in rigbench: please report it with this line"
            )
        successes = requests - failures
        since, self.last_seen, self.users = self.last_seen if self.last_seen is not None else now, now, users
        if successes < self.successes or any(kinds[kind] < count for kind, count in self.seen.items()):
            self.successes, self.seen = successes, kinds  # the totals went down: a stats reset (web UI), a new baseline
            return None
        answered = successes - self.successes
        new = Counter({kind: kinds[kind] - self.seen[kind] for kind in kinds if kinds[kind] > self.seen[kind]})
        self.successes, self.seen = successes, kinds
        if step != self.step:
            self.step, self.step_ok, self.step_failed = step, 0, Counter()
        self.step_ok += answered
        refused = new.get("connect", 0)
        if answered:
            # a success came in: the refusals before it were not a dead server; this second's may have come
            # after it (the server died), so they start the new count, but a second with a success never stops
            self.refused_since_success, self.refused_from = refused, since if refused else None
        else:
            self.refused_since_success += refused
            if refused and self.refused_from is None:
                self.refused_from = since
        self._follow_outage(new, answered, since, now)
        outage = self.outage
        waited = self.outage_seconds <= 0 or (outage is not None and outage.overdue)
        if not answered and waited and self.refused_since_success >= max(self.min_requests, users):
            self.away_since = self.outage_began() if self.outage_began() is not None else self.refused_from
            return self.gone_line(now)
        judged = self.step_ok + sum(self.step_failed.values())
        failed = sum(self.step_failed.values())
        if judged < self.min_requests or failed / judged <= self.max_error_rate:
            return None
        dominant, count = max(self.step_failed.items(), key=lambda item: item[1])
        words = server_said(errors, dominant)
        self.away_since = self.outage_began()  # an outage past the ride-out may be what the rate counts
        where = f"{self.step}: " if self.step else ""
        return (
            f"{where}error rate {failed / judged:.0%} over {judged} requests exceeds the limit of "
            f"{self.max_error_rate:.0%}; most are {dominant} ({count} of {failed}"
            f"{f', the server said: {words!r}' if words else ''}): {fix_for(dominant)}. "
            "Sweep stopped, records kept (--max-error-rate sets the limit, judged per step)"
        )

    def _follow_outage(self, new: Counter, answered: int, since: float, now: float) -> None:
        """This second's failures: those of an outage held while it may still be ridden out, the rest judged.
        An outage is ridden out only when a whole second passed in it with no success: refusals that come
        between successes (a busy server turning some requests away) are judged as they come."""
        held = Counter({kind: count for kind, count in new.items() if kind in OUTAGE_KINDS})
        if self.outage_seconds <= 0:
            self.step_failed.update(new)
            return
        self.step_failed.update(new - held)
        outage = self.outage
        if answered:
            if outage is None:
                if held:  # they may have come after the success (the server went away): they may start one
                    self.outage = Outage(began=since, kinds=held)
                return
            self.outage = None
            if outage.overdue:
                self.step_failed.update(held)
                return
            outage.kinds.update(held)  # most likely before the success: the server came back
            if outage.quiet and outage.refused:  # away and back: what it refused is recorded, not judged
                self.ridden.append(
                    f"{self.step + ': ' if self.step else ''}the server was away: no request succeeded for "
                    f"{outage.span(now)} ({kinds_said(outage.kinds)}; all recorded), then it answered again: "
                    f"ridden out (--ride-out {self.outage_seconds:g} s) and left out of the step's error rate; "
                    "the step's figures include the outage")
            else:  # between successes, or streams cut with nothing refused: not an outage, judged
                self.step_failed.update(outage.kinds)
            return
        if outage is None:
            if not held:
                return
            outage = self.outage = Outage(began=since)
        if outage.quiet_since is None:
            outage.quiet_since = since
        outage.quiet_until = now
        if outage.overdue:
            self.step_failed.update(held)
            return
        outage.kinds.update(held)
        if now - outage.began > self.outage_seconds:
            outage.overdue = True  # longer than the ride-out waits: judged from here on
            self.step_failed.update(outage.kinds)

    def outage_began(self) -> float | None:
        """When the outage under way began (the first refusal since the last success), None when there is none."""
        return self.outage.began if self.outage is not None and self.outage.refused else None

    def server_ended(self, said: str, ended_at: float) -> str:
        """The server's process ended at ``ended_at`` (``said``: its name, exit code and log) and nothing restarts
        it: the stop's line at once, the ride-out not waited. Steps that ended before it went away (its end, or
        the first failure of the outage it made, whichever came first) stay complete."""
        self.away_since = min(t for t in (self.outage_began(), self.refused_from, ended_at) if t is not None)
        outage = self.outage
        seen = f" ({kinds_said(outage.kinds)} since the last successful request)" if outage and outage.kinds else ""
        return (
            f"the server stopped answering: {said}{seen}; nothing restarts it, so the sweep did not wait out "
            f"--ride-out ({self.outage_seconds:g} s). Sweep stopped, records kept"
        )

    def gone_line(self, now: float) -> str:
        """The server is gone: the stop's line (``now``: when it is said)."""
        began = self.outage_began()
        lasted = "" if began is None else f", over {now - began:.1f} s (--ride-out waits {self.outage_seconds:g} s)"
        return (
            f"the server stopped answering: {self.refused_since_success} refused connections since the last "
            f"successful request{lasted} ({FIXES['connect']}). Sweep stopped, records kept"
        )

    def unfinished_outage(self, now: float) -> str | None:
        """At the sweep's end: an outage still under way (not yet past the ride-out) that refused as many
        requests as the server-gone rule asks for is the run's failure: the server did not come back."""
        outage = self.outage
        if outage is None or not outage.quiet or outage.refused < max(self.min_requests, self.users):
            return None
        refusals = {kind: count for kind, count in outage.kinds.items() if kind in REFUSAL_KINDS}
        fix = fix_for(max(refusals.items(), key=lambda item: item[1])[0])
        self.away_since = outage.began
        return (
            f"the server stopped answering: {kinds_said(outage.kinds)} since the last successful request, over "
            f"{now - outage.began:.1f} s, and it had not answered again when the sweep ended (--ride-out waits "
            f"{self.outage_seconds:g} s): {fix}{'' if fix.endswith('?') else '.'} Records kept"
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
