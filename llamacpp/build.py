"""The pinned llama.cpp built (or reused) on this machine, in the project's cache.

The build itself is the standalone script's (so a rig builds the same way); this module gives
it the one cache root, turns its failure into a one-line error, and returns the typed
manifest. ``BUILD_SCRIPT`` is the file a rig receives.
"""

from __future__ import annotations

from pathlib import Path

from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.errors import LlamaCppError
from llamacpp import build_script

BUILD_SCRIPT = Path(build_script.__file__).resolve()
BACKENDS = ("auto", "cpu", "cuda")
PATCHES = Path(__file__).resolve().parent / "patches"  # llama.cpp patches a profile may name


def patch_files(names: list[str]) -> list[Path]:
    """The patch files a profile's ``llama_cpp.patches`` names, in order; an unknown name is refused
    with the ones the project has."""
    files = []
    for name in names:
        path = PATCHES / f"{name}.patch"
        if not path.is_file():
            known = ", ".join(sorted(p.stem for p in PATCHES.glob("*.patch"))) or "none"
            raise LlamaCppError(f"llama_cpp.patches: no patch {name!r} in {PATCHES} (the project has: {known})")
        files.append(path)
    return files


def build_llama_cpp(
    source: dict | None = None,
    backend: str = "auto",
    *,
    arch: str | None = None,
    targets: list[str] | None = None,
    extra_options: list[str] | None = None,
    cache: Path | None = None,
    jobs: int | None = None,
    patches: list[str] | None = None,
) -> BuildManifest:
    """Build llama.cpp for this machine (a cache hit after the first time) and return its manifest;
    ``patches`` are names of the project's patches (``patch_files``)."""
    if backend not in BACKENDS:
        raise LlamaCppError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    files = patch_files(patches or [])
    try:
        manifest = build_script.build(
            cache or cache_root(), source, backend, arch, targets, extra_options, jobs, files
        )
    except build_script.BuildError as error:
        raise LlamaCppError(f"llama.cpp build: {error}") from None
    return BuildManifest.parse(manifest, "llama.cpp build")
