"""``rigbench build``: build (or reuse) the pinned llama.cpp on this machine, in the cache."""

from __future__ import annotations

import typer

from core.profile import load_profile
from llamacpp.build import BACKENDS, build_llama_cpp

EXIT_CODES = (
    "Exit codes: 0 built or reused; 2 the build failed or an option was refused."
)


app = typer.Typer()


@app.command("build", epilog=EXIT_CODES)
def build(
    profile: str = typer.Option("tiny", "--profile", "-p", help="whose llama.cpp source and CMake options"),
    backend: str = typer.Option("auto", "--backend", help=", ".join(BACKENDS)),
) -> None:
    """Build llama-server, llama-bench, llama-quantize and llama-batched-bench for this machine (cached);
    print the build manifest."""
    chosen = load_profile(profile)
    manifest = build_llama_cpp(chosen.llama_cpp.spec(), backend, extra_options=chosen.llama_cpp.cmake_options,
                               patches=chosen.llama_cpp.patches)
    typer.echo(manifest.model_dump_json(indent=2))
