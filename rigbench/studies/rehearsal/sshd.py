"""A private OpenSSH server on 127.0.0.1 that lets one user (the current one) log in with one key.

The provision steps run over SSH, and the rehearsal and the tests point them at this machine
through this sshd instead of a rig. It runs with its own config, host key, client key and
authorized keys in one folder, on a free port, in the foreground (``-D``) as a child process.

On a machine without OpenSSH the sshd comes from Debian packages unpacked with ``dpkg -x`` into a
folder (``rigbench/studies/rehearsal_bundle.sh`` makes one): nothing is installed, so sshd runs
with ``LD_LIBRARY_PATH`` pointing at the folder's libraries. Only sshd and its SFTP server get that
path; a session's own commands load this machine's libraries (a newer glibc's programs may need
newer libraries than Debian's). Sessions get their ``PATH`` through the config's ``SetEnv``.

Keys are made with ``cryptography`` (a dependency of paramiko, so always there), not
``ssh-keygen``, which a machine without OpenSSH lacks.

As root, sshd separates privileges: OpenSSH refuses to start without a user named ``sshd`` and the
folder ``/run/sshd`` (its empty chroot). ``ensure_privilege_separation`` creates both when missing,
so starting this server as root may add that system user to this machine.
"""

from __future__ import annotations

import getpass
import os
import pwd
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from core.errors import StudyError
from core.network import free_port

SYSTEM_SSHD = Path("/usr/sbin/sshd")
PRIVSEP_FOLDER = Path("/run/sshd")
# What OpenSSH gives a session when nothing else is said (Debian's build, as root).
STANDARD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class PrivateSshd:
    """How to log in to a running private sshd."""

    host: str
    port: int
    user: str
    key: Path  # the client's private key
    host_key_line: str  # "ssh-ed25519 AAAA…", as known_hosts holds it
    folder: Path
    pid: int = 0  # the listening sshd's process

    def known_hosts(self, path: Path) -> Path:
        """A known_hosts file pinning this sshd's real host key."""
        path.write_text(f"[{self.host}]:{self.port} {self.host_key_line}\n")
        return path


def find_sshd(tree: Path | None = None) -> Path:
    """This machine's sshd (on PATH or in /usr/sbin), else the one unpacked into ``tree``."""
    found = shutil.which("sshd")
    if found:
        return Path(found)
    if os.access(SYSTEM_SSHD, os.X_OK):
        return SYSTEM_SSHD
    if tree is not None and os.access(tree / "usr/sbin/sshd", os.X_OK):
        return tree / "usr/sbin/sshd"
    where = f" nor in {tree}/usr/sbin" if tree is not None else ""
    raise StudyError(f"no sshd on PATH, in /usr/sbin{where}: install openssh-server, or unpack it with "
                     "rigbench/studies/rehearsal_bundle.sh FOLDER and pass FOLDER/tree")


def library_path(tree: Path) -> str:
    """The unpacked tree's library folders, as ``LD_LIBRARY_PATH`` lists them."""
    folders = [*sorted(tree.glob("lib/*-linux-gnu")), *sorted(tree.glob("usr/lib/*-linux-gnu")),
               tree / "lib", tree / "usr/lib"]
    return ":".join(str(folder) for folder in folders if folder.is_dir())


def write_key(path: Path) -> str:
    """A new ed25519 key pair at ``path`` (OpenSSH format) and ``path.pub``; returns the public line."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                           serialization.PublicFormat.OpenSSH).decode()
    path.write_bytes(private)
    path.chmod(0o600)
    path.with_name(path.name + ".pub").write_text(public + "\n")
    return public


def ensure_privilege_separation() -> None:
    """As root, the ``sshd`` user and ``/run/sshd`` that OpenSSH needs to start; nothing otherwise."""
    if os.geteuid() != 0:
        return
    PRIVSEP_FOLDER.mkdir(mode=0o755, exist_ok=True)
    try:
        pwd.getpwnam("sshd")
        return
    except KeyError:
        pass
    if shutil.which("useradd"):
        subprocess.run(["useradd", "--system", "--no-create-home", "--home-dir", str(PRIVSEP_FOLDER),
                        "--shell", "/usr/sbin/nologin", "sshd"], check=True)
        return
    used = {entry.pw_uid for entry in pwd.getpwall()}
    uid = next(number for number in range(999, 100, -1) if number not in used)
    with open("/etc/passwd", "a") as passwd:
        passwd.write(f"sshd:x:{uid}:65534::{PRIVSEP_FOLDER}:/usr/sbin/nologin\n")


def sshd_config(folder: Path, port: int, *, tree: Path | None = None,
                set_env: Mapping[str, str] | None = None, address: str = "127.0.0.1") -> str:
    """The config: one address (loopback unless told), key login only, files in ``folder``. With ``tree`` (an sshd
    unpacked there) SFTP is the tree's sftp-server with the tree's libraries, and sessions get the
    tree's usr/bin on PATH."""
    lines = [
        f"ListenAddress {address}", f"Port {port}", f"HostKey {folder / 'host_ed25519'}",
        f"AuthorizedKeysFile {folder / 'authorized_keys'}", f"PidFile {folder / 'sshd.pid'}",
        "StrictModes no", "UsePAM no", "PermitRootLogin prohibit-password", "PasswordAuthentication no",
        "KbdInteractiveAuthentication no", "LogLevel ERROR",
    ]
    variables = dict(set_env or {})
    if tree is None:
        lines.append("Subsystem sftp internal-sftp")
    else:
        sftp = tree / "usr/lib/openssh/sftp-server"
        lines.append(f"Subsystem sftp /usr/bin/env LD_LIBRARY_PATH={library_path(tree)} {sftp}")
        variables.setdefault("PATH", f"{tree / 'usr/bin'}:{STANDARD_PATH}")
        session = tree / "usr/lib/openssh/sshd-session"  # OpenSSH 9.8 and later run sessions apart
        if session.exists():
            lines.append(f"SshdSessionPath {session}")
    if variables:
        lines.append("SetEnv " + " ".join(f"{name}={value}" for name, value in variables.items()))
    return "\n".join(lines) + "\n"


def wait_listening(port: int, process: subprocess.Popen, log: Path, timeout: float = 10,
                   host: str = "127.0.0.1") -> None:
    """Return once ``process`` accepts connections on ``host``:``port``; raise, quoting its ``log``,
    if it exits or never does."""
    def said() -> str:
        return log.read_text(errors="replace").strip() if log.exists() else ""

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise StudyError(f"sshd exited with {process.returncode}: {said()}")
        with socket.socket() as probe:
            probe.settimeout(1)
            if probe.connect_ex((host, port)) == 0:
                return
        time.sleep(0.05)
    raise StudyError(f"sshd did not listen on {host}:{port} within {timeout} s: {said()}")


@contextmanager
def private_sshd(folder: Path, *, tree: Path | None = None, binary: Path | None = None,
                 set_env: Mapping[str, str] | None = None, timeout: float = 10) -> Iterator[PrivateSshd]:
    """A private sshd serving until the block ends, its files in ``folder``.

    ``binary`` defaults to ``find_sshd(tree)``; when it lies inside ``tree`` it runs with the tree's
    libraries, and SFTP and the sessions' PATH come from the tree too.
    """
    binary = binary or find_sshd(tree)
    unpacked = tree is not None and binary.resolve().is_relative_to(tree.resolve())
    folder.mkdir(parents=True, exist_ok=True)
    host_public = write_key(folder / "host_ed25519")
    (folder / "authorized_keys").write_text(write_key(folder / "client_ed25519") + "\n")
    port = free_port()
    config = folder / "sshd_config"
    config.write_text(sshd_config(folder, port, tree=tree if unpacked else None, set_env=set_env))
    ensure_privilege_separation()
    env = dict(os.environ)
    if unpacked:
        env["LD_LIBRARY_PATH"] = library_path(tree)
    # sshd re-executes itself for each connection, so it must be started by its absolute path. Its
    # log goes to a file: a pipe nobody reads would stall a server that runs for hours.
    log = folder / "sshd.log"
    with open(log, "ab") as stderr:
        process = subprocess.Popen([str(binary.resolve()), "-D", "-e", "-f", str(config)], env=env,
                                   stderr=stderr)
    try:
        wait_listening(port, process, log, timeout)
        yield PrivateSshd("127.0.0.1", port, getpass.getuser(), folder / "client_ed25519",
                          " ".join(host_public.split()[:2]), folder, process.pid)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
