"""``rigbench provision STEP``: the Fabric steps, with the rig taken from the Pulumi stack.

Without ``--host`` the host, SSH user and NVMe folder come from ``pulumi stack output
--json`` (outputs ``publicIp``/``publicDns``, ``sshUser``, ``nvmePath``, and ``sshKeyPath``
when the stack has one), so after ``pulumi up`` a user types only the step. The rig's host
key is pinned in the stack's own known_hosts file (``~/.config/rigbench/known_hosts/STACK``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import typer

from rigbench.commands.local import MEASURE_HELP
from rigbench.errors import ProvisionError


@dataclass
class RigTarget:
    host: str
    user: str
    port: int
    key: str | None
    stack: str
    work: str
    strict: bool
    profile: str
    outputs: dict | None = None

    def connection(self):
        from provision.rig import connect, known_hosts_path

        return connect(
            self.host,
            user=self.user,
            port=self.port,
            key_filename=self.key,
            known_hosts=known_hosts_path(self.stack),
            strict_host_key=self.strict,
        )

    def paths(self):
        from provision.rig import RigPaths

        return RigPaths(self.work)


def pulumi_json(arguments: list[str]) -> object:
    if shutil.which("pulumi") is None:
        raise ProvisionError("no --host given and the pulumi CLI is not on PATH; pass --host HOST or install pulumi")
    result = subprocess.run(["pulumi", *arguments], capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise ProvisionError(
            f"`pulumi {' '.join(arguments)}` failed: {result.stderr.strip() or result.stdout.strip()}"
            "; run `pulumi up` first, or pass --host"
        )
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise ProvisionError(f"`pulumi {' '.join(arguments)}` printed no JSON: {result.stdout[:200]!r}") from None


def stack_name(stack: str | None) -> str:
    if stack:
        return stack
    result = (
        subprocess.run(["pulumi", "stack", "--show-name"], capture_output=True, text=True, timeout=60, check=False)
        if shutil.which("pulumi")
        else None
    )
    return result.stdout.strip() if result is not None and result.returncode == 0 and result.stdout.strip() else "dev"


def target_from_stack(stack: str | None) -> dict:
    """host, user, work and key from the stack's outputs."""
    arguments = ["stack", "output", "--json"] + (["--stack", stack] if stack else [])
    outputs = pulumi_json(arguments)
    if not isinstance(outputs, dict):
        raise ProvisionError("`pulumi stack output --json` did not print an object")
    host = outputs.get("publicIp") or outputs.get("publicDns")
    if not host:
        raise ProvisionError(
            f"the stack has no publicIp or publicDns output (found: {', '.join(sorted(outputs))}); "
            "is the instance up? run `pulumi up`, or pass --host"
        )
    return {
        "host": host,
        "user": outputs.get("sshUser"),
        "work": outputs.get("nvmePath"),
        "key": outputs.get("sshKeyPath"),
        "outputs": outputs,
    }


def resolve_target(
    host: str | None,
    user: str | None,
    port: int,
    key: str | None,
    stack: str | None,
    work: str | None,
    profile: str,
    strict: bool,
) -> RigTarget:
    """The command line's options, completed from the stack's outputs when no host is given."""
    from provision.rig import DEFAULT_WORK

    found = {} if host else target_from_stack(stack)
    return RigTarget(
        host=host or found["host"],
        user=user or found.get("user") or "ubuntu",
        port=port,
        key=key or found.get("key"),
        stack=stack_name(stack) if not host or stack else "dev",
        work=work or found.get("work") or DEFAULT_WORK,
        strict=strict,
        profile=profile,
        outputs=found.get("outputs"),
    )


def register(app: typer.Typer) -> None:
    group = typer.Typer(
        help="Provision the rig over SSH (Fabric): toolkit, build, download, serve, ...", no_args_is_help=True
    )

    @group.callback()
    def options(
        ctx: typer.Context,
        host: str = typer.Option(None, "--host", help="rig address (default: the stack's publicIp)"),
        user: str = typer.Option(None, "--user", help="SSH user (default: the stack's sshUser, else ubuntu)"),
        port: int = typer.Option(22, "--port", help="SSH port"),
        key: str = typer.Option(None, "--key", "-i", help="private key file (default: agent and ~/.ssh keys)"),
        stack: str = typer.Option(None, "--stack", help="Pulumi stack (default: the selected one)"),
        work: str = typer.Option(None, "--work", help="NVMe work folder (default: the stack's nvmePath)"),
        profile: str = typer.Option("gemma4-e2b", "--profile", "-p", help="bundled profile name or .toml path"),
        strict: bool = typer.Option(False, "--strict", help="refuse a host key that is not pinned yet"),
    ) -> None:
        # Resolved on first use, so `rigbench provision STEP --help` needs no stack.
        ctx.obj = {
            "host": host,
            "user": user,
            "port": port,
            "key": key,
            "stack": stack,
            "work": work,
            "profile": profile,
            "strict": strict,
        }

    def target(ctx: typer.Context) -> RigTarget:
        if not isinstance(ctx.obj, RigTarget):
            ctx.obj = resolve_target(**ctx.obj)
        return ctx.obj

    def profile_of(ctx: typer.Context):
        from rigbench.profile import load_profile

        return load_profile(target(ctx).profile)

    @group.command("toolkit")
    def toolkit(ctx: typer.Context, cuda_package: str = typer.Option("cuda-toolkit-13-1", "--cuda-package")) -> None:
        """GPU, driver and nvcc; install the CUDA toolkit when nvcc is missing."""
        from provision.toolkit import toolkit as step

        step(target(ctx).connection(), cuda_package=cuda_package)

    @group.command("build")
    def build(
        ctx: typer.Context,
        cache: str = typer.Option(None, "--cache", help="build cache on the rig"),
        backend: str = typer.Option("auto", "--backend", help="auto, cpu or cuda"),
    ) -> None:
        """Build llama.cpp on the rig for its GPU (cached); keep the build manifest."""
        from provision.remote_build import build as step

        step(target(ctx).connection(), profile_of(ctx), target(ctx).paths(), cache=cache, backend=backend)

    @group.command("download")
    def download(ctx: typer.Context) -> None:
        """The profile's model and drafter, resumable and sha256-verified (HF_TOKEN, HF_ENDPOINT)."""
        from provision.download import download as step

        step(target(ctx).connection(), profile_of(ctx), target(ctx).paths())

    @group.command("serve")
    def serve(
        ctx: typer.Context,
        port: int = typer.Option(8080, "--server-port", help="llama-server's port"),
        public: bool = typer.Option(False, "--public", help="listen on 0.0.0.0 (needs --api-key)"),
        api_key: str = typer.Option(None, "--api-key", envvar="RIGBENCH_API_KEY"),
        health_timeout: int = typer.Option(300, "--health-timeout"),
        supervisor: str = typer.Option("auto", "--supervisor", help="auto, systemd or process"),
    ) -> None:
        """Serve the profile with llama-server and wait for /health."""
        from provision.serve import serve as step

        step(
            target(ctx).connection(),
            profile_of(ctx),
            target(ctx).paths(),
            port=port,
            public=public,
            api_key=api_key,
            health_timeout=health_timeout,
            supervisor=supervisor,
        )

    @group.command("up")
    def up(
        ctx: typer.Context,
        port: int = typer.Option(8080, "--server-port"),
        cache: str = typer.Option(None, "--cache", help="build cache on the rig"),
    ) -> None:
        """toolkit, build, download and serve (each safe to repeat)."""
        from provision.download import download as download_step
        from provision.remote_build import build as build_step
        from provision.serve import serve as serve_step
        from provision.toolkit import toolkit as toolkit_step

        c, profile, paths = target(ctx).connection(), profile_of(ctx), target(ctx).paths()
        toolkit_step(c)
        build_step(c, profile, paths, cache=cache)
        download_step(c, profile, paths)
        serve_step(c, profile, paths, port=port)

    @group.command("stop")
    def stop(ctx: typer.Context) -> None:
        """Stop llama-server on the rig."""
        from provision.serve import stop as step

        step(target(ctx).connection(), target(ctx).paths())

    @group.command("status")
    def status(ctx: typer.Context) -> None:
        """Service state, /health, slots and GPU memory used, as JSON."""
        from provision.serve import status as step

        step(target(ctx).connection(), target(ctx).paths())

    @group.command("logs")
    def logs(ctx: typer.Context, lines: int = typer.Option(50, "--lines", "-n")) -> None:
        """The last lines of llama-server's log."""
        from provision.serve import logs as step

        step(target(ctx).connection(), target(ctx).paths(), lines=lines)

    @group.command("bench")
    def bench(ctx: typer.Context, repetitions: int = typer.Option(5, "--repetitions", "-r")) -> None:
        """llama-bench pp512/tg128 at the profile's settings, saved on the rig."""
        from provision.bench import bench as step

        report = step(target(ctx).connection(), profile_of(ctx), target(ctx).paths(), repetitions=repetitions)
        typer.echo(json.dumps(report["summary"]))

    @group.command("tunnel")
    def tunnel(
        ctx: typer.Context,
        local_port: int = typer.Option(8080, "--local-port"),
        port: int = typer.Option(8080, "--server-port"),
    ) -> None:
        """Forward a local port to the rig's llama-server until Ctrl-C."""
        from provision.tunnel import hold_tunnel

        hold_tunnel(target(ctx).connection(), local_port, port)

    @group.command("project")
    def project(ctx: typer.Context) -> None:
        """Install this checkout on the rig (for the sweep)."""
        from provision.remote_sweep import install_project

        typer.echo(install_project(target(ctx).connection(), target(ctx).paths()))

    @group.command("sweep")
    def sweep(
        ctx: typer.Context,
        steps: str = typer.Option("1,2,4,8,16,32,64", "--steps"),
        warmup: float = typer.Option(10.0, "--warmup"),
        measure: str = typer.Option("30", "--measure", help=MEASURE_HELP),
        runs: Path = typer.Option(Path("runs"), "--runs", help="local folder for run directories"),
        rigbench: str = typer.Option(None, "--rigbench", help="rigbench on the rig"),
        sweep_args: str = typer.Option(
            "", "--sweep-args", help="more `rigbench sweep` options, e.g. '--context-tokens 0,8192 --max-tokens 128'"
        ),
    ) -> None:
        """Run the load sweep on the rig against 127.0.0.1; copy the runs into local runs/."""
        import shlex

        from provision.remote_sweep import sweep as step

        for path in step(
            target(ctx).connection(),
            profile_of(ctx),
            target(ctx).paths(),
            steps=steps,
            warmup=warmup,
            measure=measure,
            local_runs=runs,
            rigbench=rigbench,
            stack_outputs=target(ctx).outputs,
            extra=shlex.split(sweep_args),
        ):
            typer.echo(str(path))

    @group.command("fetch")
    def fetch(ctx: typer.Context, runs: Path = typer.Option(Path("runs"), "--runs")) -> None:
        """Copy every run directory and bench result from the rig into local runs/."""
        from provision.remote_sweep import fetch as step

        step(target(ctx).connection(), target(ctx).paths(), runs)

    app.add_typer(group, name="provision")
