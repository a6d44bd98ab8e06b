"""Step ``ladder``: the quantization ladder run ON the rig, against its own 127.0.0.1, then fetched.

The rig runs the same ``rigbench ladder`` a user runs locally, from the project the ``project``
step installed, with the rig's llama.cpp build (its cache folder) and the question file (and a
``--shots-from`` exemplar file) copied from here; the ladder's folder lands beside the sweep
runs and is copied home the same way, so the article's L4 ladder is one command and one fetch.
``cache`` is the build step's cache folder (the rig's work folder by default), so the ladder
quantizes with the build the rig has.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from fabric import Connection

from core.errors import ProvisionError
from provision.connection import describe_host, rig_step, run
from provision.rig_paths import RigPaths
from provision.sweep import SWEEP_TIMEOUT_S, fetch, rig_rigbench

SIDECAR = ".source"
SHOTS_FROM = "--shots-from"


def shots_from_file(options: list[str]) -> Path | None:
    """The local exemplar file a ladder's options name (``--shots-from FILE`` or ``--shots-from=FILE``)."""
    for index, option in enumerate(options):
        if option == SHOTS_FROM and index + 1 < len(options):
            return Path(options[index + 1])
        if option.startswith(SHOTS_FROM + "="):
            return Path(option.partition("=")[2])
    return None


def shots_from_on_rig(options: list[str], remote: str) -> list[str]:
    """The options with ``--shots-from`` naming the copy on the rig: the file given is a file here."""
    pointed: list[str] = []
    skip = False
    for index, option in enumerate(options):
        if skip:
            skip = False
            continue
        if option == SHOTS_FROM and index + 1 < len(options):
            pointed += [SHOTS_FROM, remote]
            skip = True
        elif option.startswith(SHOTS_FROM + "="):
            pointed += [SHOTS_FROM, remote]
        else:
            pointed.append(option)
    return pointed


@rig_step("ladder")
def ladder(
    c: Connection,
    paths: RigPaths,
    questions: Path,
    source: str,
    rungs: str,
    name: str,
    extra: list[str] | None = None,
    rigbench: str | None = None,
    local_runs: Path | str = "runs",
    cache: str | None = None,
    timeout: int = SWEEP_TIMEOUT_S,
) -> Path:
    """Run ``rigbench quality ladder SOURCE`` on the rig into ``<runs>/<name>``; copy that folder into
    ``local_runs``."""
    rigbench = rigbench or rig_rigbench(paths)
    if not run(c, f"test -x {shlex.quote(rigbench)}", warn=True).ok:
        raise ProvisionError(f"ladder: no rigbench at {rigbench} on the rig; run the project step first")
    remote_questions = f"{paths.results}/questions/{questions.name}"
    run(c, f"mkdir -p {shlex.quote(paths.results)}/questions {shlex.quote(paths.runs)}")
    c.put(str(questions), remote=remote_questions)
    sidecar = questions.with_name(questions.name + SIDECAR)
    if sidecar.is_file():
        c.put(str(sidecar), remote=remote_questions + SIDECAR)
    extra = list(extra or [])
    exemplars = shots_from_file(extra)
    if exemplars is not None:
        remote_exemplars = f"{paths.results}/questions/{exemplars.name}"
        c.put(str(exemplars), remote=remote_exemplars)
        extra = shots_from_on_rig(extra, remote_exemplars)
    command = [
        rigbench,
        "quality",
        "ladder",
        source,
        "--questions",
        remote_questions,
        "--out",
        f"{paths.runs}/{name}",
        "--rungs",
        rungs,
        *extra,
    ]
    shown = " ".join(shlex.quote(part) for part in command)
    print(f"[ladder] on the rig: {shown}", flush=True)
    environment = f"RIGBENCH_CACHE={shlex.quote(cache or paths.cache)}"
    result = run(c, f"{environment} {shown}", timeout=timeout, hide=False, warn=True)
    if result.exited in (None, -1):
        raise ProvisionError(
            f"ladder: lost the SSH session to {describe_host(c)} while `rigbench quality ladder` ran on the rig; it "
            f"goes on there: once it has ended, `rigbench provision fetch` copies {name}"
        )
    if not result.ok:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-5:])
        raise ProvisionError(f"ladder: `rigbench ladder` on the rig exited {result.exited}:\n{tail}")
    return fetch.__wrapped__(c, paths, local_runs, [name])[0]
