"""EC2's instance metadata service (IMDSv2) as the spot watcher reads it, on 127.0.0.1.

The watcher (``infra/templates/spot_watcher.sh``, ``RIGBENCH_IMDS_URL`` pointed at ``url``) asks:

    PUT /latest/api/token                       a session token (the TTL header is required)
    GET /latest/meta-data/spot/instance-action  404 until a notice is on, then the notice's JSON;
                                                401 without the latest token

A notice goes on after a number of polls (a test's schedule) or when ``announce`` is called (a
study interrupting a rig mid-run). Like EC2's, it names the stop two minutes after it goes on, so a
record that carries the notice's time reads as a real one would. Never bound to 169.254.169.254:
only the loopback address.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from rigbench.studies.rehearsal.loopback import QuietHandler, serving

TOKEN_PATH = "/latest/api/token"
ACTION_PATH = "/latest/meta-data/spot/instance-action"
TTL_HEADER = "X-aws-ec2-metadata-token-ttl-seconds"
TOKEN_HEADER = "X-aws-ec2-metadata-token"
WARNING = timedelta(minutes=2)  # EC2 stops a spot instance two minutes after its notice


def notice_time(shown_at: datetime | None = None) -> str:
    """The stop time a notice shown at ``shown_at`` (now by default) names, in the metadata service's form."""
    return ((shown_at or datetime.now(UTC)) + WARNING).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class StandInImds:
    """Tokens by PUT, instance-action 404 until the notice; every poll's token header recorded."""

    notice_after_polls: int | None = None  # the poll from which the notice shows (None: only by announce)
    expire_token_on_poll: int | None = None  # answer 401 once at this poll, as for an expired token
    notice: dict | None = None  # the notice's JSON, set when it goes on
    announced: bool = False
    tokens_issued: list[str] = field(default_factory=list)
    polls: list[str | None] = field(default_factory=list)  # the token header of each instance-action GET
    lock: threading.Lock = field(default_factory=threading.Lock)

    def announce(self, action: str = "terminate", time: str | None = None) -> None:
        """Show a spot interruption notice from the next poll on (EC2 gives two minutes' warning)."""
        with self.lock:
            self.notice = {"action": action, "time": time or notice_time()}
            self.announced = True

    def notice_shows(self, poll: int) -> bool:
        return self.announced or (self.notice_after_polls is not None and poll >= self.notice_after_polls)

    def handler(self) -> type[QuietHandler]:
        imds = self

        class Handler(QuietHandler):
            def do_PUT(self) -> None:  # noqa: N802 (http.server's name)
                if self.path != TOKEN_PATH or not self.headers.get(TTL_HEADER):
                    self.reply(400)
                    return
                with imds.lock:
                    token = f"token-{len(imds.tokens_issued) + 1}"
                    imds.tokens_issued.append(token)
                self.reply(200, token)

            def do_GET(self) -> None:  # noqa: N802
                if self.path != ACTION_PATH:
                    self.reply(404, "Not Found")
                    return
                token = self.headers.get(TOKEN_HEADER)
                with imds.lock:
                    imds.polls.append(token)
                    poll = len(imds.polls)
                    valid = token is not None and bool(imds.tokens_issued) and token == imds.tokens_issued[-1]
                    shows = imds.notice_shows(poll)
                    if shows and imds.notice is None:  # a scheduled notice goes on at this poll
                        imds.notice = {"action": "terminate", "time": notice_time()}
                    notice = json.dumps(imds.notice)
                if not valid or poll == imds.expire_token_on_poll:
                    self.reply(401)
                elif shows:
                    self.reply(200, notice)
                else:
                    self.reply(404, "Not Found")

        return Handler

    @contextmanager
    def serving(self) -> Iterator[str]:
        """This IMDS on a free 127.0.0.1 port until the block ends; yields the URL for ``RIGBENCH_IMDS_URL``."""
        with serving(self.handler()) as url:
            yield url
