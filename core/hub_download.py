"""A file from the Hugging Face hub, resumed and sha256-checked; standard library only.

One download rule wherever a model lands: ``rigbench models download`` imports this module here,
and the provisioning step copies this file to a rig and runs it there with the system python3
(nothing to install on a bare instance)::

    python3 hub_download.py --url URL --dest PATH --sha256 HEX|unknown --digests JSON [--size N]
        [--repo R --file F --endpoint HF_ENDPOINT]

Files come from the hub's plain ``{HF_ENDPOINT}/{repo}/resolve/main/{file}`` URLs; an unfinished
``.part`` file is resumed with HTTP Range. Every file is checked against the pinned sha256 before it
takes its name: a mismatch deletes it and fails. A pin of ``unknown`` records the digest of the first
verified download in the ``--digests`` file and checks later downloads against it. The token
(``HF_TOKEN`` or ``HUGGING_FACE_HUB_TOKEN``) is read from stdin on the rig (``--token-stdin``): never
in a command line, a log or a file; it goes only to the hub, not to the storage host a ``resolve`` URL
redirects to.

Where the bytes came from and the terms they come under are recorded beside their digest, as every
manifest of a run that served them owes them: the hub's model info (``{HF_ENDPOINT}/api/models/{repo}``)
names the commit (``sha``) and the licence (``cardData.license``, else a ``license:`` tag), kept as
``source`` (``hf:{repo}@{commit}/{file}``) and ``terms`` (None when the hub names none: never guessed).
Where that commit's listing gives the file's sha256 it must be the verified one, or nothing is recorded:
the bytes are another revision's. A hub that does not answer records nothing and the download goes on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import NamedTuple

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
UNKNOWN = "unknown"
CHUNK = 1 << 20
RETRIES = 3
REPORT_EVERY_S = 5.0

Log = Callable[[str], None]


class DownloadFailed(Exception):
    """A download that did not give the pinned file; ``exit_code`` is what the script exits with."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    for name in TOKEN_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    return None


def resolve_url(repo: str, file: str, endpoint: str | None = None, revision: str = "main") -> str:
    return f"{endpoint or hub_endpoint()}/{repo}/resolve/{revision}/{urllib.parse.quote(file)}"


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def load_digests(path: str) -> dict:
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}


def save_digests(path: str, digests: dict) -> None:
    partial = path + ".tmp"
    with open(partial, "w") as handle:
        json.dump(digests, handle, indent=2, sort_keys=True)
    os.replace(partial, path)


def fetch_into(url: str, partial: str, token: str | None, timeout: float, log: Log = to_stderr) -> None:
    """Append the rest of ``url`` to ``partial`` (HTTP Range), restarting if the server ignores Range."""
    offset = os.path.getsize(partial) if os.path.exists(partial) else 0
    request = urllib.request.Request(url)
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = urllib.request.urlopen(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        if error.code == 416 and offset:
            return  # the partial file already holds every byte
        raise
    with response:
        mode = "ab" if offset and response.status == 206 else "wb"
        if offset and mode == "wb":
            log("[download] server ignored the range request; starting over")
            offset = 0
        elif offset:
            log(f"[download] resuming at byte {offset}")
        total = response.headers.get("Content-Length")
        total_bytes = offset + int(total) if total else None
        done, last_report = offset, time.monotonic()
        with open(partial, mode) as out:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                done += len(block)
                if time.monotonic() - last_report > REPORT_EVERY_S:
                    share = f" ({100 * done / total_bytes:.0f}%)" if total_bytes else ""
                    log(f"[download] {done} bytes{share}")
                    last_report = time.monotonic()


def model_info_url(repo: str, endpoint: str | None = None) -> str:
    """The hub's model info with each file's LFS sha256 (``blobs``), for the default branch."""
    return f"{endpoint or hub_endpoint()}/api/models/{repo}?blobs=true"


def fetch_model_info(repo: str, token: str | None, timeout: float, log: Log = to_stderr,
                     endpoint: str | None = None) -> dict | None:
    """The hub's model info for ``repo``, or None (said in one line) when it does not answer with JSON."""
    request = urllib.request.Request(model_info_url(repo, endpoint), headers={"Accept": "application/json"})
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            info = json.load(response)
    except (OSError, ValueError) as error:  # HTTPError and URLError are OSErrors; bad JSON a ValueError
        log(f"[download] {repo}: the hub's model info did not answer ({error}); no source or terms recorded")
        return None
    return info if isinstance(info, dict) else None


def hub_terms(info: dict) -> str | None:
    """The licence the hub names for the repo: its card's ``license`` (``license_name`` for ``other``),
    else a ``license:`` tag; None when it names none."""
    card = info.get("cardData") if isinstance(info.get("cardData"), dict) else {}
    named = card.get("license")
    if isinstance(named, list):
        named = ", ".join(str(item) for item in named) or None
    if named == "other" and card.get("license_name"):
        return str(card["license_name"])
    if named:
        return str(named)
    tags = [tag.removeprefix("license:") for tag in info.get("tags") or [] if str(tag).startswith("license:")]
    return tags[0] if tags else None


def hub_provenance(info: dict, repo: str, file: str, sha256: str, log: Log = to_stderr) -> dict | None:
    """``{source, terms}`` of ``file`` with digest ``sha256`` from the model info, or None when the info
    names no commit or that commit's listing says the file is missing or has other bytes."""
    commit = info.get("sha")
    if not commit:
        log(f"[download] {repo}: the hub's model info names no commit; no source or terms recorded")
        return None
    siblings = info.get("siblings")
    if isinstance(siblings, list) and siblings:
        listed = next((item for item in siblings if isinstance(item, dict) and item.get("rfilename") == file), None)
        listed_sha256 = ((listed or {}).get("lfs") or {}).get("sha256")
        if listed is None or (listed_sha256 and listed_sha256 != sha256):
            found = f"sha256 {listed_sha256}" if listed else "no such file"
            log(f"[download] {repo}@{commit}: lists {file} with {found}, the bytes here have sha256 {sha256}; "
                "no source or terms recorded")
            return None
    return {"source": f"hf:{repo}@{commit}/{file}", "terms": hub_terms(info)}


def recorded_provenance(digests: dict, name: str, sha256: str) -> dict:
    """``{source, terms}`` recorded with the file ``name`` when its bytes are ``sha256``; else empty."""
    entry = digests.get(name)
    if not isinstance(entry, dict) or entry.get("sha256") != sha256 or not entry.get("source"):
        return {}
    return {"source": entry["source"], "terms": entry.get("terms")}


def provenance_note(outcome: dict) -> str:
    """``; SOURCE under TERMS`` for a download's one-line report, or nothing when no source is known."""
    if not outcome.get("source"):
        return ""
    return f"; {outcome['source']} under {outcome.get('terms') or 'terms the hub does not name'}"


def download(url: str, dest: str, *, digests_path: str, sha256: str = UNKNOWN, size: int | None = None,
             repo: str | None = None, file: str | None = None, endpoint: str | None = None,
             token: str | None = None, timeout: float = 60, log: Log = to_stderr) -> dict:
    """``url`` as ``dest``, checked; returns ``{file, sha256, downloaded[, bytes][, source, terms]}``. A file
    already at ``dest`` with the expected digest is kept (nothing downloaded); one with another digest is
    replaced. With ``repo`` and ``file`` (the file's path in the repo), its source and terms are looked up
    at ``endpoint`` (default: HF_ENDPOINT, which a rig's environment does not carry) once per digest and
    recorded. Raises DownloadFailed with one line naming what to check."""
    digests = load_digests(digests_path)
    name = os.path.basename(dest)
    expected = None if sha256 == UNKNOWN else sha256
    recorded = digests.get(name, {}).get("sha256")
    if expected is None and recorded:
        expected = recorded
        log(f"[download] {name}: checking against the digest recorded at first download ({recorded})")
    if os.path.exists(dest):
        found = file_sha256(dest)
        if expected is None or found == expected:
            known = record(digests_path, digests, dest, found, Lookup(repo, file, endpoint, token, timeout), log)
            return {"file": dest, "sha256": found, "downloaded": False, **known}
        log(f"[download] {name}: present but sha256 {found} != {expected}; downloading again")
        os.unlink(dest)
    partial = dest + ".part"
    for attempt in range(1, RETRIES + 1):
        try:
            fetch_into(url, partial, token, timeout, log)
            break
        except urllib.error.HTTPError as error:
            raise DownloadFailed(f"HTTP {error.code} for {url} ({error.reason}); check the repo and file names, "
                                 "and HF_TOKEN for gated models") from None
        except (OSError, urllib.error.URLError) as error:
            if attempt == RETRIES:
                raise DownloadFailed(f"{url}: {error} after {RETRIES} attempts; run again to resume") from None
            log(f"[download] attempt {attempt} stopped ({error}); resuming")
            time.sleep(2 * attempt)
    found = file_sha256(partial)
    got = os.path.getsize(partial)
    if (expected and found != expected) or (size and got != size):
        os.unlink(partial)
        want = f"sha256 {expected}" if expected else f"{size} bytes"
        raise DownloadFailed(f"sha256 is {found} ({got} bytes), expected {want}; the file was deleted: check the "
                             "profile's sha256 and the hub endpoint", exit_code=3)
    os.replace(partial, dest)
    known = record(digests_path, digests, dest, found, Lookup(repo, file, endpoint, token, timeout), log)
    return {"file": dest, "sha256": found, "downloaded": True, "bytes": got, **known}


class Lookup(NamedTuple):
    """What the hub is asked for a file's source and terms: no lookup without ``repo`` and ``file``."""

    repo: str | None
    file: str | None
    endpoint: str | None
    token: str | None
    timeout: float


def record(digests_path: str, digests: dict, dest: str, sha256: str, lookup: Lookup, log: Log) -> dict:
    """The digest a file was first verified with, so a profile pinned ``unknown`` is checked from then on,
    and the source and terms of those bytes (looked up while none is recorded for them); returns those."""
    name = os.path.basename(dest)
    known = recorded_provenance(digests, name, sha256)
    repo, file = lookup.repo, lookup.file
    if not known and repo and file:
        info = fetch_model_info(repo, lookup.token, lookup.timeout, log, lookup.endpoint)
        known = (hub_provenance(info, repo, file, sha256, log) if info is not None else None) or {}
    entry = digests.get(name)
    if not isinstance(entry, dict) or entry.get("sha256") != sha256:
        entry = {"sha256": sha256, "repo": repo, "size_bytes": os.path.getsize(dest),
                 "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    updated = {**entry, **known}
    if updated != digests.get(name):
        digests[name] = updated
        save_digests(digests_path, digests)
    return known


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--dest", required=True)
    parser.add_argument("--sha256", default=UNKNOWN)
    parser.add_argument("--size", type=int, default=None)
    parser.add_argument("--repo", default=None)
    parser.add_argument("--file", default=None, help="the file's path in the repo (to record its source and terms)")
    parser.add_argument("--endpoint", default=None, help="the hub to ask for them (default: HF_ENDPOINT or the hub)")
    parser.add_argument("--digests", required=True)
    parser.add_argument("--token-stdin", action="store_true")
    parser.add_argument("--timeout", type=float, default=60)
    args = parser.parse_args(argv)
    token = sys.stdin.readline().strip() if args.token_stdin else None
    try:
        outcome = download(args.url, args.dest, digests_path=args.digests, sha256=args.sha256, size=args.size,
                           repo=args.repo, file=args.file, endpoint=args.endpoint,
                           token=token, timeout=args.timeout)
    except DownloadFailed as error:
        print(f"download failed: {error}", file=sys.stderr)
        return error.exit_code
    print(json.dumps(outcome))
    return 0


if __name__ == "__main__":
    sys.exit(main())
