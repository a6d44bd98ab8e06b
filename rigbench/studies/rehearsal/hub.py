"""The Hugging Face hub as ``core.hub_download`` and a model's terms ask it, on 127.0.0.1.

Point ``HF_ENDPOINT`` at ``url`` and a real download goes through the same code it takes on a rig:

    GET /{repo}/resolve/{revision}/{file}   the file, from a ``Range: bytes=N-`` start (206, or 416
                                            past the end), or a 302 to another path, as the hub sends
                                            files to its storage host
    GET /api/models/{repo}[?blobs=true]     model info: ``{"id", "sha", "cardData": {"license"},
                                            "siblings": [{"rfilename", "size", "lfs": {"sha256"}}]}``,
                                            the commit a fixed digest of the repo's name unless set

Files are keyed by request path, so any other path (a package index's listing, a wheel) can be
served too. Every GET is recorded (path, Range, Authorization) for a test or a study to check; the
model-info ones apart, so that counting ``requests`` counts what was fetched.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import unquote

from rigbench.studies.rehearsal.loopback import QuietHandler, serving

MODEL_INFO = "/api/models/"


class StandInHub:
    """What the stand-in hub serves and the requests it saw; safe to change while it serves."""

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}  # request path -> body
        self.redirects: dict[str, str] = {}  # request path -> Location
        self.licenses: dict[str, str] = {}  # repo ("org/name") -> cardData's license
        self.commits: dict[str, str] = {}  # repo -> the commit model info names (default: made up, fixed)
        self.requests: list[dict] = []  # every GET but model info's: {path, range, authorization}
        self.info_requests: list[dict] = []  # the model-info GETs, apart: a download's count stays its own
        self.lock = threading.Lock()

    def add(self, repo: str, file: str, body: bytes, revision: str = "main") -> str:
        """Serve ``body`` at the ``resolve`` path of ``file`` in ``repo``; returns that path."""
        path = f"/{repo}/resolve/{revision}/{file}"
        self.files[path] = body
        return path

    def model_info(self, repo: str) -> dict | None:
        """The model-info answer for ``repo``, or None for a repo with neither files nor a license."""
        prefix = f"/{repo}/resolve/"
        served = {path[len(prefix):].split("/", 1)[-1]: body for path, body in sorted(self.files.items())
                  if path.startswith(prefix)}  # path in the repo, after "resolve/{revision}/"
        if repo not in self.licenses and not served:
            return None
        commit = self.commits.get(repo) or hashlib.sha1(repo.encode()).hexdigest()
        card = {"license": self.licenses[repo]} if repo in self.licenses else {}
        siblings = [{"rfilename": name, "size": len(body),
                     "lfs": {"sha256": hashlib.sha256(body).hexdigest(), "size": len(body)}}
                    for name, body in served.items()]
        return {"id": repo, "modelId": repo, "sha": commit, "cardData": card, "siblings": siblings}

    def handler(self) -> type[QuietHandler]:
        hub = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                asked = {"path": self.path, "range": self.headers.get("Range"),
                         "authorization": self.headers.get("Authorization")}
                with hub.lock:
                    (hub.info_requests if self.path.startswith(MODEL_INFO) else hub.requests).append(asked)
                if self.path.startswith(MODEL_INFO):
                    self.answer_model_info(unquote(self.path[len(MODEL_INFO):].split("?")[0]))
                elif self.path in hub.redirects:
                    self.reply(302, headers={"Location": hub.redirects[self.path]})
                else:
                    self.answer_file(hub.files.get(self.path))

            def answer_model_info(self, repo: str) -> None:
                info = hub.model_info(repo.split("/revision/")[0].rstrip("/"))
                if info is None:
                    self.reply(404, json.dumps({"error": "Repository not found"}))
                else:
                    self.reply(200, json.dumps(info), {"Content-Type": "application/json"})

            def answer_file(self, body: bytes | None) -> None:
                if body is None:
                    self.reply(404, "Entry not found")
                    return
                asked = self.headers.get("Range")
                if not asked:
                    self.reply(200, body)
                    return
                start = int(asked.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.reply(416, headers={"Content-Range": f"bytes */{len(body)}"})
                    return
                self.reply(206, body[start:], {"Content-Range": f"bytes {start}-{len(body) - 1}/{len(body)}"})

        return Handler

    @contextmanager
    def serving(self) -> Iterator[str]:
        """This hub on a free 127.0.0.1 port until the block ends; yields the URL for ``HF_ENDPOINT``."""
        with serving(self.handler()) as url:
            yield url
