"""Steps ``project``, ``sweep`` and ``fetch``: load the rig from the rig itself, then copy results home.

The sweep runs ON the rig against llama-server on 127.0.0.1, so no WAN latency enters the
timings; it is the same ``rigbench sweep`` command a user runs locally, from the project
installed on the rig (``project`` puts this checkout there in a virtualenv). Run
directories land in ``<work>/rigbench/results/runs`` and are copied into local ``runs/``;
the NVMe folder is wiped when the instance stops, so copy results before ``pulumi destroy``.

A profile served as several replicas is swept as one server: the rig's sweep gets the replicas
(URL, slots, GPU, CPUs) as ``--replicas-file``, so its manifest lists them and user i goes to
replica i mod N. The supervisor restarts a llama-server that dies, which the load may never
notice (the other replicas go on answering; a restarted one answers again), so the sweep counts
each service's exits before and after: a server or replica that died meanwhile fails the run,
here and in the rig's copy of its manifest.

The rig's sweep watches the spot watcher's marker in the rig's work folder (``RigPaths.spot_marker``, where
the stack's user data points the watcher, whatever the folder): a two-minute notice stops it at its last
complete step, and the step brings the interrupted run home and says how to finish it on a new rig
(``provision.resume``).
"""

from __future__ import annotations

import io
import json
import os
import shlex
import stat
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fabric import Connection
from pydantic import ValidationError

from core.errors import ProvisionError
from core.load_file import load_fields_text
from core.profile import RigProfile
from core.rundir import RigInfo, RunDir
from core.rundir.capacity_search import SearchResult, is_search, read_search, write_search
from core.rundir.columns import parse_shards
from core.rundir.models import TraceSource
from core.rundir.quality import EvalManifest, LadderManifest
from core.rundir.quality_files import EVAL_MANIFEST, LADDER_MANIFEST, EvalDir, LadderDir
from core.sweep_result import SweepResult
from core.wording import counted
from provision.connection import describe_host, privileged, rig_step, run, upload_text
from provision.rig_paths import RigPaths
from provision.run_metadata import ModelProvenance, annotate_runs, rig_facts
from provision.serve import ServeState, exit_counts, exits_since, read_state

REPO_ROOT = Path(__file__).resolve().parent.parent
# what `pip install` of the checkout needs: the packages pyproject installs, and its readme
PROJECT_PARTS = ("pyproject.toml", "README.md", "core", "infra", "provision", "llamacpp", "loadtest", "quality",
                 "analysis", "rigbench")
SWEEP_TIMEOUT_S = 4 * 3600
INSTALL_TIMEOUT_S = 1800


def project_archive() -> bytes:
    """This checkout's sources (no caches, runs or virtualenvs) as a tar.gz."""
    buffer = io.BytesIO()

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if "__pycache__" in info.name or info.name.endswith(".pyc") else info

    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for part in PROJECT_PARTS:
            if (REPO_ROOT / part).exists():
                archive.add(REPO_ROOT / part, arcname=f"rigbench-src/{part}", filter=keep)
    return buffer.getvalue()


def rig_rigbench(paths: RigPaths) -> str:
    return f"{paths.root}/venv/bin/rigbench"


@rig_step("project")
def install_project(c: Connection, paths: RigPaths | None = None, timeout: int = INSTALL_TIMEOUT_S) -> str:
    """Install this checkout on the rig in ``<work>/rigbench/venv``; return its ``rigbench`` path."""
    paths = paths or RigPaths()
    source = f"{paths.root}/rigbench-src"
    run(c, f"mkdir -p {shlex.quote(paths.root)} && rm -rf {shlex.quote(source)}")
    c.put(io.BytesIO(project_archive()), remote=f"{paths.root}/rigbench-src.tar.gz")
    venv = f"{paths.root}/venv"
    run(c, f"tar -xzf {shlex.quote(paths.root)}/rigbench-src.tar.gz -C {shlex.quote(paths.root)}")
    if not run(c, f"test -x {venv}/bin/python || python3 -m venv {venv}", timeout=300, warn=True).ok:
        # Ubuntu's python3 lacks ensurepip until python3-venv is installed.
        print("[project] python3 -m venv failed; installing python3-venv", flush=True)
        run(c, f"rm -rf {venv} && " + privileged(c, "env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
                                                    "python3-venv"), timeout=600, hide=False)
        run(c, f"python3 -m venv {venv}", timeout=300)
    print(f"[project] pip install {source} into {venv} (first time: a few minutes)", flush=True)
    run(c, f"{venv}/bin/python -m pip install -q --upgrade pip && {venv}/bin/python -m pip install -q {source}",
        timeout=timeout, hide=False)
    return rig_rigbench(paths)


def upload_profile(c: Connection, profile: RigProfile, paths: RigPaths) -> str:
    """The profile file on the rig, so the rig's sweep reads exactly the local one."""
    if not profile.source_path:
        raise ProvisionError(f"sweep: profile {profile.name} has no file to copy to the rig")
    remote = f"{paths.root}/profiles/{profile.name}.toml"
    run(c, f"mkdir -p {shlex.quote(paths.root)}/profiles")
    c.put(profile.source_path, remote=remote)
    return remote


@rig_step("sweep")
def sweep(c: Connection, profile: RigProfile, load: dict[str, Any], paths: RigPaths | None = None,
          search: list[str] | None = None, rigbench: str | None = None, local_runs: Path | str = "runs",
          timeout: int = SWEEP_TIMEOUT_S, stack_outputs: dict | None = None,
          provenance: Mapping[str, ModelProvenance] | None = None) -> list[Path]:
    """Run ``rigbench sweep`` on the rig against its llama-server; copy the run directories into ``local_runs``.

    ``load``: the load as a load file's fields (``core.load_file``), checked here; it goes to the rig as that
    file (a trace it names copied there first, named by its digest), and the rig's sweep reads it with
    ``--load``. ``search``: the options of a capacity search (``--find-max users --max-load 64``), whose folder
    comes home with its probes' runs. Which runs the sweep made comes back as its ``--result`` file.

    The copied manifests get the build, model digests and GPU from the rig, whether the servers ran under CUDA
    MPS from the serve step's record, the instance,
    market and price from ``stack_outputs`` when given, and the source and terms of a model fetched
    here from ``provenance`` (by role). The rig's sweep watches the spot watcher's marker in the work folder
    (``paths.spot_marker``): a notice stops it ``interrupted`` at its last complete step, and this raises
    :class:`RigSweepInterrupted` once the runs are home.
    """
    paths = paths or RigPaths()
    state = served_state(c, paths, "sweep")
    rigbench = checked_rigbench(c, paths, rigbench, "sweep")
    remote_profile = upload_profile(c, profile, paths)
    remote_load = upload_load(c, load, paths)
    remote_result = f"{paths.root}/sweep-result.json"
    command = [rigbench, "sweep", "--url", f"http://127.0.0.1:{state.port}", "--profile", remote_profile,
               "--load", remote_load, "--runs-dir", paths.runs, "--no-progress", "--result", remote_result,
               "--interruption-marker", paths.spot_marker, *upload_replicas(c, state, paths), *(search or [])]
    return sweep_on_rig(c, RigSweep("sweep", command, remote_result, local_runs, profile), paths, state,
                        timeout=timeout, stack_outputs=stack_outputs, provenance=provenance)


class RigSweepInterrupted(ProvisionError):
    """A spot notice stopped the rig's sweep. Its runs are home, ``interrupted`` with their records kept;
    ``copied`` names them (and the message how to finish them), for a caller that goes on with
    ``rigbench provision resume`` on another rig."""

    exit_code = 1  # the runs were made and came home; they are not complete

    def __init__(self, message: str, copied: list[Path]) -> None:
        super().__init__(message)
        self.copied = copied


@dataclass(frozen=True)
class RigSweep:
    """One ``rigbench sweep`` to run on the rig: which step starts it (its messages name it), the command, the
    ``--result`` file it writes there, the local folder its runs come home to, and the served profile (the
    rig's facts are read for it). ``earlier``: runs fetched with it but not annotated again (the run a resumed
    one continues, whose manifest the rig's sweep linked to the new run)."""

    step: str
    command: list[str]
    result_file: str
    local_runs: Path | str
    profile: RigProfile
    earlier: tuple[str, ...] = ()


def served_state(c: Connection, paths: RigPaths, step: str) -> ServeState:
    """What the serve step recorded on the rig; refused where nothing is served."""
    state = read_state(c, paths)
    if state is None:
        raise ProvisionError(f"{step}: nothing is served on the rig; run the serve step first")
    return state


def checked_rigbench(c: Connection, paths: RigPaths, rigbench: str | None, step: str) -> str:
    """The rig's ``rigbench`` (the project step's, unless given); refused where it is not there."""
    rigbench = rigbench or rig_rigbench(paths)
    if not run(c, f"test -x {shlex.quote(rigbench)}", warn=True).ok:
        raise ProvisionError(f"{step}: no rigbench at {rigbench} on the rig; run the project step first")
    return rigbench


def sweep_on_rig(c: Connection, sweep: RigSweep, paths: RigPaths, state: ServeState, *, timeout: int,
                 stack_outputs: dict | None, provenance: Mapping[str, ModelProvenance] | None) -> list[Path]:
    """Run ``sweep`` on the rig and bring its runs home annotated with the rig's facts; return their folders.

    A server or replica that died meanwhile fails the runs (here and on the rig); a spot notice during the
    sweep raises :class:`RigSweepInterrupted`; any other non-zero exit is a ProvisionError with the command's
    last lines. Each error comes after the runs are copied, and names them."""
    step = sweep.step
    exits_before = exit_counts(c, paths, state)
    notice_before = marker_stamp(c, paths)
    print(f"[{step}] on the rig: {' '.join(shlex.quote(part) for part in sweep.command)}", flush=True)
    result = run(c, f"mkdir -p {shlex.quote(paths.runs)} && rm -f {shlex.quote(sweep.result_file)} && "
                 + " ".join(shlex.quote(p) for p in sweep.command), timeout=timeout, hide=False, warn=True)
    if result.exited in (None, -1):  # the channel closed without an exit status: the link, not the sweep
        raise ProvisionError(
            f"{step}: lost the SSH session to {describe_host(c)} while `rigbench sweep` ran on the rig (no exit "
            "status came back); the sweep goes on there: once it has ended, `rigbench provision fetch` copies its runs"
        )
    made = read_result(c, sweep.result_file)
    # a capacity search's folder holds its probes' runs; else the runs themselves
    run_ids = [Path(made.search).name] if made.search else [Path(path).name for path in made.runs]
    local_runs = Path(sweep.local_runs)
    fetched = fetch.__wrapped__(c, paths, local_runs, [*sweep.earlier, *run_ids]) if run_ids else []
    copied = [path for path in fetched if path.name in run_ids]
    runs = [run_dir for path in copied for run_dir in runs_under(path)]
    if runs:
        mps = state.mps.info() if state.mps is not None else None
        annotate_runs(runs, rig_facts(c, sweep.profile, paths, provenance, mps), stack_outputs)
    died = exits_since(c, paths, state, exits_before) + unanswered_replicas(runs, len(state.replicas))
    if died:
        detail = "; ".join(died)
        fail_runs(c, paths, runs, detail, local_runs)
        for path in copied:
            if is_search(path):
                fail_search(c, paths, path, detail)
        where = f" (runs copied to {', '.join(map(str, copied))}, marked failed)" if copied else ""
        raise ProvisionError(f"{step}: during the sweep {detail}{where}; the load it measured was not the served "
                             "configuration's, so the run failed")
    if not result.ok:
        notice = spot_notice(c, paths, notice_before)
        stopped = [run_dir for run_dir in runs if run_status(run_dir) == "interrupted"]
        if notice is not None and stopped:
            raise RigSweepInterrupted(interrupted_message(step, notice, stopped, sweep.profile, made.search), copied)
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-10:])
        raise ProvisionError(f"{step}: `rigbench sweep` on the rig exited {result.exited}"
                             f"{' (runs copied to ' + ', '.join(map(str, copied)) + ')' if copied else ''}:\n{tail}")
    return copied


def marker_stamp(c: Connection, paths: RigPaths) -> str | None:
    """The spot marker's inode and modification time on the rig (None: no marker): the watcher writes it whole
    under a new inode, so a stamp that changed across a sweep is a notice given during it."""
    found = run(c, f"stat -c '%i %Y' {shlex.quote(paths.spot_marker)}", warn=True)
    return found.stdout.strip() if found.ok else None


def spot_notice(c: Connection, paths: RigPaths, before: str | None) -> str | None:
    """What the spot marker says (when detected, the action and its time), where it was written since ``before``;
    None where no notice came during the sweep."""
    now = marker_stamp(c, paths)
    if now is None or now == before:
        return None
    text = run(c, f"cat {shlex.quote(paths.spot_marker)}", warn=True).stdout
    try:
        notice = json.loads(text)
    except ValueError:
        return f"{paths.spot_marker}"
    action = notice.get("instance_action") if isinstance(notice, dict) else None
    said = [f"detected at {notice['detected_at']}"] if isinstance(notice, dict) and notice.get("detected_at") else []
    if isinstance(action, dict):
        said.append(f"{action.get('action', 'action')} at {action.get('time', '?')}")
    return f"{paths.spot_marker}{': ' + ', '.join(said) if said else ''}"


def interrupted_message(step: str, notice: str, stopped: list[Path], profile: RigProfile,
                        search: str | None) -> str:
    """What stopped the rig's sweep, what came home and how to finish it on another rig."""
    said = []
    for run_dir in stopped:
        manifest = RunDir(run_dir).read_manifest()
        total = manifest.load.step_count if manifest.load is not None else len(manifest.steps)
        done = 0 if manifest.last_complete_step is None else manifest.last_complete_step + 1
        said.append(f"{run_dir} ({done} of {counted(total, 'step')} complete)")
    head = (f"{step}: a spot interruption notice ({notice}) stopped the rig's sweep; copied here, interrupted "
            f"with their records kept: {', '.join(said)}")
    if search is not None:
        return head + "; a capacity search is not resumed: run the search again on a new rig"
    runs = ",".join(str(run_dir) for run_dir in stopped)
    return (head + "; the rig is being reclaimed: on a new rig (pulumi up, then `rigbench provision setup`, `up` and "
            f"`project`) finish the sweep with `rigbench provision --profile {shlex.quote(profile.command_name)} "
            f"resume --run {shlex.quote(runs)}`")


def upload_load(c: Connection, load: dict[str, Any], paths: RigPaths) -> str:
    """The load as a file on the rig, its trace (a file here) copied there first and named by its digest: the
    rig's sweep replays exactly the file read here, and checks it against the sha256 the load names."""
    load = dict(load)
    trace = load.get("trace")
    if trace is not None:
        source = TraceSource.model_validate(trace)
        local = Path(source.path)
        if not local.is_file():
            raise ProvisionError(f"sweep: trace {local}: no such file here to copy to the rig")
        remote = f"{paths.root}/traces/{source.sha256[:16]}-{local.name}"
        run(c, f"mkdir -p {shlex.quote(paths.root)}/traces")
        c.put(str(local), remote=remote)
        load["trace"] = source.model_copy(update={"path": remote})
    remote_load = f"{paths.root}/load.json"
    upload_text(c, load_fields_text(load), remote_load)
    return remote_load


def read_result(c: Connection, remote: str) -> SweepResult:
    """What the rig's sweep made, from its ``--result`` file (nothing, where the sweep made no file)."""
    found = run(c, f"cat {shlex.quote(remote)}", warn=True)
    if not found.ok:
        return SweepResult()
    try:
        return SweepResult.model_validate_json(found.stdout)
    except ValidationError as error:
        raise ProvisionError(f"sweep: the rig's {remote} is not a sweep result: {error.errors()[0]['msg']}") from None


def runs_under(path: Path) -> list[Path]:
    """The run directories a fetched folder holds: itself, or a capacity search's probes (none yet: none)."""
    if (path / RunDir.MANIFEST).is_file():
        return [path]
    return sorted(child for child in path.iterdir() if (child / RunDir.MANIFEST).is_file()) if path.is_dir() else []


def run_status(run_dir: Path) -> str | None:
    """The run's status as its copied manifest says, None where it cannot be read."""
    try:
        return RunDir(run_dir).read_manifest().status
    except (OSError, ValueError):
        return None


def upload_replicas(c: Connection, state: ServeState, paths: RigPaths) -> list[str]:
    """The rig's replicas as a file there for ``rigbench sweep --replicas-file`` (on the rig's loopback, whatever
    they listen on); no options for one server."""
    if not state.replicas:
        return []
    listed = [{"index": replica.index, "url": f"http://127.0.0.1:{replica.port}", "slots": replica.slots,
               "gpu": replica.gpu, "cpus": replica.cpus} for replica in state.replicas]
    remote = f"{paths.serve}/replicas.json"
    upload_text(c, json.dumps(listed, indent=2), remote)
    return ["--replicas-file", remote]


def unanswered_replicas(copied: list[Path], replicas: int) -> list[str]:
    """One line per complete run in which a replica was sent requests and answered none (records name their
    replica): a sweep that spread its users must not pass for complete without one of its servers. A replica
    sent nothing (a run of fewer users than replicas, as a capacity search's first probes) is not one."""
    lines = []
    for path in copied if replicas > 1 else []:
        if RunDir(path).read_manifest().status != "complete":
            continue
        table = parse_shards(RunDir(path)).table
        sent: dict[int, int] = {}
        answered = set()
        for replica, kind, cut in zip(table.column("replica").to_pylist(), table.column("error_kind").to_pylist(),
                                      table.column("interrupted").to_pylist(), strict=True):
            if replica is None:
                continue
            sent[int(replica)] = sent.get(int(replica), 0) + 1  # a column of numbers read back as floats
            if kind is None and not cut:
                answered.add(int(replica))
        lines += [f"replica {index} answered none of the {counted(count, 'request')} of {path.name} sent to it"
                  for index, count in sorted(sent.items()) if index not in answered]
    return lines


def fail_runs(c: Connection, paths: RigPaths, copied: list[Path], detail: str, local_runs: Path) -> None:
    """Mark the copied runs failed with ``detail`` (what the sweep said, if it failed too, kept after it) and put
    each manifest back on the rig, so a later fetch and the rig's copy say the same."""
    for path in copied:
        rundir = RunDir(path)
        manifest = rundir.read_manifest()
        said = detail if manifest.status == "complete" or not manifest.status_detail else (
            f"{detail}; the sweep itself: {manifest.status} ({manifest.status_detail})")
        rundir.update_manifest(status="failed", status_detail=said[:2000])
        c.put(str(path / RunDir.MANIFEST), remote=f"{paths.runs}/{path.relative_to(local_runs)}/{RunDir.MANIFEST}")


def fail_search(c: Connection, paths: RigPaths, folder: Path, detail: str) -> None:
    """A search whose server failed under it found nothing to plan from: every probe failed, the result says
    why, here and on the rig (``rigbench plan`` reads the result, not the probes' manifests)."""
    search = read_search(folder)
    probes = [probe.model_copy(update={"status": "failed", "meets": False}) for probe in search.probes]
    result = SearchResult(largest_meeting=None, smallest_missing=None, reason="probe_failed",
                          detail=f"the server failed under the search: {detail}"[:2000])
    written = write_search(folder, search.model_copy(update={"probes": probes, "result": result}))
    c.put(str(written), remote=f"{paths.runs}/{folder.name}/{written.name}")


def copy_tree(sftp, remote: str, local: Path) -> int:
    """Copy ``remote`` into ``local``; return files copied. A file already here with the rig's size and
    modification time is skipped (a manifest rewritten at the same size is not); each copy lands whole (a
    temporary name, then renamed) with the rig's time; a file the rig removed between the listing and the
    copy (a sweep still finishing drops its empty tables) is skipped, not an error."""
    local.mkdir(parents=True, exist_ok=True)
    copied = 0
    for entry in sftp.listdir_attr(remote):
        source, target = f"{remote}/{entry.filename}", local / entry.filename
        if stat.S_ISDIR(entry.st_mode):
            copied += copy_tree(sftp, source, target)
        elif not _same_file(target, entry):
            partial = target.with_name(f".{target.name}.part")
            try:
                sftp.get(source, str(partial))
            except FileNotFoundError:
                partial.unlink(missing_ok=True)
                continue
            os.utime(partial, (entry.st_atime or entry.st_mtime, entry.st_mtime))
            partial.replace(target)
            copied += 1
    return copied


def _same_file(local: Path, entry) -> bool:
    """The copy here has the rig file's size and modification time (whole seconds, what SFTP carries)."""
    if not local.is_file():
        return False
    here = local.stat()
    return here.st_size == entry.st_size and entry.st_mtime is not None and int(here.st_mtime) == int(entry.st_mtime)


def rig_annotations(local: Path) -> dict:
    """What an earlier copy of the run wrote into its manifest here (the rig's build, model digests, GPU,
    instance and price, its servers' MPS), so copying the rig's own manifest again does not take it away."""
    if not (local / RunDir.MANIFEST).is_file():
        return {}
    manifest = RunDir(local).read_manifest()
    if manifest.rig.kind != "aws" and manifest.build is None:
        return {}
    fields = {"rig": manifest.rig, "build": manifest.build, "model": manifest.model}
    if manifest.server is not None and manifest.server.mps is not None:
        fields["server"] = manifest.server
    return fields | ({"drafter": manifest.drafter} if manifest.drafter is not None else {})


def folder_rig(local: Path) -> RigInfo | None:
    """The rig a ladder's or an eval's folder here names; None for other folders or a damaged manifest (the
    fresh copy from the rig replaces it)."""
    for path, model in ((local / LADDER_MANIFEST, LadderManifest), (local / EVAL_MANIFEST, EvalManifest)):
        if path.is_file():
            try:
                return model.model_validate_json(path.read_text()).rig
            except ValueError:
                return None
    return None


def quality_rig(local: Path) -> RigInfo | None:
    """The instance a ladder's or an eval's folder here was annotated with, so copying the rig's own manifests
    again does not take it away."""
    rig = folder_rig(local)
    return rig if rig is not None and rig.kind == "aws" else None


def annotate_quality(local: Path, rig: RigInfo) -> None:
    """Write ``rig`` into a ladder's manifest and every rung's eval manifest, or into an eval's."""
    if (local / LADDER_MANIFEST).is_file():
        ladder = LadderDir(local)
        ladder.write_manifest(ladder.read_manifest().model_copy(update={"rig": rig}))
        folders = [folder for folder in (local / "rungs").glob("*") if (folder / EVAL_MANIFEST).is_file()]
    else:
        folders = [local] if (local / EVAL_MANIFEST).is_file() else []
    for folder in folders:
        evaluation = EvalDir(folder)
        evaluation.write_manifest(evaluation.read_manifest().model_copy(update={"rig": rig}))


@rig_step("fetch")
def fetch(c: Connection, paths: RigPaths | None = None, local_runs: Path | str = "runs",
          run_ids: list[str] | None = None) -> list[Path]:
    """Copy run directories (all, or ``run_ids``) and bench results from the rig into ``local_runs``."""
    paths = paths or RigPaths()
    local_runs = Path(local_runs)
    sftp = c.sftp()
    try:
        available = sftp.listdir(paths.runs)
    except FileNotFoundError:
        available = []
    wanted = run_ids if run_ids is not None else sorted(available)
    missing = sorted(set(wanted) - set(available))
    if missing:
        raise ProvisionError(f"fetch: no run {', '.join(missing)} in {paths.runs} on the rig; "
                             f"runs there: {', '.join(sorted(available)) or 'none'}")
    copied = []
    for run_id in wanted:
        annotated = {run_dir: rig_annotations(run_dir) for run_dir in runs_under(local_runs / run_id)}
        kept_rig = quality_rig(local_runs / run_id)
        count = copy_tree(sftp, f"{paths.runs}/{run_id}", local_runs / run_id)
        for run_dir, fields in annotated.items():
            if fields:
                RunDir(run_dir).update_manifest(**fields)
        if kept_rig is not None:
            annotate_quality(local_runs / run_id, kept_rig)
        copied.append(local_runs / run_id)
        print(f"[fetch] {run_id}: {counted(count, 'file')} copied to {local_runs / run_id}", flush=True)
        running = [run_dir.name for run_dir in runs_under(local_runs / run_id)
                   if run_status(run_dir) == "running"]
        if running:
            print(f"[fetch] {run_id}: {', '.join(running)} still running on the rig when copied; fetch again "
                  "when it ends for the rest of its records", flush=True)
    try:
        sftp.stat(f"{paths.results}/bench")
    except FileNotFoundError:
        return copied
    count = copy_tree(sftp, f"{paths.results}/bench", local_runs / "rig-bench")
    print(f"[fetch] bench results: {counted(count, 'file')} copied to {local_runs / 'rig-bench'}", flush=True)
    return copied
