"""Fabric tasks: thin wrappers over the provisioning steps, for Fabric's own CLI.

From the repository root, after ``pulumi up``::

    fab -r provision -H ubuntu@HOST -i ~/.ssh/rigbench.pem up --profile gemma4-e2b
    fab -r provision -H ubuntu@HOST -i KEY toolkit build download serve --profile gemma4-e2b
    fab -r provision -H ubuntu@HOST -i KEY status
    fab -r provision --list

``-r provision`` tells Fabric to find this file; each task that needs one takes
``--profile`` (a bundled name or a .toml path, default ``$RIGBENCH_PROFILE`` or gemma4-e2b),
``--work`` (the NVMe folder, default /opt/dlami/nvme) and ``--stack`` (whose known_hosts
file pins the rig's host key). ``rigbench provision STEP`` does the same with the host taken
from ``pulumi stack output``. A failed step exits 2 with one line naming the step.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabric import Connection, task
from invoke.exceptions import Exit

if __package__ in (None, ""):  # loaded by `fab -r provision` from a checkout that is not pip-installed
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from provision import bench as bench_step  # noqa: E402
from provision import download as download_step  # noqa: E402
from provision import remote_build, remote_sweep  # noqa: E402
from provision import serve as serve_step
from provision import toolkit as toolkit_step
from provision.rig import DEFAULT_WORK, RigPaths, known_hosts_path, pin_host_keys  # noqa: E402
from provision.tunnel import hold_tunnel  # noqa: E402
from rigbench.errors import RigbenchError  # noqa: E402
from rigbench.profile import load_profile  # noqa: E402

DEFAULT_PROFILE = os.environ.get("RIGBENCH_PROFILE", "gemma4-e2b")
DEFAULT_STACK = os.environ.get("RIGBENCH_STACK", "dev")


def one_line_errors(function: Callable[..., Any]) -> Callable[..., Any]:
    """Turn rigbench errors into Fabric's clean exit (one line, code 2) instead of a traceback."""

    @functools.wraps(function)
    def wrapper(c: Connection, *args: Any, **kwargs: Any) -> Any:
        pin_host_keys(c, known_hosts_path(kwargs.get("stack") or DEFAULT_STACK),
                      strict=bool(kwargs.get("strict")))
        try:
            return function(c, *args, **kwargs)
        except RigbenchError as error:
            raise Exit(f"rigbench: error: {error}", code=2) from None

    return wrapper


HELP = {
    "profile": "bundled profile name or .toml path",
    "work": f"the rig's NVMe work folder (default {DEFAULT_WORK})",
    "stack": "Pulumi stack whose known_hosts file pins the rig's host key",
    "strict": "refuse a rig whose host key is not pinned yet",
    "runs": "local folder for run directories",
    "rigbench": "rigbench on the rig (default: the one the project task installed)",
    "public": "listen on 0.0.0.0 (needs --api-key)",
    "api_key": "key clients must send",
    "sweep_args": "more `rigbench sweep` options, e.g. '--context-tokens 0,8192'",
}


def helps(*names: str) -> dict[str, str]:
    """Invoke refuses help for a parameter a task lacks, so each task names its own."""
    return {name: HELP[name] for name in names}


@task(help=helps('stack', 'strict'))
@one_line_errors
def toolkit(c, cuda_package=toolkit_step.DEFAULT_CUDA_PACKAGE, require_gpu=False, stack=DEFAULT_STACK,
            strict=False):
    """GPU, driver and nvcc; install the CUDA toolkit from NVIDIA's apt repository when nvcc is missing."""
    toolkit_step.toolkit(c, cuda_package=cuda_package, require_gpu=require_gpu)


@task(help=helps('profile', 'work', 'stack', 'strict'))
@one_line_errors
def build(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, cache="", backend="auto", stack=DEFAULT_STACK,
          strict=False):
    """Build llama.cpp on the rig for its GPU (cached); keep the build manifest."""
    remote_build.build(c, load_profile(profile), RigPaths(work), cache=cache or None, backend=backend)


@task(help=helps('profile', 'work', 'stack', 'strict'))
@one_line_errors
def download(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, stack=DEFAULT_STACK, strict=False):
    """The profile's model and drafter into the NVMe folder, resumable, sha256 verified (HF_TOKEN, HF_ENDPOINT)."""
    download_step.download(c, load_profile(profile), RigPaths(work))


@task(help=helps('profile', 'work', 'stack', 'strict', 'public', 'api_key'))
@one_line_errors
def serve(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, port=serve_step.DEFAULT_PORT, public=False, api_key="",
          health_timeout=300, supervisor="auto", stack=DEFAULT_STACK, strict=False):
    """Serve the profile with llama-server (systemd unit, or a supervised process) and wait for /health."""
    serve_step.serve(c, load_profile(profile), RigPaths(work), port=int(port), public=public,
                     api_key=api_key or None, health_timeout=int(health_timeout), supervisor=supervisor)


@task(help=helps('profile', 'work', 'stack', 'strict'))
@one_line_errors
def up(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, port=serve_step.DEFAULT_PORT, cache="", stack=DEFAULT_STACK,
       strict=False):
    """toolkit, build, download and serve in one go (each step is safe to repeat)."""
    chosen, paths = load_profile(profile), RigPaths(work)
    toolkit_step.toolkit(c)
    remote_build.build(c, chosen, paths, cache=cache or None)
    download_step.download(c, chosen, paths)
    serve_step.serve(c, chosen, paths, port=int(port))


@task(help=helps('work', 'stack', 'strict'))
@one_line_errors
def stop(c, work=DEFAULT_WORK, stack=DEFAULT_STACK, strict=False):
    """Stop llama-server on the rig."""
    serve_step.stop(c, RigPaths(work))


@task(help=helps('work', 'stack', 'strict'))
@one_line_errors
def status(c, work=DEFAULT_WORK, stack=DEFAULT_STACK, strict=False):
    """Service state, /health, slots and GPU memory used, as JSON."""
    serve_step.status(c, RigPaths(work))


@task(help=helps('work', 'stack', 'strict'))
@one_line_errors
def logs(c, work=DEFAULT_WORK, lines=50, stack=DEFAULT_STACK, strict=False):
    """The last lines of llama-server's log on the rig."""
    serve_step.logs(c, RigPaths(work), lines=int(lines))


@task(help=helps('profile', 'work', 'stack', 'strict'))
@one_line_errors
def bench(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, repetitions=5, stack=DEFAULT_STACK, strict=False):
    """llama-bench pp512/tg128 at the profile's settings, saved as JSON in the rig's results."""
    report = bench_step.bench(c, load_profile(profile), RigPaths(work), repetitions=int(repetitions))
    print(json.dumps(report["summary"]))


@task(help=helps('stack', 'strict'))
@one_line_errors
def tunnel(c, local_port=8080, port=serve_step.DEFAULT_PORT, stack=DEFAULT_STACK, strict=False):
    """Forward 127.0.0.1:LOCAL_PORT here to the rig's llama-server until Ctrl-C."""
    hold_tunnel(c, int(local_port), int(port))


@task(help=helps('work', 'stack', 'strict'))
@one_line_errors
def project(c, work=DEFAULT_WORK, stack=DEFAULT_STACK, strict=False):
    """Install this checkout on the rig (a virtualenv in the NVMe folder) for the sweep."""
    remote_sweep.install_project(c, RigPaths(work))


@task(help=helps('profile', 'work', 'stack', 'strict', 'runs', 'rigbench', 'sweep_args'))
@one_line_errors
def sweep(c, profile=DEFAULT_PROFILE, work=DEFAULT_WORK, steps="1,2,4,8,16,32,64", warmup=10.0, measure="30",
          runs="runs", rigbench="", sweep_args="", stack=DEFAULT_STACK, strict=False):
    """Run the load sweep on the rig against 127.0.0.1, then copy the run directories into local runs/."""
    copied = remote_sweep.sweep(c, load_profile(profile), RigPaths(work), steps=steps, warmup=float(warmup),
                                measure=str(measure), local_runs=runs, rigbench=rigbench or None,
                                extra=shlex.split(sweep_args))
    for path in copied:
        print(path)


@task(help=helps('work', 'stack', 'strict', 'runs'))
@one_line_errors
def fetch(c, work=DEFAULT_WORK, runs="runs", stack=DEFAULT_STACK, strict=False):
    """Copy every run directory and bench result from the rig into local runs/."""
    remote_sweep.fetch(c, RigPaths(work), runs)
