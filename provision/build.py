"""Step ``build``: the standalone build script, run on the rig in the NVMe work folder.

The caller hands over the build script (``llamacpp/build_script.py``, standard-library only),
which runs with the rig's system ``python3``: local and remote rigs build llama.cpp one way,
with one cache layout (a second run with the same source and options is a cache hit). The CUDA
architecture comes from ``nvidia-smi --query-gpu=compute_cap``; a CUDA build must list a
CUDA device in ``llama-server --list-devices`` or the step fails. The build manifest is kept
at ``<work>/rigbench/build_manifest.json``: serve and bench read the binaries from it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from fabric import Connection

from core.build_manifest import BuildManifest
from core.errors import ProvisionError, RigbenchError
from core.profile import RigProfile
from provision.connection import rig_step, run, upload_helper, upload_helpers, upload_text
from provision.rig_paths import RigPaths

BUILD_SCRIPT_NAME = "llamacpp_build.py"  # its name on the rig

BUILD_TIMEOUT_S = 3600


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


@rig_step("build")
def build(c: Connection, profile: RigProfile, paths: RigPaths | None = None, *, build_script: Path,
          cache: str | None = None, backend: str = "auto", jobs: int | None = None,
          timeout: int = BUILD_TIMEOUT_S, patch_files: list[Path] = ()) -> BuildManifest:
    """Build (or reuse) llama.cpp on the rig for its GPU with ``build_script``, applying
    ``patch_files`` (the profile's patches, uploaded beside the script); return the manifest,
    also kept on the rig."""
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
    result = run(c, f"mkdir -p {shlex.quote(cache)} && {command}", timeout=timeout, hide=False)
    manifest = parse_manifest(result.stdout)
    server = manifest.binaries["llama-server"]
    devices = list_devices(c, server)
    if backend == "cuda" and "CUDA" not in devices:
        raise ProvisionError(f"build: {server} --list-devices shows no CUDA device; it printed:\n{devices.strip()}")
    manifest = manifest.model_copy(update={"devices": devices.strip()})
    upload_text(c, manifest.model_dump_json(indent=2), paths.build_manifest)
    print(f"[build] llama-server at {server} ({'cached' if manifest.cached else 'built'}); "
          f"manifest kept at {paths.build_manifest}", flush=True)
    return manifest


def read_build_manifest(c: Connection, paths: RigPaths) -> BuildManifest:
    result = run(c, f"cat {shlex.quote(paths.build_manifest)}", warn=True)
    if not result.ok:
        raise ProvisionError(f"no build manifest at {paths.build_manifest} on the rig; run the build step first")
    return parse_build_manifest(result.stdout, f"{paths.build_manifest} on the rig")
