"""Rig-side helper for the provisioning steps; standard library only.

Copied to the rig next to ``llamacpp_build.py`` and run with the rig's system ``python3``,
so the steps need no shell one-liners and no packages on a bare instance:

    python3 rig_agent.py download --url URL --dest PATH --sha256 HEX|unknown --digests JSON
    python3 rig_agent.py health --port 8080 --timeout 120
    python3 rig_agent.py probe --port 8080
    python3 rig_agent.py port-free --port 8080

The Hugging Face token, when there is one, is read from stdin (``--token-stdin``): it never
appears in a command line, a log or a file. It is sent only to the first host (the hub), not
to the storage host a ``resolve`` URL redirects to.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

CHUNK = 1 << 20
RETRIES = 3


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


def fetch_into(url: str, partial: str, token: str | None, timeout: float) -> None:
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
            print("[download] server ignored the range request; starting over", file=sys.stderr, flush=True)
            offset = 0
        elif offset:
            print(f"[download] resuming at byte {offset}", file=sys.stderr, flush=True)
        total = response.headers.get("Content-Length")
        total_bytes = offset + int(total) if total else None
        done, last_report = offset, time.monotonic()
        with open(partial, mode) as out:
            for block in iter(lambda: response.read(CHUNK), b""):
                out.write(block)
                done += len(block)
                if time.monotonic() - last_report > 5:
                    share = f" ({100 * done / total_bytes:.0f}%)" if total_bytes else ""
                    print(f"[download] {done} bytes{share}", file=sys.stderr, flush=True)
                    last_report = time.monotonic()


def command_download(args: argparse.Namespace) -> int:
    token = sys.stdin.readline().strip() if args.token_stdin else None
    digests = load_digests(args.digests)
    name = os.path.basename(args.dest)
    expected = None if args.sha256 == "unknown" else args.sha256
    recorded = digests.get(name, {}).get("sha256")
    if expected is None and recorded:
        expected = recorded
        print(f"[download] {name}: checking against the digest recorded at first download ({recorded})",
              file=sys.stderr, flush=True)
    if os.path.exists(args.dest):
        found = file_sha256(args.dest)
        if expected is None or found == expected:
            record(digests, args, name, found)
            print(json.dumps({"file": args.dest, "sha256": found, "downloaded": False}))
            return 0
        print(f"[download] {name}: present but sha256 {found} != {expected}; downloading again",
              file=sys.stderr, flush=True)
        os.unlink(args.dest)
    partial = args.dest + ".part"
    for attempt in range(1, RETRIES + 1):
        try:
            fetch_into(args.url, partial, token, args.timeout)
            break
        except urllib.error.HTTPError as error:
            print(f"download failed: HTTP {error.code} for {args.url} ({error.reason}); "
                  "check the repo and file names, and HF_TOKEN for gated models", file=sys.stderr)
            return 2
        except (OSError, urllib.error.URLError) as error:
            if attempt == RETRIES:
                print(f"download failed: {args.url}: {error} after {RETRIES} attempts; run again to resume",
                      file=sys.stderr)
                return 2
            print(f"[download] attempt {attempt} stopped ({error}); resuming", file=sys.stderr, flush=True)
            time.sleep(2 * attempt)
    found = file_sha256(partial)
    size = os.path.getsize(partial)
    if (expected and found != expected) or (args.size and size != args.size):
        os.unlink(partial)
        want = f"sha256 {expected}" if expected else f"{args.size} bytes"
        print(f"download failed: sha256 is {found} ({size} bytes), expected {want}; the file was deleted: "
              "check the profile's sha256 and the hub endpoint", file=sys.stderr)
        return 3
    os.replace(partial, args.dest)
    record(digests, args, name, found)
    print(json.dumps({"file": args.dest, "sha256": found, "downloaded": True, "bytes": size}))
    return 0


def record(digests: dict, args: argparse.Namespace, name: str, sha256: str) -> None:
    if digests.get(name, {}).get("sha256") == sha256:
        return
    digests[name] = {"sha256": sha256, "repo": args.repo, "size_bytes": os.path.getsize(args.dest),
                     "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    save_digests(args.digests, digests)


def get_json(url: str, timeout: float = 5) -> tuple[int, object]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        try:
            return error.code, json.loads(error.read() or b"null")
        except ValueError:
            return error.code, None
    except (OSError, ValueError) as error:
        return 0, str(error)


def command_health(args: argparse.Namespace) -> int:
    deadline = time.monotonic() + args.timeout
    status, body = 0, None
    while time.monotonic() < deadline:
        status, body = get_json(f"http://127.0.0.1:{args.port}/health", timeout=5)
        if status == 200:
            print(json.dumps({"status": status, "body": body}))
            return 0
        time.sleep(0.5)
    print(json.dumps({"status": status, "body": body}))
    return 1


def gpu_memory() -> list[dict] | None:
    try:
        result = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    gpus = []
    for line in result.stdout.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 3:
            gpus.append({"name": parts[0], "memory_used_mib": int(parts[1]), "memory_total_mib": int(parts[2])})
    return gpus


def command_probe(args: argparse.Namespace) -> int:
    base = f"http://127.0.0.1:{args.port}"
    health_status, health = get_json(f"{base}/health")
    slots_status, slots = get_json(f"{base}/slots")
    summary = None
    if isinstance(slots, list):
        summary = {"total": len(slots), "busy": sum(1 for slot in slots if slot.get("is_processing"))}
    print(json.dumps({"health": {"status": health_status, "body": health},
                      "slots": {"status": slots_status, "summary": summary}, "gpus": gpu_memory()}))
    return 0


def command_port_free(args: argparse.Namespace) -> int:
    with socket.socket() as probe:
        # As llama-server does: connections in TIME_WAIT from an earlier server do not block the port.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", args.port))
        except OSError:
            return 3
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    download = sub.add_parser("download")
    download.add_argument("--url", required=True)
    download.add_argument("--dest", required=True)
    download.add_argument("--sha256", default="unknown")
    download.add_argument("--size", type=int, default=None)
    download.add_argument("--repo", default=None)
    download.add_argument("--digests", required=True)
    download.add_argument("--token-stdin", action="store_true")
    download.add_argument("--timeout", type=float, default=60)
    for name in ("health", "probe", "port-free"):
        command = sub.add_parser(name)
        command.add_argument("--port", type=int, required=True)
        command.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args(argv)
    handlers = {"download": command_download, "health": command_health, "probe": command_probe,
                "port-free": command_port_free}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
