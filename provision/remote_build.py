"""Step ``build``: the local rig's build module, run on the rig in the NVMe work folder.

``provision/llamacpp_build.py`` is standard-library only so that the very same file runs
with the rig's system ``python3``: local and remote rigs build llama.cpp one way, with one
cache layout (a second run with the same source and options is a cache hit). The CUDA
architecture comes from ``nvidia-smi --query-gpu=compute_cap``; a CUDA build must list a
CUDA device in ``llama-server --list-devices`` or the step fails. The build manifest is kept
at ``<work>/rigbench/build_manifest.json``: serve and bench read the binaries from it.
"""

from __future__ import annotations

import json
import shlex

from fabric import Connection

from provision.rig import RigPaths, rig_step, run, upload_helpers, upload_text
from rigbench.errors import ProvisionError
from rigbench.profile import RigProfile

BUILD_TIMEOUT_S = 3600


def gpu_arch(c: Connection) -> str | None:
    """Compute capability of the first GPU as CMake wants it ("89"), or None without a GPU."""
    result = run(c, "nvidia-smi --query-gpu=compute_cap --format=csv,noheader", warn=True)
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return lines[0].replace(".", "") if result.ok and lines else None


def parse_manifest(stdout: str) -> dict:
    """The build module prints progress lines, then the manifest as indented JSON."""
    lines = stdout.splitlines()
    starts = [index for index, line in enumerate(lines) if line == "{"]
    if not starts:
        raise ProvisionError("build: the build module printed no manifest; see the output above")
    return json.loads("\n".join(lines[starts[-1]:]))


def build_command(paths: RigPaths, profile: RigProfile, backend: str, arch: str | None, cache: str,
                  jobs: int | None) -> str:
    parts = ["python3", paths.helper("llamacpp_build.py"), "--source", json.dumps(profile.llama_cpp.spec()),
             "--backend", backend, "--cache", cache]
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
def build(c: Connection, profile: RigProfile, paths: RigPaths | None = None, cache: str | None = None,
          backend: str = "auto", jobs: int | None = None, timeout: int = BUILD_TIMEOUT_S) -> dict:
    """Build (or reuse) llama.cpp on the rig for its GPU; return the manifest, also kept on the rig."""
    paths = paths or RigPaths()
    upload_helpers(c, paths)
    arch = gpu_arch(c) if backend in ("auto", "cuda") else None
    if backend == "auto":
        backend = "cuda" if arch else "cpu"
    if backend == "cuda" and not arch:
        raise ProvisionError("build: backend cuda asked for, but nvidia-smi reports no GPU on the rig")
    cache = cache or paths.cache
    print(f"[build] {backend}{' sm_' + arch if arch else ''} in {cache} (progress below; cached builds return at once)",
          flush=True)
    command = build_command(paths, profile, backend, arch, cache, jobs)
    result = run(c, f"mkdir -p {shlex.quote(cache)} && {command}", timeout=timeout, hide=False)
    manifest = parse_manifest(result.stdout)
    server = manifest["binaries"]["llama-server"]
    devices = list_devices(c, server)
    if backend == "cuda" and "CUDA" not in devices:
        raise ProvisionError(f"build: {server} --list-devices shows no CUDA device; it printed:\n{devices.strip()}")
    manifest["devices"] = devices.strip()
    upload_text(c, json.dumps(manifest, indent=2), paths.build_manifest)
    print(f"[build] llama-server at {server} ({'cached' if manifest.get('cached') else 'built'}); "
          f"manifest kept at {paths.build_manifest}", flush=True)
    return manifest


def read_build_manifest(c: Connection, paths: RigPaths) -> dict:
    result = run(c, f"cat {shlex.quote(paths.build_manifest)}", warn=True)
    if not result.ok:
        raise ProvisionError(f"no build manifest at {paths.build_manifest} on the rig; run the build step first")
    return json.loads(result.stdout)
