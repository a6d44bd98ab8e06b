"""The build manifest, typed: what the build script writes is what every reader gets."""

from __future__ import annotations

import json

import pytest

from core.build_manifest import BuildManifest
from core.errors import LlamaCppError
from llamacpp.build import build_llama_cpp

FIELDS = {"key": "abc", "source": "sha256:x", "source_tree": "/src", "backend": "cuda", "cuda_arch": "90",
          "cmake_options": ["-DGGML_CUDA=ON"], "targets": ["llama-server"], "binaries": {"llama-server": "/b/s"},
          "build_seconds": 247.0, "jobs": 16, "machine": "x86_64", "built_at": "2026-12-01T00:00:00Z"}


def test_the_run_manifest_entry_comes_from_the_build_manifest() -> None:
    info = BuildManifest.parse(json.dumps(FIELDS), "test").build_info()
    assert (info.source, info.backend, info.cuda_arch, info.key, info.build_seconds) == (
        "sha256:x", "cuda", "90", "abc", 247.0)
    assert info.cmake_options == ["-DGGML_CUDA=ON"]


def test_a_missing_binary_and_a_bad_manifest_are_clear_errors() -> None:
    manifest = BuildManifest.parse(FIELDS, "test")
    with pytest.raises(LlamaCppError, match="has no llama-bench .it built llama-server.; rebuild"):
        manifest.binary("llama-bench")
    with pytest.raises(LlamaCppError, match="^m.json: the build manifest is not valid JSON"):
        BuildManifest.parse("{", "m.json")
    with pytest.raises(LlamaCppError, match="^m.json: jobs: Field required"):
        BuildManifest.parse({k: v for k, v in FIELDS.items() if k != "jobs"}, "m.json")


def test_the_shared_cpu_build_reads_back(llama_build: BuildManifest) -> None:
    """What the real build script wrote validates, and a second call is a cache hit of the same key."""
    again = build_llama_cpp(backend="cpu")
    assert again.cached and again.key == llama_build.key and again.binaries == llama_build.binaries


def test_an_unknown_backend_is_refused_before_anything_runs(tmp_path) -> None:
    with pytest.raises(LlamaCppError, match="backend 'tpu' is not one of auto, cpu, cuda"):
        build_llama_cpp(backend="tpu", cache=tmp_path)
    assert not any(tmp_path.iterdir())
