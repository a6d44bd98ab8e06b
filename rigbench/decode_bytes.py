"""The decode bytes of the models that runs served, for runs whose manifests record none.

Why here, in the app: the tensor table is read by the llama.cpp stage and the roofline drawn by
analysis, and neither may import the other. A run made by the local rig records the summary in
its manifest; a run made elsewhere (a cloud rig, or before the summary existed) gets it from a
GGUF given on the command line, matched to the run's model by sha256, or, for this project's
synthetic Gemma 4 models, from the writer's own table when that table's file has the model's
size (llamacpp.decode_bytes.synthetic_run_decode_bytes says how close).
"""

from __future__ import annotations

from pathlib import Path

from core.digest import file_sha256
from core.errors import RunDirError, UsageError
from core.rundir import DecodeBytes, RunDir
from llamacpp.decode_bytes import gguf_decode_bytes, synthetic_run_decode_bytes

GGUF_HELP = (
    "the GGUF a run served, for a run whose manifest records no decode bytes (the bandwidth roofline); "
    "matched to runs by sha256 (repeatable)"
)


def decode_bytes_for_runs(runs: list[Path], ggufs: list[Path], option: str = "--gguf") -> dict[str, DecodeBytes]:
    """Summaries by model sha256 for the runs that need one. A GGUF that is no run's model is refused
    (a wrong file would draw a wrong roof), before anything is written."""

    needed = {}
    for run in runs:
        try:
            model = RunDir(run).read_manifest().model
        except RunDirError:
            continue  # reading the run for its report says what is wrong with it, in the words it uses
        if model is not None and model.decode_bytes is None:
            needed[model.sha256] = model
    found: dict[str, DecodeBytes] = {}
    for path in ggufs:
        if not Path(path).is_file():
            raise UsageError(f"{option} {path}: no such file; give the .gguf model a run served")
        digest = file_sha256(path)
        if digest not in needed:
            raise UsageError(
                f"{option} {path}: sha256 {digest[:12]} is not the model of any given run that lacks decode bytes; "
                "give the file each run's manifest names (model.sha256)"
            )
        found[digest] = gguf_decode_bytes(path)
    for digest, model in needed.items():
        if digest not in found and model.synthetic:
            summary = synthetic_run_decode_bytes(model.label, model.size_bytes)
            if summary is not None:
                found[digest] = summary
    return found
