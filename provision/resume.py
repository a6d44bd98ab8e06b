"""Step ``resume``: finish on this rig the sweeps a spot notice stopped, from their copies here.

A spot notice stops the rig's sweep at its last complete step and the sweep step brings the run home
``interrupted`` (``provision.sweep``); the rig is then reclaimed, its NVMe with it. A new rig has nothing of
the run, so each run folder goes up to the rig's runs folder where it is not there already, and the rig's
own ``rigbench sweep --resume`` runs the remaining steps against its llama-server (127.0.0.1, as the sweep
did) into a linked run beside it (``resumed_from``). The linked run comes home beside the local one,
annotated like a sweep's runs, and the interrupted one again (the rig's sweep linked it to the new run), so
the analysis joins the chain from either folder.

The spot marker: a new rig has none. On the rig that got the notice it is still on disk, and the notice it
records is the one the interrupted run already answered; this step removes it before the resumed sweep
starts, so that sweep stops for a new notice only (the watcher writes one whole) and does not carry a
warning about an old one.
"""

from __future__ import annotations

import shlex
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

from fabric import Connection

from core.errors import ProvisionError
from core.profile import RigProfile
from core.rundir import RunDir
from provision.connection import remote_exists, rig_step, run
from provision.rig_paths import RigPaths
from provision.run_metadata import ModelProvenance
from provision.sweep import (
    SWEEP_TIMEOUT_S,
    RigSweep,
    RigSweepInterrupted,
    checked_rigbench,
    served_state,
    sweep_on_rig,
)


@rig_step("resume")
def resume(c: Connection, profile: RigProfile, local_runs: list[Path], paths: RigPaths | None = None,
           rigbench: str | None = None, timeout: int = SWEEP_TIMEOUT_S, stack_outputs: dict | None = None,
           provenance: Mapping[str, ModelProvenance] | None = None) -> list[Path]:
    """Run the remaining steps of each stopped run in ``local_runs`` on the rig; return the linked runs copied here.

    Each run must have been swept with ``profile``, which the rig must serve: the resumed steps are the same
    load against the same model, or the joined sweep would mix two. One run at a time; a new spot notice
    stops the loop with :class:`RigSweepInterrupted` naming the linked run to resume next.
    """
    paths = paths or RigPaths()
    state = served_state(c, paths, "resume")
    if state.profile != profile.name:
        raise ProvisionError(f"resume: the rig serves profile {state.profile}, not {profile.name}; serve "
                             f"{profile.command_name} first (`rigbench provision --profile {profile.command_name} "
                             "serve`)")
    for local in local_runs:
        swept = RunDir(local).read_manifest().profile
        if swept != profile.name:
            raise ProvisionError(f"resume: {local} was swept with profile {swept}, not {profile.name}; pass "
                                 f"--profile {swept} and serve it on the rig")
    rigbench = checked_rigbench(c, paths, rigbench, "resume")
    drop_spot_marker(c, paths)
    copied: list[Path] = []
    for position, local in enumerate(local_runs):
        remote = place_run(c, paths, Path(local))
        remote_result = f"{paths.root}/resume-result.json"
        command = [rigbench, "sweep", "--resume", remote, "--url", f"http://127.0.0.1:{state.port}",
                   "--no-progress", "--result", remote_result, "--interruption-marker", paths.spot_marker]
        sweep = RigSweep("resume", command, remote_result, Path(local).parent, profile, earlier=(Path(local).name,))
        try:
            copied += sweep_on_rig(c, sweep, paths, state, timeout=timeout, stack_outputs=stack_outputs,
                                   provenance=provenance)
        except RigSweepInterrupted as error:
            left = [str(path) for path in local_runs[position + 1:]]
            said = f"; not started: {', '.join(left)}" if left else ""
            raise RigSweepInterrupted(f"{error}{said}", [*copied, *error.copied]) from None
    return copied


def drop_spot_marker(c: Connection, paths: RigPaths) -> None:
    """Remove a spot marker left on the rig: its notice stopped the run being resumed (see the module's note)."""
    found = run(c, f"cat {shlex.quote(paths.spot_marker)}", warn=True)
    if found.ok:
        run(c, f"rm -f {shlex.quote(paths.spot_marker)}")
        print(f"[resume] removed the spot marker the interrupted sweep answered: {found.stdout.strip()}", flush=True)


def place_run(c: Connection, paths: RigPaths, local: Path) -> str:
    """The run's folder in the rig's runs folder: the rig's own copy when it has one (the rig that ran it), else
    this one uploaded (one archive, unpacked there with the files' times, so fetching it back copies only what
    the resumed sweep changed)."""
    remote = f"{paths.runs}/{local.name}"
    if remote_exists(c, f"{remote}/{RunDir.MANIFEST}"):
        print(f"[resume] {local.name}: the rig has it; resuming its copy there", flush=True)
        return remote
    archive_remote = f"{paths.runs}/.{local.name}.tar.gz"
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as archive:
        with tarfile.open(fileobj=archive, mode="w:gz") as packed:
            packed.add(local, arcname=local.name)
        archive.flush()
        run(c, f"mkdir -p {shlex.quote(paths.runs)} && rm -rf {shlex.quote(remote)}")
        c.put(archive.name, remote=archive_remote)
    run(c, f"tar -xzf {shlex.quote(archive_remote)} -C {shlex.quote(paths.runs)} && "
           f"rm -f {shlex.quote(archive_remote)}")
    print(f"[resume] {local.name}: uploaded to {remote}", flush=True)
    return remote
