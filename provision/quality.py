"""Step ``ladder``: the quantization ladder run ON the rig, against its own 127.0.0.1, then fetched.

The rig runs the same ``rigbench quality ladder`` a user runs locally, from the project the
``project`` step installed, with the rig's llama.cpp build (its cache folder), the question file
(and a ``shots_from`` exemplar file) copied from here, and the settings checked here handed over
as a file (``--settings``) naming the rig's copies; the ladder's folder lands beside the sweep
runs and is copied home the same way, so the article's L4 ladder is one command and one fetch.
``cache`` is the build step's cache folder (the rig's work folder by default), so the ladder
quantizes with the build the rig has.
"""

from __future__ import annotations

import io
import shlex
import tarfile
from pathlib import Path

from fabric import Connection

from core.errors import ProvisionError
from core.quality_settings import AskSettings, QualityEvalSettings, QualityLadderSettings, settings_file_text
from core.rundir.quality_files import EVAL_MANIFEST, LADDER_MANIFEST
from provision.connection import describe_host, rig_step, run
from provision.rig_paths import RigPaths
from provision.run_metadata import aws_rig
from provision.sweep import SWEEP_TIMEOUT_S, annotate_quality, fetch, folder_rig, rig_rigbench

SIDECAR = ".source"


def put_question_files(c: Connection, paths: RigPaths, questions: Path, settings: AskSettings,
                       name: str) -> tuple[str, str]:
    """The question file (with its source sidecar), a ``shots_from`` exemplar file and the settings onto the
    rig; the remote question file and the remote settings file, whose ``shots_from`` names the rig's copy."""
    remote_questions = f"{paths.results}/questions/{questions.name}"
    run(c, f"mkdir -p {shlex.quote(paths.results)}/questions {shlex.quote(paths.results)}/settings "
           f"{shlex.quote(paths.runs)}")
    c.put(str(questions), remote=remote_questions)
    sidecar = questions.with_name(questions.name + SIDECAR)
    if sidecar.is_file():
        c.put(str(sidecar), remote=remote_questions + SIDECAR)
    if settings.shots_from is not None:
        remote_exemplars = f"{paths.results}/questions/{settings.shots_from.name}"
        c.put(str(settings.shots_from), remote=remote_exemplars)
        settings = settings.model_copy(update={"shots_from": Path(remote_exemplars)})
    remote_settings = f"{paths.results}/settings/{name}.json"
    c.put(io.BytesIO(settings_file_text(settings).encode()), remote=remote_settings)
    return remote_questions, remote_settings


def put_earlier(c: Connection, local: Path, remote: str, manifest: str) -> bool:
    """A ladder or eval stopped on a rig that is gone resumes on the next one: what came home from the
    first goes up to the second, where the command carries on from its last finished rung or answer."""
    if not (local / manifest).is_file() or run(c, f"test -e {shlex.quote(remote)}/{manifest}", warn=True).ok:
        return False
    packed = io.BytesIO()
    with tarfile.open(fileobj=packed, mode="w:gz") as archive:
        archive.add(local, arcname=".")
    packed.seek(0)
    run(c, f"mkdir -p {shlex.quote(remote)}")
    c.put(packed, remote=f"{remote}.resume.tar.gz")
    run(c, f"tar -xzf {shlex.quote(remote)}.resume.tar.gz -C {shlex.quote(remote)} && rm "
           f"{shlex.quote(remote)}.resume.tar.gz")
    print(f"[resume] {local.name}: what came home from an earlier rig put back on this one", flush=True)
    return True


def prepare_on_rig(c: Connection, paths: RigPaths, what: str, rigbench: str | None, questions: Path,
                   settings: AskSettings, local: Path, manifest: str,
                   stack_outputs: dict | None = None) -> tuple[str, str, str]:
    """rigbench on the rig, the question files and the settings there, and what came home earlier put back:
    the rig's rigbench, the remote question file and the remote settings file. What came home from another
    instance type (a fallback) is set aside, not resumed: one ladder holds one machine's answers."""
    rigbench = rigbench or rig_rigbench(paths)
    if not run(c, f"test -x {shlex.quote(rigbench)}", warn=True).ok:
        raise ProvisionError(f"{what}: no rigbench at {rigbench} on the rig; run the project step first")
    remote_questions, remote_settings = put_question_files(c, paths, questions, settings, local.name)
    earlier = folder_rig(local) if local.is_dir() else None
    now = (stack_outputs or {}).get("instanceType")
    if earlier is not None and earlier.instance_type and now and earlier.instance_type != now:
        aside = local.with_name(f"{local.name}.{earlier.instance_type}")
        local.rename(aside)
        print(f"[resume] {local.name} came from a {earlier.instance_type}, this rig is a {now}: kept as "
              f"{aside.name}, started afresh", flush=True)
    else:
        put_earlier(c, local, f"{paths.runs}/{local.name}", manifest)
    return rigbench, remote_questions, remote_settings


def run_on_rig(c: Connection, what: str, command: list[str], environment: str, name: str, timeout: int) -> None:
    shown = " ".join(shlex.quote(part) for part in command)
    print(f"[{what}] on the rig: {shown}", flush=True)
    result = run(c, f"{environment} {shown}".strip(), timeout=timeout, hide=False, warn=True)
    if result.exited in (None, -1):
        raise ProvisionError(
            f"{what}: lost the SSH session to {describe_host(c)} while `rigbench quality {what}` ran on the rig; it "
            f"goes on there: once it has ended, `rigbench provision fetch` copies {name}"
        )
    if not result.ok:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-5:])
        raise ProvisionError(f"{what}: `rigbench quality {what}` on the rig exited {result.exited}:\n{tail}")


def fetch_annotated(c: Connection, paths: RigPaths, local_runs: Path | str, name: str,
                    stack_outputs: dict | None) -> Path:
    """Copy the folder home and write the instance it ran on (type, zone, price) into its manifests."""
    local = fetch.__wrapped__(c, paths, local_runs, [name])[0]
    rig = folder_rig(local)
    if stack_outputs and rig is not None:
        annotate_quality(local, aws_rig(stack_outputs, rig))
    return local


@rig_step("ladder")
def ladder(
    c: Connection,
    paths: RigPaths,
    questions: Path,
    source: str,
    rungs: str,
    name: str,
    settings: QualityLadderSettings | None = None,
    rigbench: str | None = None,
    local_runs: Path | str = "runs",
    cache: str | None = None,
    timeout: int = SWEEP_TIMEOUT_S,
    stack_outputs: dict | None = None,
) -> Path:
    """Run ``rigbench quality ladder SOURCE --settings`` on the rig into ``<runs>/<name>``; copy that folder into
    ``local_runs``. A ladder of that name already here and not on the rig (its rig was destroyed) is put back
    first, so it resumes rung by rung."""
    rigbench, remote_questions, remote_settings = prepare_on_rig(
        c, paths, "ladder", rigbench, questions, settings or QualityLadderSettings(), Path(local_runs) / name,
        LADDER_MANIFEST, stack_outputs)
    command = [rigbench, "quality", "ladder", source, "--questions", remote_questions, "--out",
               f"{paths.runs}/{name}", "--rungs", rungs, "--settings", remote_settings]
    run_on_rig(c, "ladder", command, f"RIGBENCH_CACHE={shlex.quote(cache or paths.cache)}", name, timeout)
    return fetch_annotated(c, paths, local_runs, name, stack_outputs)


@rig_step("eval")
def evaluate(
    c: Connection,
    paths: RigPaths,
    questions: Path,
    name: str,
    url: str,
    settings: QualityEvalSettings | None = None,
    rigbench: str | None = None,
    local_runs: Path | str = "runs",
    timeout: int = SWEEP_TIMEOUT_S,
    stack_outputs: dict | None = None,
) -> Path:
    """Run ``rigbench quality eval --url URL --settings`` on the rig (its own served model) into
    ``<runs>/<name>``; copy that folder into ``local_runs`` (resumed like the ladder)."""
    rigbench, remote_questions, remote_settings = prepare_on_rig(
        c, paths, "eval", rigbench, questions, settings or QualityEvalSettings(), Path(local_runs) / name,
        EVAL_MANIFEST, stack_outputs)
    command = [rigbench, "quality", "eval", "--url", url, "--questions", remote_questions, "--out",
               f"{paths.runs}/{name}", "--settings", remote_settings]
    run_on_rig(c, "eval", command, "", name, timeout)
    return fetch_annotated(c, paths, local_runs, name, stack_outputs)
