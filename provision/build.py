"""Step ``build``: the standalone build script, run on the rig in the NVMe work folder.

The caller hands over the build script (``llamacpp/build_script.py``, standard-library only),
which runs with the rig's system ``python3``: local and remote rigs build llama.cpp one way,
with one cache layout (a second run with the same source and options is a cache hit). The CUDA
architecture comes from ``nvidia-smi --query-gpu=compute_cap``; a CUDA build must list a
CUDA device in ``llama-server --list-devices`` or the step fails. The build manifest is kept
at ``<work>/rigbench/build_manifest.json``: serve and bench read the binaries from it.

With a shared store (``provision.build_cache.S3BuildCache``) the rig first asks the script for
the build's key; a build the store has is fetched with ``curl`` from a presigned URL and
restored instead of compiled, and a build the store lacks is packed and uploaded after it is
checked, so the next rig of the same kind skips the compile. The store is an optimisation: a
failed download, check or upload is a warning line, and the rig builds as it would without it.

The step times what it ran, from this machine around each command on the rig, and returns the
figures in the manifest (``compile_seconds``, ``restore_seconds``, ``pack_seconds``,
``upload_seconds``), so a caller that records a rig's phases reads them from ``--result`` rather
than from progress lines.
"""

from __future__ import annotations

import json
import shlex
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fabric import Connection
from invoke.exceptions import CommandTimedOut

from core.build_manifest import BuildManifest
from core.errors import ProvisionError, RigbenchError
from core.profile import RigProfile
from provision.connection import quote, remote_exists, rig_step, run, upload_helper, upload_helpers, upload_text
from provision.rig_paths import RigPaths

if TYPE_CHECKING:
    from provision.build_cache import S3BuildCache

BUILD_SCRIPT_NAME = "llamacpp_build.py"  # its name on the rig

BUILD_TIMEOUT_S = 3600
TRANSFER_TIMEOUT_S = 900  # one archive to or from S3 (a CUDA build's is a few hundred MB)


def gpu_arch(c: Connection) -> str | None:
    """Compute capability of the first GPU as CMake wants it ("89"), or None without a GPU."""
    result = run(c, "nvidia-smi --query-gpu=compute_cap --format=csv,noheader", warn=True)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[0].replace(".", "") if result.ok and lines else None


def parse_manifest(stdout: str) -> BuildManifest:
    """The build script prints progress lines, then the manifest as indented JSON."""
    lines = stdout.splitlines()
    starts = [index for index, line in enumerate(lines) if line == "{"]
    if not starts:
        raise ProvisionError("build: the build script printed no manifest; see the output above")
    return parse_build_manifest("\n".join(lines[starts[-1]:]), "the build script's output")


def parse_build_manifest(text: str, source: str) -> BuildManifest:
    try:
        return BuildManifest.parse(text, source)
    except RigbenchError as error:
        raise ProvisionError(f"build: {error}") from None


def build_command(paths: RigPaths, profile: RigProfile, backend: str, arch: str | None, cache: str,
                  jobs: int | None, patches: list[str] = ()) -> str:
    """``patches``: the patch files' paths on the rig, in order."""
    parts = ["python3", paths.helper(BUILD_SCRIPT_NAME), "--source", json.dumps(profile.llama_cpp.spec()),
             "--backend", backend, "--cache", cache]
    for patch in patches:
        parts += ["--patch", patch]
    if arch:
        parts += ["--arch", arch]
    if jobs:
        parts += ["--jobs", str(jobs)]
    for option in profile.llama_cpp.cmake_options:
        parts += ["--option", option]
    return " ".join(shlex.quote(part) for part in parts)


def list_devices(c: Connection, server: str) -> str:
    return run(c, f"{shlex.quote(server)} --list-devices 2>&1", warn=True, timeout=60).stdout


def warn(message: str) -> None:
    print(f"[build] warning: {message}", flush=True)


@dataclass
class StoreUse:
    """What the shared store did in one build step, for its manifest: where the build came from or went and how
    long each transfer took on the rig (None: it did not happen)."""

    restored_from: str | None = None
    uploaded_to: str | None = None
    upload: bool = False  # pack and upload the build once it is checked
    restore_seconds: float | None = None
    pack_seconds: float | None = None
    upload_seconds: float | None = None

    def manifest_fields(self) -> dict:
        return {"restored_from": self.restored_from, "uploaded_to": self.uploaded_to,
                "restore_seconds": self.restore_seconds, "pack_seconds": self.pack_seconds,
                "upload_seconds": self.upload_seconds}


def seconds_since(started: float) -> float:
    """Seconds from ``started`` (``time.monotonic()``), to the millisecond: a restore of a small build is well
    under a second."""
    return round(time.monotonic() - started, 3)


def attempt(c: Connection, command: str, timeout: int = TRANSFER_TIMEOUT_S) -> tuple[bool, str, str]:
    """Run a command whose failure the step survives: (ok, its last output line, its stdout)."""
    try:
        result = run(c, command, timeout=timeout, warn=True)
    except CommandTimedOut:
        return False, f"ran past {timeout} s", ""
    lines = (result.stdout + result.stderr).strip().splitlines()
    return result.ok, (lines[-1] if lines else f"exit {result.exited}"), result.stdout


def last_json(stdout: str, what: str) -> dict:
    """The one-line JSON the build script prints for --print-key and --pack."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    try:
        return json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise ProvisionError(f"build: the build script printed no JSON for {what}; it printed:\n{stdout}") from None


def print_key(c: Connection, command: str) -> str:
    """The build's cache key, computed on the rig (the key names the nvcc found there)."""
    return last_json(run(c, f"{command} --print-key").stdout, "--print-key")["key"]


def transfer_path(cache: str, key: str) -> str:
    """Where an archive waits on the rig on its way from or to the store."""
    return f"{cache.rstrip('/')}/transfer/{key}.tar.gz"


def restore_from_store(c: Connection, store: S3BuildCache, key: str, sha256: str, command: str,
                       cache: str) -> str | None:
    """Fetch the key's archive on the rig and restore it into the cache; the URI, or None (with a
    warning naming it) when the download or the check failed and the rig must build instead."""
    uri, archive = store.uri(key), transfer_path(cache, key)
    fetched, said, _ = attempt(c, f"mkdir -p {shlex.quote(archive.rsplit('/', 1)[0])} && "
                                  f"curl -fsS --retry 3 -o {quote(archive, store.download_url(key))}")
    if fetched:
        fetched, said, _ = attempt(c, f"{command} --restore {quote(archive)} --restore-sha256 {quote(sha256)}")
    run(c, f"rm -f {quote(archive)}", warn=True)
    if not fetched:
        warn(f"could not restore {uri} on the rig ({said}); building instead")
        return None
    return uri


def upload_to_store(c: Connection, store: S3BuildCache, key: str, command: str, cache: str, use: StoreUse) -> None:
    """Pack the key's build on the rig and PUT it to the store with its sha256, timing each in ``use``; its
    ``uploaded_to`` stays None (with a warning) when packing or the upload failed: the build itself is fine either
    way."""
    uri, archive = store.uri(key), transfer_path(cache, key)
    started = time.monotonic()
    packed, said, stdout = attempt(c, f"{command} --pack {quote(archive)}")
    use.pack_seconds = seconds_since(started)
    sent = False
    if packed:
        info = last_json(stdout, "--pack")
        header = f"x-amz-meta-sha256: {info['sha256']}"
        url = store.upload_url(key, info["sha256"])  # signed here, before the clock starts
        started = time.monotonic()
        sent, said, _ = attempt(c, f"curl -fsS --retry 3 -T {quote(archive)} -H {quote(header)} {quote(url)}")
        use.upload_seconds = seconds_since(started)
    run(c, f"rm -f {quote(archive)}", warn=True)
    if not sent:
        warn(f"could not upload build {key} to {uri} ({said}); the build itself is fine")
        return
    print(f"[build] uploaded build {key} to {uri} ({info['bytes'] / 1e6:.1f} MB; packed in {use.pack_seconds:.1f} s, "
          f"sent in {use.upload_seconds:.1f} s)", flush=True)
    use.uploaded_to = uri


def consult_store(c: Connection, store: S3BuildCache, key: str, command: str, cache: str) -> StoreUse:
    """Decide what the store does for this build, and restore it when the store has it and the rig does not (timed:
    the download and the script's ``--restore``). One ``[build]`` line says which."""
    found = store.lookup(key)
    on_rig = remote_exists(c, f"{cache.rstrip('/')}/builds/{key}/build_manifest.json")
    if found and on_rig:
        print(f"[build] cache key {key}: on the rig already and in {found[0]}; nothing to transfer", flush=True)
        return StoreUse()
    if found:
        print(f"[build] cache key {key}: restoring from {found[0]} instead of compiling", flush=True)
        started = time.monotonic()
        restored = restore_from_store(c, store, key, found[1], command, cache)
        seconds = seconds_since(started)
        if restored:
            print(f"[build] restored {key} in {seconds:.1f} s", flush=True)
        # a bad object is replaced by the build that follows
        return StoreUse(restored_from=restored, upload=restored is None, restore_seconds=seconds)
    where = store.uri(key)
    if on_rig:
        print(f"[build] cache key {key}: on the rig, not in {where}; uploading it after the check", flush=True)
    else:
        print(f"[build] cache key {key}: not in {where}; building on the rig, then uploading", flush=True)
    return StoreUse(upload=True)


@rig_step("build")
def build(c: Connection, profile: RigProfile, paths: RigPaths | None = None, *, build_script: Path,
          cache: str | None = None, backend: str = "auto", jobs: int | None = None,
          timeout: int = BUILD_TIMEOUT_S, patch_files: list[Path] = (),
          cache_store: S3BuildCache | None = None) -> BuildManifest:
    """Build (or reuse) llama.cpp on the rig for its GPU with ``build_script``, applying
    ``patch_files`` (the profile's patches, uploaded beside the script); return the manifest,
    also kept on the rig. With ``cache_store`` a build it holds is restored instead of compiled,
    and one it lacks is uploaded to it."""
    paths = paths or RigPaths()
    upload_helpers(c, paths)
    upload_helper(c, paths, build_script, BUILD_SCRIPT_NAME)
    patches = [upload_helper(c, paths, patch) for patch in patch_files]
    arch = gpu_arch(c) if backend in ("auto", "cuda") else None
    if backend == "auto":
        backend = "cuda" if arch else "cpu"
    if backend == "cuda" and not arch:
        raise ProvisionError("build: backend cuda asked for, but nvidia-smi reports no GPU on the rig")
    cache = cache or paths.cache
    print(f"[build] {backend}{' sm_' + arch if arch else ''} in {cache} (progress below; cached builds return at once)",
          flush=True)
    command = build_command(paths, profile, backend, arch, cache, jobs, patches)
    key, use = None, StoreUse()
    if cache_store is not None:
        key = print_key(c, command)
        use = consult_store(c, cache_store, key, command, cache)
    result = run(c, f"mkdir -p {shlex.quote(cache)} && {command}", timeout=timeout, hide=False)
    manifest = parse_manifest(result.stdout)
    server = manifest.binaries["llama-server"]
    devices = list_devices(c, server)
    if backend == "cuda" and "CUDA" not in devices:
        raise ProvisionError(f"build: {server} --list-devices shows no CUDA device; it printed:\n{devices.strip()}")
    if use.upload and manifest.key != key:
        warn(f"the build's key {manifest.key} is not the key {key} --print-key gave; not uploading it")
    elif use.upload:
        upload_to_store(c, cache_store, key, command, cache, use)
    compiled = None if manifest.cached else manifest.build_seconds  # a reused build's figure is not this call's
    manifest = manifest.model_copy(update={"devices": devices.strip(), "compile_seconds": compiled,
                                           **use.manifest_fields()})
    upload_text(c, manifest.model_dump_json(indent=2), paths.build_manifest)
    print(f"[build] llama-server at {server} ({'cached' if manifest.cached else 'built'}); "
          f"manifest kept at {paths.build_manifest}", flush=True)
    return manifest


def read_build_manifest(c: Connection, paths: RigPaths) -> BuildManifest:
    result = run(c, f"cat {shlex.quote(paths.build_manifest)}", warn=True)
    if not result.ok:
        raise ProvisionError(f"no build manifest at {paths.build_manifest} on the rig; run the build step first")
    return parse_build_manifest(result.stdout, f"{paths.build_manifest} on the rig")
