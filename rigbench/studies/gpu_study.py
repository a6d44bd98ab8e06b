"""The GPU study in one command, so a whole experiment fits one lease of a GPU machine.

Why one script: a GPU machine is lent for minutes and starts bare, so the build, the models
and every measurement must run unattended in order, each phase logged and kept even when a
later one fails. Phases (``--phases`` picks some):

- ``models``: build llama.cpp for this card while the synthetic Gemma 4 models are written (F16,
  CPU only), then quantize them to Q4_0 with the pinned llama-quantize;
- ``bench``: llama-bench at the profile's flags (pp512, tg128) for each preset, tg128 at long
  context depths, and llama-batched-bench (1..64 sequences decoding together) at the
  many-users profile's flags: the card's ceilings;
- ``autotune``: ``rigbench autotune`` trials at 1 and 64 users, and one-user-only trials;
- ``greedy``: greedy text under each setting against CPU sampling, and whether the top two
  candidates are tied where texts part (random weights make ties likely);
- ``sweep``: the many-users profile as shipped, 1..64 users, then with the drafter at 1, 2 and
  3 drafted tokens (a drafter that is always right, and one that is almost never right);
- ``second``: the second preset without and with its drafter;
- ``longctx``: 0, 32768 and 120000 tokens ahead of each prompt, one user, single-user profile;
- ``slots``: the server's slot choice at partial load: the many-users line swept 1..64 users with
  one KV stream per slot and with a unified cache, each from the stock and from the patched
  build (``llamacpp/patches/server-lowest-free-slot.patch``), and with user i pinned to slot i
  (the bound a slot choice can reach); llama-batched-bench at the same counts is the ceiling.

Random weights make random text, so replies have a fixed length (256 tokens: the synthetic
vocabulary cannot end a reply); the target is written with ``favour`` so greedy decoding
repeats one token, which a favoured drafter always guesses (acceptance ~1) and an unfavoured
one never does (acceptance ~0): the two bounds of what a drafter can do on this card.

``--repeats N`` runs every arm of a phase N times in rounds (each arm once, then each again: A B A B), every
run one repeat of the phase's series, so the report judges arms by the spread between runs; autotune's trials
likewise (``rigbench autotune --repeats``).

Usage, from the repository root:
``python3 -m rigbench study gpu OUT [--presets e2b,e4b] [--scale 1.0] [--repeats 3] [--phases ...]``;
``--scale`` multiplies every window (0.15 for a CPU dry run with ``--presets tiny-gemma4``).
"""

from __future__ import annotations

import json
import math
import multiprocessing
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import httpx

from analysis.study_report import differing_replies, greedy_reference
from core.build_manifest import BuildManifest
from core.cache import cache_root
from core.errors import RigbenchError, StudyError
from core.llama_bench import llama_bench_args
from core.profile import load_profile, merge_server_args, split_flags
from core.repeat_order import interleaved, new_series_id
from core.whole_files import write_whole
from core.wording import counted
from llamacpp.batched_bench import batched_bench_args, run_batched_bench
from llamacpp.build import BUILD_SCRIPT, build_llama_cpp
from llamacpp.llama_bench import run_llama_bench
from llamacpp.server import LocalServer
from llamacpp.synthetic_gemma4 import quantize_q4_0, write_preset
from loadtest.schedule import make_stages, total_duration
from rigbench.autotune import run_autotune
from rigbench.local_rig import LocalRigOptions, run_local_rig

PHASES = ("models", "bench", "autotune", "greedy", "sweep", "second", "longctx", "slots")
FAVOUR = 0.3
PROFILE = "gemma4-e2b"  # one user, long context, the drafter: the published serving line
MANY_PROFILE = "gemma4-e2b-many"  # 64 users
DRAFTER_FLAGS = ["--spec-type", "draft-mtp", "-ngld", "all", "--spec-draft-backend-sampling"]

# Trials on the many-users profile at 1 and 64 users: the shipped line, the greedy-only chain
# (faster, but it drops each request's sampling), and a unified KV cache with room to grow.
MANY_USER_TRIALS: dict[str, list[str]] = {
    "profile": [],
    "greedy-chain": ["--samplers", "temperature"],
    "unified-kv-c131k": ["-kvu", "-c", "131072"],
}
# Trials at one user only, on the single-user profile.
ONE_USER_TRIALS: dict[str, list[str]] = {"profile": []}
BATCHED_PARALLEL = [1, 2, 4, 8, 16, 32, 64]
SLOT_STEPS = [1, 2, 4, 8, 16, 24, 32, 48, 64]
SLOT_PATCH = "server-lowest-free-slot"
SLOT_MAX_TOKENS = 128  # requests short enough that every window holds whole ones at 64 users
# (label, patched build, flags over the many-users line, users pinned to slots)
SLOT_ARMS: tuple[tuple[str, bool, list[str], bool], ...] = (
    ("per-slot-kv", False, [], False),
    ("per-slot-kv-patched", True, [], False),
    ("per-slot-kv-pinned", False, [], True),
    ("unified-kv", False, ["-kvu"], False),
    ("unified-kv-patched", True, ["-kvu"], False),
)
DRY_RUN_MAX_TOKENS = 16
RUN_OVERHEAD_SECONDS = 20  # server start, load processes, report (10-25 s on an H200)
MIN_PHASE_SECONDS = 30


class GpuStudy:
    """One GPU study in its folder: where its models are, its log and phase log, its build and its deadline."""

    def __init__(self, out: Path, presets: list[str], scale: float, processes: int, backend: str,
                 deadline_seconds: float | None = None, repeats: int = 1):
        self.out = out
        self.repeats = repeats  # runs of every arm a phase compares, in rounds
        self.deadline_seconds = deadline_seconds
        self.presets = presets
        self.scale = scale
        self.processes = processes
        self.backend = backend
        self.cache = cache_root().resolve()  # children run from the repository root
        self.models = self.cache / "models"
        self.models.mkdir(parents=True, exist_ok=True)
        out.mkdir(parents=True, exist_ok=True)
        self.started = time.monotonic()
        self.build: BuildManifest | None = None

    def log(self, message: str) -> None:
        line = f"[{time.strftime('%H:%M:%S', time.gmtime())} +{time.monotonic() - self.started:6.0f}s] {message}"
        print(line, flush=True)
        with open(self.out / "study.log", "a") as handle:
            handle.write(line + "\n")

    def record(self, phase: str, **fields: object) -> None:
        with open(self.out / "phases.jsonl", "a") as handle:
            handle.write(json.dumps({"phase": phase, "t": round(time.monotonic() - self.started, 1), **fields}) + "\n")

    def target(self, preset: str, favoured: bool = True) -> Path:
        return self.models / f"{preset}{'' if favoured else '-plain'}-q4_0.gguf"

    def drafter(self, preset: str, right: bool = True) -> Path:
        return self.models / f"{preset}-assistant{'' if right else '-random'}-q4_0.gguf"

    def tg128(self, preset: str) -> float | None:
        """llama-bench's tg128 for the preset, from the bench phase's file (None before it)."""
        path = self.out / f"bench-{preset}.json"
        return json.loads(path.read_text())["summary"].get("tg128") if path.exists() else None

    @property
    def placement(self) -> list[str]:
        """Where the per-layer embedding table lives: the profile pins it to CUDA0, which a CPU
        build (the dry run) does not have."""
        on_cpu = self.build is not None and self.build.backend == "cpu"
        return ["-ot", r"per_layer_token_embd\.weight=CPU"] if on_cpu else []

    def binary(self, name: str) -> str:
        assert self.build is not None, "no build yet"
        return self.build.binary(name)

    def window(self, seconds: float) -> float:
        return max(0.5, seconds * self.scale)

    def phase(self, name: str, body: Callable[[], None]) -> None:
        if self.seconds_left() < MIN_PHASE_SECONDS:
            self.log(f"phase {name} skipped: {self.seconds_left():.0f} s left before the deadline")
            self.record(name, status="skipped", seconds=0)
            return
        self.log(f"phase {name} begins")
        began = time.monotonic()
        try:
            body()
            self.record(name, status="ok", seconds=round(time.monotonic() - began, 1))
        except Exception as error:  # noqa: BLE001 - keep every later phase running
            self.log(f"phase {name} FAILED: {error}")
            write_whole(self.out / f"error-{name}.txt", traceback.format_exc())
            self.record(name, status="failed", error=str(error)[:500], seconds=round(time.monotonic() - began, 1))

    def rig_options(self, label: str, preset: str, overrides: list[str], profile: str = MANY_PROFILE,
                    **changes: object):
        options = LocalRigOptions(
            profile=profile,
            runs_root=self.out / "runs",
            backend=self.backend,
            model_path=self.target(preset),
            no_drafter=True,
            server_overrides=[*overrides, *self.placement],
            label=label,
            # a scaled-down run (the CPU dry run) checks the plumbing, not the figures: replies short
            # enough that its shortened windows still hold whole requests
            load={"warmup_seconds": self.window(3), "processes": self.processes,
                  **({} if self.scale >= 1 else {"max_tokens": DRY_RUN_MAX_TOKENS})},
        ).changed(**changes)
        if "measure_seconds" not in changes:
            # A 64-user request takes ~11 s on an H200 (1 user: under 1 s): 8 s at 1 user, 2 s
            # more per doubling, 20 s at 64, so every window holds whole requests.
            options = options.changed(measure_seconds=[
                self.window(8 + 2 * math.log2(users)) for users in options.load_value("user_steps")])
        return options

    def seconds_left(self) -> float:
        if self.deadline_seconds is None:
            return float("inf")
        return self.deadline_seconds - (time.monotonic() - self.started)

    def local_run(self, options) -> str | None:
        # A lease ends at a fixed time: a run that cannot finish before the deadline is skipped
        # (and said so), so the study still ends with every finished run intact.
        stages = make_stages(*(options.load_value(key) for key in ("user_steps", "warmup_seconds", "measure_seconds")))
        needed = total_duration(stages) + RUN_OVERHEAD_SECONDS
        if needed > self.seconds_left():
            self.log(f"run {options.label} skipped: needs ~{needed:.0f} s, {self.seconds_left():.0f} s left")
            self.record("run", label=options.label, status="skipped", error="deadline")
            return None
        began = time.monotonic()
        repeat = {} if options.repeat is None else {"repeat": options.repeat.index, "series": options.repeat.series}
        try:
            report = run_local_rig(options)
            self.log(f"run {options.label}{_of(options)}: {report.parent.name} in {time.monotonic() - began:.0f} s")
            self.record("run", label=options.label, run=report.parent.name, status="complete", **repeat)
            return str(report.parent)
        except Exception as error:  # noqa: BLE001 - one broken run must not end the phase
            if not isinstance(error, RigbenchError):
                write_whole(self.out / f"error-run-{options.label}.txt", traceback.format_exc())
            self.log(f"run {options.label}{_of(options)} failed: {str(error)[:300]}")
            self.record("run", label=options.label, status="failed", error=str(error)[:500], **repeat)
            return None

    def local_runs(self, arms: list, series: str) -> list[str | None]:
        """The arms' local runs (``LocalRigOptions``), ``repeats`` rounds of them: every arm once, then every arm
        again (A B A B), each run one repeat of a series named from ``series``, so a machine's drift moves the
        arms alike and the report judges them by the spread between runs. With one repeat the runs are made
        alone, as they always were."""
        if self.repeats == 1:
            return [self.local_run(options) for options in arms]
        plan = interleaved(arms, [options.label or "default" for options in arms], self.repeats,
                           new_series_id(series))
        return [self.local_run(each.arm.changed(repeat=each.repeat)) for each in plan]


def _of(options) -> str:
    """', repeat 2 of 3' for a run that is one repeat of a series; nothing for a run made alone."""
    return "" if options.repeat is None else f" (repeat {options.repeat.index} of {options.repeat.of})"


def start_build(study: GpuStudy) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(BUILD_SCRIPT), "--backend", study.backend, "--cache", str(study.cache)],
        stdout=open(study.out / "build_manifest.json", "w"),  # noqa: SIM115 - owned by the child
        stderr=open(study.out / "build.log", "w"),  # noqa: SIM115
    )


def use_cached_build(study: GpuStudy) -> None:
    """--phases without models: the build of this card (from the cache when it is there)."""
    study.build = build_llama_cpp(backend=study.backend)
    write_whole(study.out / "build_manifest.json", study.build.model_dump_json(indent=1))


def f16_of(q4_0: Path) -> Path:
    """The F16 file that llama-quantize turns into ``q4_0`` (written beside it, then removed)."""
    return q4_0.with_name(q4_0.name.replace("-q4_0.gguf", "-f16.gguf"))


def write_models(study: GpuStudy) -> None:
    """F16 writes run beside the build (they need no llama.cpp binary), each in a process of its own; Q4_0 after it."""
    jobs: dict[str, dict] = {}  # the writer's log name -> what it writes
    for preset in dict.fromkeys(study.presets):
        if not (study.target(preset).exists() and study.drafter(preset).exists()):
            jobs[preset] = {"preset": preset, "target": f16_of(study.target(preset)),
                            "drafter": f16_of(study.drafter(preset)), "favour": FAVOUR}
        if not study.drafter(preset, right=False).exists():
            jobs[f"{preset}-random"] = {"preset": preset, "drafter": f16_of(study.drafter(preset, right=False)),
                                        "favour": FAVOUR, "drafter_favour": 0.0}
    first = study.presets[0]
    if not study.target(first, favoured=False).exists():
        jobs["plain"] = {"preset": first, "target": f16_of(study.target(first, favoured=False))}
    # spawned, not forked: a writer starts clean whatever threads this process has
    with ProcessPoolExecutor(max_workers=max(1, len(jobs)), mp_context=multiprocessing.get_context("spawn")) as pool:
        writing = {name: pool.submit(write_preset, **job) for name, job in jobs.items()}
        build = start_build(study)
        failed = [name for name, future in writing.items() if not writer_done(study, name, future)]
    study.log(f"models written (F16), {len(failed)} writers failed")
    if build.wait() != 0:
        raise StudyError(f"build failed: see {study.out / 'build.log'}")
    manifest_path = study.out / "build_manifest.json"
    study.build = BuildManifest.parse(manifest_path.read_text(), str(manifest_path))
    study.log(f"build {study.build.backend} {study.build.cuda_arch} in {study.build.build_seconds} s")
    devices = subprocess.run([study.binary("llama-server"), "--list-devices"], capture_output=True, text=True)
    write_whole(study.out / "list_devices.txt", devices.stdout + devices.stderr)
    quantized = [study.target(first, favoured=False)]
    for preset in study.presets:
        quantized += [study.target(preset), study.drafter(preset), study.drafter(preset, right=False)]
    for q4 in quantized:
        if f16_of(q4).exists():
            log = study.out / f"quantize-{q4.stem}.log"
            quantize_q4_0(study.binary("llama-quantize"), f16_of(q4), q4, log_path=log)
    sizes = {path.name: path.stat().st_size for path in sorted(study.models.glob("*-q4_0.gguf"))}
    write_whole(study.out / "models.json", json.dumps(sizes, indent=1))
    study.log(f"models: {sizes}")
    if failed:  # what was written is quantized and kept; the runs that need the rest fail on their own
        raise StudyError(f"model writers failed: {failed}")


def writer_done(study: GpuStudy, name: str, future: Future[list[Path]]) -> bool:
    """Wait for one writer; its ``write-<name>.log`` says what it wrote, or why it failed."""
    log = study.out / f"write-{name}.log"
    try:
        written = future.result()
    except Exception as error:  # noqa: BLE001 - one writer that fails must not stop the others' files
        write_whole(log, "".join(traceback.format_exception(error)))
        return False
    write_whole(log, "".join(f"wrote {path} ({path.stat().st_size} bytes)\n" for path in written))
    return True


def bench(study: GpuStudy) -> None:
    args = llama_bench_args(load_profile(PROFILE).server.args)
    if study.placement:
        args[args.index("-ot") + 1] = study.placement[1]
    for preset in study.presets:
        report = run_llama_bench(study.binary("llama-bench"), study.target(preset), args)
        write_whole(study.out / f"bench-{preset}.json", report.to_json())
        study.log(f"llama-bench {preset}: {report.summary}")
    first = study.presets[0]
    depths = "32768,120000" if study.scale >= 1 else "256"
    report = run_llama_bench(study.binary("llama-bench"), study.target(first), [*args, "-d", depths],
                             prompt_tokens=0, repetitions=2)
    write_whole(study.out / f"bench-{first}-depth.json", report.to_json())
    study.log(f"llama-bench {first} at depth: {report.summary}")
    many = merge_server_args(load_profile(MANY_PROFILE).server.args, study.placement)
    for name, extra in (("per-slot-kv", []), ("unified-kv", ["-kvu"])):
        parallel = BATCHED_PARALLEL if study.scale >= 1 else [1, 4]
        # a CPU dry run leaves a core to llama.cpp's logger thread (see run_batched_bench)
        threads = ["-t", "1", "-tb", "1"] if study.placement else []
        report = run_batched_bench(study.binary("llama-batched-bench"), study.target(first),
                                   [*batched_bench_args(many), *extra, *threads], parallel)
        write_whole(study.out / f"batched-bench-{first}-{name}.json", report.to_json())
        study.log(f"llama-batched-bench {first} {name}: {report.summary}")


def autotune(study: GpuStudy) -> None:
    preset = study.presets[0]
    tg = study.tg128(preset)
    out = study.out / "autotune"
    base = study.rig_options("autotune", preset, [], user_steps=[1, 64])
    run_autotune(base, MANY_USER_TRIALS, out, bench_tg=tg, repeats=study.repeats)
    single = study.rig_options("autotune", preset, [], profile=PROFILE, user_steps=[1])
    run_autotune(single, {f"single-{name}": flags for name, flags in ONE_USER_TRIALS.items()}, out, bench_tg=tg,
                 repeats=study.repeats)


def greedy_text(study: GpuStudy, target: Path, overrides: list[str], drafter: Path | None,
                logprobs: bool = False) -> dict:
    """Greedy replies from a fresh server with these flags, plain and with a repeat penalty.

    The single-user profile's line without ``--backend-sampling`` is the base (CPU sampling);
    with ``logprobs`` each reply also keeps the top two candidates at every position.
    """
    profile = load_profile(PROFILE)
    line = [token for token in profile.server_args(target, drafter) if token != "--backend-sampling"]
    args = merge_server_args(line, [*overrides, *study.placement])
    replies = {}
    with LocalServer(study.binary("llama-server"), args, log_path=study.out / "greedy-server.log") as server:
        for prompt in ("Write a function that reverses a list.", "Tell me a story about a lighthouse."):
            # Random weights repeat a token under plain greedy decoding; the penalty makes the
            # text vary (and, on the favoured target, makes the drafter right only sometimes),
            # so a difference between settings would show.
            for penalty in (1.0, 1.5):
                body = {"messages": [{"role": "user", "content": prompt}], "max_tokens": 48, "temperature": 0,
                        "ignore_eos": True, "cache_prompt": False, "repeat_penalty": penalty, "repeat_last_n": 64}
                if logprobs:
                    body |= {"logprobs": True, "top_logprobs": 2}
                response = httpx.post(f"{server.base_url}/v1/chat/completions", json=body, timeout=120)
                response.raise_for_status()
                data = response.json()
                reply = {"text": data["choices"][0]["message"]["content"], "timings": data.get("timings")}
                if logprobs:
                    content = (data["choices"][0].get("logprobs") or {}).get("content", [])
                    reply["tokens"] = [item["token"] for item in content]
                    reply["top2"] = [[c["logprob"] for c in item["top_logprobs"][:2]] for item in content]
                replies[f"{prompt} (repeat_penalty {penalty})"] = reply
    return replies


def divergence(reference: dict, other: dict) -> dict | None:
    """Where ``other``'s text first parts from ``reference`` (a reply with tokens and top-2
    log-probabilities): the token index and how far apart the two best candidates were there."""
    text_a, text_b = reference["text"], other["text"]
    if text_a == text_b:
        return None
    shorter = min(len(text_a), len(text_b))
    cut = next((i for i in range(shorter) if text_a[i] != text_b[i]), shorter)
    length = 0
    for index, token in enumerate(reference.get("tokens", [])):
        length += len(token)
        if length > cut:
            pair = reference["top2"][index]
            return {"token_index": index, "top2_margin": pair[0] - pair[1] if len(pair) == 2 else None}
    return {"token_index": None, "top2_margin": None}


def greedy(study: GpuStudy) -> None:
    """Greedy text must not change with the sampling place, the drafter or the kept flags."""
    preset = study.presets[0]
    base = ["--parallel", "4", "-kvu", "-c", "8192"]
    bs = [*base, "--backend-sampling"]
    # the many-users line's flags; its tensor placement stays the study's (a CPU dry run has no CUDA0)
    many = [t for g in split_flags(load_profile(MANY_PROFILE).server.args) if g[0] != "-ot" for t in g]
    plain, favoured, drafter = study.target(preset, favoured=False), study.target(preset), study.drafter(preset)
    variants = {
        "plain/cpu-sampling": (plain, base, None),
        "plain/backend-sampling": (plain, bs, None),
        "plain/cpu-sampling+drafter": (plain, base, drafter),
        "plain/backend-sampling+drafter": (plain, [*bs, "--spec-draft-backend-sampling"], drafter),
        "plain/many-users-profile": (plain, many, None),
        "favoured/cpu-sampling": (favoured, base, None),
        "favoured/cpu-sampling+drafter": (favoured, base, drafter),
        "favoured/backend-sampling+drafter": (favoured, [*bs, "--spec-draft-backend-sampling"], drafter),
    }
    results = {}
    for name, (target, overrides, drafter_path) in variants.items():
        try:
            results[name] = greedy_text(study, target, overrides, drafter_path, logprobs=name == "plain/cpu-sampling")
        except Exception as error:  # noqa: BLE001 - a setting that fails is a finding
            results[name] = {"error": str(error)[:500]}
    ok = [name for name, replies in results.items() if "error" not in replies]
    same_as_cpu = {
        name: differing_replies(results, name, reference) == 0
        for name in ok if (reference := greedy_reference(name, ok))
    }
    drafter_same = {
        name: name.replace("+drafter", "") in ok and differing_replies(results, name, name.replace("+drafter", "")) == 0
        for name in ok if name.endswith("cpu-sampling+drafter")
    }
    # Random weights give a nearly flat next-token distribution: where two texts part, how close
    # were the two best candidates (a log-probability margin near 0 means a rounding flip)?
    cpu = results.get("plain/cpu-sampling", {})
    partings = {
        name: {prompt: divergence(cpu[prompt], reply) for prompt, reply in results[name].items()}
        for name in ("plain/backend-sampling", "plain/many-users-profile")
        if name in results and "error" not in results[name] and "error" not in cpu
    }
    margins = [pair[0] - pair[1] for reply in cpu.values() if isinstance(reply, dict)
               for pair in reply.get("top2", []) if len(pair) == 2]
    write_whole(study.out / "greedy.json", json.dumps(
        {"same_text_as_cpu_sampling": same_as_cpu, "drafter_keeps_text": drafter_same,
         "where_texts_part": partings, "median_top2_margin_cpu_sampling": sorted(margins)[len(margins) // 2]
         if margins else None, "replies": results}, indent=1))
    study.log(f"greedy text same as CPU sampling: {same_as_cpu}; drafter keeps text: {drafter_same}; "
              f"where texts part: {partings}")


def drafter_arm(study: GpuStudy, preset: str, n_max: int, right: bool = True, **changes: object):
    label = f"{preset}-drafter{n_max}" + ("" if right else "-random")
    return study.rig_options(label, preset, [*DRAFTER_FLAGS, "--spec-draft-n-max", str(n_max)],
                             no_drafter=False, drafter_path=study.drafter(preset, right=right), **changes)


def sweep(study: GpuStudy) -> None:
    """The many-users profile as shipped, then the drafter on the same line."""
    preset = study.presets[0]
    study.local_runs([study.rig_options(f"{preset}-profile", preset, []),
                      *(drafter_arm(study, preset, n_max) for n_max in (1, 2, 3)),
                      drafter_arm(study, preset, 2, right=False, user_steps=[1, 64])], "sweep")


def second(study: GpuStudy) -> None:
    if len(study.presets) < 2:
        return
    preset = study.presets[1]
    study.local_runs([study.rig_options(f"{preset}-profile", preset, []), drafter_arm(study, preset, 2)], "second")


def longctx(study: GpuStudy) -> None:
    """The single-user profile (one slot, 131072 tokens of context) without its drafter."""
    preset = study.presets[0]
    depths = (0, 32768, 120000) if study.scale >= 1 else (0, 256)
    study.local_runs([study.rig_options(
        f"{preset}-ctx{depth}", preset, [], profile=PROFILE, user_steps=[1], context_tokens=depth,
        warmup_seconds=study.window(12 if depth >= 100000 else 4),
        measure_seconds=study.window(40 if depth >= 100000 else 15),
    ) for depth in depths], "longctx")


def slot_profile(study: GpuStudy, patched: bool) -> Path:
    """The many-users profile with or without the slot patch, written beside the study's runs."""
    block = f'[llama_cpp]\npatches = ["{SLOT_PATCH}"]\n'
    text = Path(load_profile(MANY_PROFILE).source_path or "").read_text().replace(block, "")
    if "[llama_cpp]" in text:
        raise StudyError(f"{MANY_PROFILE} has llama_cpp settings besides the slot patch: the study cannot vary it")
    path = study.out / f"{MANY_PROFILE}-{'patched' if patched else 'stock'}.toml"
    write_whole(path, f"{text}\n{block}" if patched else text)
    return path


def slots(study: GpuStudy) -> None:
    """Sweeps at partial load: stock and patched slot choice, per-slot and unified KV, and pinned users."""
    preset = study.presets[0]
    many = merge_server_args(load_profile(MANY_PROFILE).server.args, study.placement)
    steps = SLOT_STEPS if study.scale >= 1 else [1, 2, 4]
    for name, extra in (("per-slot-kv", []), ("unified-kv", ["-kvu"])):
        threads = ["-t", "1", "-tb", "1"] if study.placement else []
        report = run_batched_bench(study.binary("llama-batched-bench"), study.target(preset),
                                   [*batched_bench_args(many), *extra, *threads], steps, gen_tokens=SLOT_MAX_TOKENS)
        write_whole(study.out / f"batched-bench-{preset}-{name}-slots.json", report.to_json())
        study.log(f"llama-batched-bench {preset} {name} at {steps}: {report.summary}")
    profiles = {patched: str(slot_profile(study, patched)) for patched in (False, True)}
    arms = []
    for label, patched, flags, pinned in SLOT_ARMS:
        options = study.rig_options(
            f"{preset}-{label}", preset, flags, profile=profiles[patched],
            user_steps=steps, pin_slots=pinned, max_tokens=SLOT_MAX_TOKENS if study.scale >= 1 else DRY_RUN_MAX_TOKENS,
            warmup_seconds=study.window(2), processes=1 if pinned else study.processes,
        )
        # 128-token replies take ~4.5 s at 64 users on an H200: 6 s at 1 user, 1 s more per doubling
        arms.append(options.changed(measure_seconds=[study.window(6 + math.log2(users)) for users in steps]))
    study.local_runs(arms, "slots")


def run_gpu_study(out: Path, presets: list[str], *, scale: float = 1.0, processes: int = 4, backend: str = "auto",
                  phases: list[str] | None = None, deadline: float | None = None, repeats: int = 1) -> list[str]:
    """Every wanted phase in order (all by default), each logged and kept even when a later one fails.

    Returns the lines of ``phases.jsonl`` that say a phase or run failed; ``DONE`` is written
    either way, for the lease's poller.
    """
    wanted = list(PHASES) if phases is None else phases
    study = GpuStudy(out, presets, scale, processes, backend, deadline, repeats)
    steps = {"models": write_models, "bench": bench, "autotune": autotune, "greedy": greedy,
             "sweep": sweep, "second": second, "longctx": longctx, "slots": slots}
    write_whole(out / "study.json", json.dumps({"presets": study.presets, "phases": wanted, "repeats": repeats}))
    if "models" not in wanted:
        study.phase("build", lambda: use_cached_build(study))
    return run_phases(study, PHASES, wanted, steps)


def run_phases(study: GpuStudy, order: tuple[str, ...], wanted: list[str],
               bodies: dict[str, Callable[[GpuStudy], None]]) -> list[str]:
    """The wanted phases in ``order`` (none after one that left no build); the failed lines of
    ``phases.jsonl``. ``DONE`` is written either way: the lease's poller waits for it."""
    for name in order:
        if name in wanted:
            study.phase(name, lambda body=bodies[name]: body(study))
        if study.build is None:
            study.log("no build: stopping")
            break
    log = study.out / "phases.jsonl"
    failed = [line for line in log.read_text().splitlines() if '"failed"' in line] if log.exists() else []
    study.log(f"study done, {counted(len(failed), 'failure')}")
    write_whole(study.out / "DONE", "done\n")
    return failed
