"""What a llama.cpp build left behind: the build script's manifest, typed.

The build script (``llamacpp/build_script.py``) runs alone with the standard library, on this
machine or on a bare rig, and writes ``build_manifest.json`` beside its binaries. Everything
that serves, benchmarks or records a build reads that file through this model, so the
binaries' paths and the run manifest's ``build`` entry come from one definition.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field, ValidationError

from core.errors import LlamaCppError
from core.rundir.models import BuildInfo, PatchInfo
from core.strict import Strict
from core.validation import describe_validation_error


class CompilerCacheStats(Strict):
    """What the compiler cache did for one compile (the build script's ``compiler_cache``)."""

    tool: str = Field(description="the cache and its version, e.g. 'ccache 4.7.5'")
    folder: str = Field(description="where its objects are kept (under the project's cache root)")
    hits: int = Field(ge=0, description="compiles answered from the cache")
    misses: int = Field(ge=0, description="compiles that ran the compiler")
    hit_rate: float | None = Field(None, ge=0, le=1, description="hits / (hits + misses); None with no compile")


class BuildManifest(Strict):
    """One build's manifest; ``build_seconds`` is the compile that made the build, and the ``*_seconds`` fields after
    ``uploaded_to`` are what the build step that returned it spent, timed on the caller's side around the commands it
    ran on the rig (None for a phase that did not happen, and in manifests written before they were recorded)."""

    key: str = Field(description="hash of source, backend, GPU arch, options, targets and machine")
    source: str = Field(description="sha256:<sdist digest> or git:<commit>")
    source_tree: str
    backend: Literal["cpu", "cuda"]
    cuda_arch: str | None = None
    cmake_options: list[str]
    patches: list[PatchInfo] = Field(default_factory=list, description="applied to the source, in order")
    targets: list[str]
    binaries: dict[str, str]
    build_seconds: float
    jobs: int
    machine: str
    built_at: str
    cached: bool = Field(False, description="this call reused a finished build")
    compiler_cache: CompilerCacheStats | None = Field(
        None, description="the compiler cache this build compiled through; None when it compiled without one"
    )
    devices: str | None = Field(None, description="llama-server --list-devices, where the build was checked")
    restored_from: str | None = Field(
        None, description="the s3:// URI this call restored the build from instead of compiling it"
    )
    uploaded_to: str | None = Field(
        None, description="the s3:// URI this call uploaded the build to, for the next rigs to restore"
    )
    compile_seconds: float | None = Field(
        None, ge=0, description="this call's configure and compile (build_seconds); None when it reused a finished "
        "build, whose build_seconds is the compile that made it, possibly on another rig"
    )
    restore_seconds: float | None = Field(
        None, ge=0, description="this call's restore from the store: the archive's download to the rig and the build "
        "script's --restore, also when it failed and the rig compiled instead; None when nothing was restored"
    )
    pack_seconds: float | None = Field(
        None, ge=0, description="this call's --pack of the build on the rig for the store; None when nothing was packed"
    )
    upload_seconds: float | None = Field(
        None, ge=0, description="this call's PUT of the packed archive from the rig to the store, also when it failed; "
        "None when nothing was sent"
    )

    @classmethod
    def parse(cls, data: dict | str, source: str) -> BuildManifest:
        """Validate a manifest (a dict, or its JSON text); ``source`` names where it came from."""
        try:
            payload = json.loads(data) if isinstance(data, str) else data
            return cls.model_validate(payload)
        except json.JSONDecodeError as error:
            raise LlamaCppError(f"{source}: the build manifest is not valid JSON ({error})") from None
        except ValidationError as error:
            raise LlamaCppError(describe_validation_error(error, source)) from None

    def binary(self, name: str) -> str:
        try:
            return self.binaries[name]
        except KeyError:
            raise LlamaCppError(
                f"the llama.cpp build {self.key} has no {name} (it built {', '.join(sorted(self.binaries))}); "
                "rebuild with the default targets"
            ) from None

    def build_info(self) -> BuildInfo:
        """The run manifest's ``build`` entry."""
        return BuildInfo(
            source=self.source,
            backend=self.backend,
            cuda_arch=self.cuda_arch,
            cmake_options=self.cmake_options,
            patches=self.patches,
            build_seconds=self.build_seconds,
            key=self.key,
        )
