"""Continue an interrupted sweep in a new, linked run directory (``rigbench sweep --resume``).

A spot rig can be reclaimed mid-sweep; the run then ends ``interrupted`` with
``last_complete_step``. The remaining steps run with the same load settings (read from the
old manifest, so nothing the user typed the first time has to be typed again), against the
same or a new server, into a sibling run directory. The two point at each other
(``resumed_from`` on the new one, ``linked_runs`` on both), and ``analysis.load`` joins the
chain back into one sweep. A new run rather than appending to the old one keeps every run
directory written by exactly one sweep process, so its shards, telemetry and manifest agree.
"""

from __future__ import annotations

import contextlib
import shlex

from core.errors import LoadTestError, RunDirError
from core.rundir import RunDir, RunManifest, ServerInfo, new_manifest, server_at


def remaining_steps(manifest: RunManifest) -> list[int] | list[float]:
    """User counts (or, open loop, arrival rates) of the steps after the last complete one (a
    half-done step runs again; an open-loop step replays the same arrival times, which are
    seeded by the run's seed and the step's rate)."""
    if manifest.load is None:
        raise LoadTestError(f"{manifest.run_id}: the manifest has no load settings; it was not written by a sweep")
    done = -1 if manifest.last_complete_step is None else manifest.last_complete_step
    steps = manifest.load.rate_steps if manifest.load.open_loop else manifest.load.user_steps
    return steps[done + 1 :]


def resume_url(manifest: RunManifest, url: str | None) -> str:
    """``--url`` if given (a new rig), else the server the interrupted run used, as it reached it (its
    scheme, an IPv6 host in brackets)."""
    if url:
        return url
    if manifest.server is None or not manifest.server.host:
        raise LoadTestError(f"{manifest.run_id}: the manifest names no server; pass --url http://HOST:PORT")
    return manifest.server.url


def check_resumable(old: RunDir) -> RunManifest:
    """The manifest of a run that can be resumed; refuses a run that is complete or still running
    (nothing to resume, or a sweep may still be writing it) with what to do instead."""
    manifest = old.read_manifest()
    if manifest.status == "running":
        raise LoadTestError(
            f"{old.path}: status is running; a sweep may still be writing it. Wait for it to end "
            "(it leaves complete, interrupted or failed), then resume"
        )
    if manifest.status == "complete":
        raise LoadTestError(f"{old.path}: the sweep is complete; there is nothing to resume")
    for name in manifest.linked_runs:
        with contextlib.suppress(RunDirError):
            if RunDir(old.path.parent / name).read_manifest().resumed_from == manifest.run_id:
                raise LoadTestError(
                    f"{old.path}: already resumed by {name}; resume that run instead if it was interrupted too"
                )
    if not remaining_steps(manifest):
        raise LoadTestError(f"{old.path}: every step completed (status {manifest.status}); there is nothing to resume")
    return manifest


def go_on_command(run: RunDir, url: str | None = None) -> str | None:
    """The command that runs a stopped run's remaining steps (``rigbench sweep --resume RUN``, with ``--url
    URL`` where its server is gone: ``url`` says what to write there), for every run ``--resume`` takes
    (:func:`check_resumable`: an interrupted or a failed one, its failed step run again); None for the others
    (complete, still running, already resumed or with nothing left to run)."""
    try:
        check_resumable(run)
    except (LoadTestError, RunDirError):
        return None
    return f"rigbench sweep --resume {shlex.quote(str(run.path))}" + (f" --url {url}" if url else "")


def start_resumed_run(old: RunDir, url: str | None) -> tuple[RunDir, str]:
    """Create the linked run for the rest of ``old``'s sweep; returns it and the server URL."""
    manifest = check_resumable(old)
    steps = remaining_steps(manifest)
    assert manifest.load is not None
    server_url = resume_url(manifest, url)
    server = manifest.server or ServerInfo(args=[], host="", port=0)
    reached = server_at(server_url)
    resumed = new_manifest(
        f"{manifest.profile}-resumed",
        manifest.profile,
        load=manifest.load.remaining(manifest.load.step_count - len(steps)),
        server=server.model_copy(update={"host": reached.host, "port": reached.port, "scheme": reached.scheme}),
        rig=manifest.rig,
        build=manifest.build,
        model=manifest.model,
        drafter=manifest.drafter,
        resumed_from=manifest.run_id,
        linked_runs=[old.path.name],
    ).model_copy(update={"repeat": manifest.repeat})  # the same repeat of its arm, its remaining steps
    new = RunDir.create(old.path.parent, resumed)
    old.update_manifest(linked_runs=[*manifest.linked_runs, new.path.name])
    return new, server_url
