#!/usr/bin/env python3
"""A stand-in ``nvidia-cuda-mps-control`` for tests, behaving as the real one does where rigbench relies on it:

    -d                 fork a control daemon and return 0 (it listens on $CUDA_MPS_PIPE_DIRECTORY/control)
    -f                 the same daemon in the foreground
    (no argument)      send each line of standard input to the daemon and print its answer; exit 1 with the
                       real program's complaint when no daemon answers at the pipe folder

The daemon answers ``get_server_list`` (its server pids, one per line: none here) and ends on ``quit``. Every
invocation and every command the daemon receives is appended to ``$STANDIN_MPS_RECORD`` (default
``$CUDA_MPS_LOG_DIRECTORY/standin-commands.log``) as ``<pid> <what>``; the daemon writes ``control.log`` in the
log folder as the real one does. What a test needs to go wrong is set by ``STANDIN_MPS_FAIL``:

    start    -d prints an error and exits 1
    answer   the daemon starts but never listens (every command then finds no daemon); it ends by itself after
             ``STANDIN_MPS_HANG_S`` seconds (default 20), so a test leaves nothing running
"""

import os
import socket
import sys
import time

PIPE = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
LOGS = os.environ.get("CUDA_MPS_LOG_DIRECTORY", "/var/log/nvidia-mps")
RECORD = os.environ.get("STANDIN_MPS_RECORD", os.path.join(LOGS, "standin-commands.log"))
FAIL = os.environ.get("STANDIN_MPS_FAIL", "")
SOCKET = os.path.join(PIPE, "control")


def record(what: str) -> None:
    os.makedirs(os.path.dirname(RECORD) or ".", exist_ok=True)
    with open(RECORD, "a") as handle:
        handle.write(f"{os.getpid()} {what}\n")


def serve() -> int:
    """The daemon: one command per connection, until ``quit``."""
    os.makedirs(PIPE, exist_ok=True)
    os.makedirs(LOGS, exist_ok=True)
    with open(os.path.join(LOGS, "control.log"), "a") as log:
        log.write(f"[{time.strftime('%F %T')}] Starting control daemon using socket {SOCKET}\n")
    record(f"daemon started pipe={PIPE}")
    if FAIL == "answer":  # a daemon that hangs, for as long as a test waits on it, then goes
        time.sleep(float(os.environ.get("STANDIN_MPS_HANG_S", "20")))
        return 1
    if os.path.exists(SOCKET):
        os.unlink(SOCKET)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCKET)
    listener.listen(8)
    while True:
        connection, _ = listener.accept()
        with connection:
            command = connection.recv(4096).decode().strip()
            record(f"daemon got {command}")
            if command == "quit":
                connection.sendall(b"")
                listener.close()
                os.unlink(SOCKET)
                record("daemon quit")
                return 0
            connection.sendall(b"" if command == "get_server_list" else f"unknown command {command}\n".encode())


def client() -> int:
    for line in sys.stdin.read().splitlines():
        if not line.strip():
            continue
        record(f"client {line.strip()}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                connection.connect(SOCKET)
                connection.sendall(line.strip().encode())
                sys.stdout.write(connection.recv(4096).decode())
        except OSError:
            print("Cannot find MPS control daemon process")
            return 1
    return 0


def main() -> int:
    arguments = sys.argv[1:]
    record("invoked " + (" ".join(arguments) or "(commands on stdin)"))
    if arguments == ["-f"]:
        return serve()
    if arguments == ["-d"]:
        if FAIL == "start":
            print("An instance of this daemon is already running", file=sys.stderr)
            return 1
        if os.fork():
            return 0
        os.setsid()
        if os.fork():
            os._exit(0)
        devnull = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(devnull, stream)
        os._exit(serve())
    if arguments:
        print(f"Unknown option {arguments[0]}", file=sys.stderr)
        return 1
    return client()


sys.exit(main())
