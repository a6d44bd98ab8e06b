"""Rig-side helper for the provisioning steps; standard library only.

Copied to the rig next to ``llamacpp_build.py`` and ``hub_download.py`` (the download rule, shared
with ``rigbench models download``: ``core/hub_download.py``) and run with the rig's system
``python3``, so the steps need no shell one-liners and no packages on a bare instance:

    python3 rig_agent.py health --port 8080 --timeout 120
    python3 rig_agent.py probe --port 8080
    python3 rig_agent.py port-free --port 8080
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request


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
    for name in ("health", "probe", "port-free"):
        command = sub.add_parser(name)
        command.add_argument("--port", type=int, required=True)
        command.add_argument("--timeout", type=float, default=120)
    args = parser.parse_args(argv)
    handlers = {"health": command_health, "probe": command_probe, "port-free": command_port_free}
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
