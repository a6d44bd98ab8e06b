"""Ask every question of a set against one server and grade each reply, resumably.

Every request asks for the same decoding (temperature 0, a fixed seed, no prompt cache,
thinking off, a token limit), because each of those changes answers; by default one request
is in flight at a time, since batched decoding can change the arithmetic and so the text.
A run asks in one prompt mode (chat, or a few-shot completion for a base model:
``quality.requests``) and grades both the same way.
Each graded answer is appended to ``answers.jsonl`` as soon as it arrives: a run stopped half
way is resumed by running it again, which asks only what is not yet graded.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from core.errors import QualityError, RunDirError
from core.rundir.manifest import utc_now
from core.rundir.quality import AnswerRecord, EvalManifest, EvalSettings, Question, RepeatMismatch
from core.rundir.quality_files import ANSWERS, QUESTIONS, REPEATS, EvalDir, write_jsonl
from quality.grading import expected_answer, extract_answer, failure_kinds
from quality.requests import check_completions_endpoint, endpoint, read_reply, request_body

REQUEST_TIMEOUT_S = 600.0


def ask(client: httpx.Client, url: str, question: Question, settings: EvalSettings, repeat: int) -> AnswerRecord:
    """One question asked and graded; an HTTP error status (llama-server answers 500 for output it
    cannot parse) is a wrong answer of kind ``http_error``, never a lost one."""
    expected = expected_answer(question.answer)
    started = time.monotonic()
    try:
        response = client.post(f"{url}{endpoint(settings)}", json=request_body(question, settings))
    except httpx.HTTPError as error:
        # no answer at all (refused, reset, timed out) says nothing about the model: stop, keep
        # what is graded, and let a rerun ask this question again
        raise QualityError(
            f"{url}: question {question.id} got no reply ({type(error).__name__}: {error}); the answers so far "
            "are kept, run the same command again to resume once the server answers"
        ) from None
    seconds = round(time.monotonic() - started, 4)
    if response.status_code != 200:
        return AnswerRecord(
            question_id=question.id,
            repeat=repeat,
            text="",
            extracted=None,
            expected=expected,
            right=False,
            failures=["http_error"],
            http_status=response.status_code,
            error_message=response.text[:500],
            seconds=seconds,
        )
    body = response.json()
    reply = read_reply(body, settings)
    usage = body.get("usage") or {}
    timings = body.get("timings") or {}
    extracted = extract_answer(reply.text)
    return AnswerRecord(
        question_id=question.id,
        repeat=repeat,
        text=reply.text,
        extracted=extracted,
        expected=expected,
        right=extracted is not None and extracted == expected,
        failures=failure_kinds(
            reply.text, reply.finish_reason, 200, thinking=settings.thinking, reasoning=reply.reasoning
        ),
        finish_reason=reply.finish_reason,
        http_status=200,
        prompt_tokens=usage.get("prompt_tokens"),
        completion_tokens=usage.get("completion_tokens"),
        decode_tokens_per_second=timings.get("predicted_per_second"),
        seconds=seconds,
    )


def first_difference(a: list, b: list) -> int:
    """Index of the first position where two sequences differ (the shorter length if one is a prefix)."""
    for index, (left, right) in enumerate(zip(a, b, strict=False)):
        if left != right:
            return index
    return min(len(a), len(b))


def tokenize(client: httpx.Client, url: str, text: str) -> list[str] | None:
    """The server's token pieces of ``text`` (None when it cannot tokenise)."""
    try:
        response = client.post(f"{url}/tokenize", json={"content": text, "with_pieces": True})
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    tokens = response.json().get("tokens", [])
    return [str(token["piece"]) if isinstance(token, dict) else str(token) for token in tokens]


def repeat_mismatches(
    answers: list[AnswerRecord], tokens_of: Callable[[str], list[str] | None]
) -> list[RepeatMismatch]:
    """Each later repeat whose text differs from repeat 0 of the same question."""
    by_question: dict[str, dict[int, AnswerRecord]] = {}
    for record in answers:
        by_question.setdefault(record.question_id, {})[record.repeat] = record
    found = []
    for question_id, repeats in by_question.items():
        first = repeats.get(0)
        if first is None:
            continue
        for number in sorted(repeats):
            other = repeats[number]
            if number == 0 or other.text == first.text:
                continue
            pieces_a, pieces_b = tokens_of(first.text), tokens_of(other.text)
            token_index = pieces = None
            if pieces_a is not None and pieces_b is not None:
                token_index = first_difference(pieces_a, pieces_b)
                pieces = (
                    pieces_a[token_index] if token_index < len(pieces_a) else "(end)",
                    pieces_b[token_index] if token_index < len(pieces_b) else "(end)",
                )
            found.append(
                RepeatMismatch(
                    question_id=question_id,
                    repeats=(0, number),
                    same_extracted=first.extracted == other.extracted,
                    same_grade=first.right == other.right,
                    first_token_index=token_index,
                    first_tokens=pieces,
                    first_char_index=first_difference(list(first.text), list(other.text)),
                )
            )
    return found


def prepare_eval_dir(
    folder: EvalDir, manifest: EvalManifest, questions: list[Question], question_file: Path
) -> EvalManifest:
    """A new eval folder, or the one being resumed if it asked the same questions the same way."""
    if folder.manifest_path.exists():
        earlier = folder.read_manifest()
        if earlier.questions.sha256 != manifest.questions.sha256:
            raise RunDirError(
                f"{folder.path}: resumed with other questions ({question_file} has sha256 "
                f"{manifest.questions.sha256[:12]}, the run asked {earlier.questions.sha256[:12]}); use a new folder"
            )
        if earlier.settings != manifest.settings:
            differ = "; ".join(manifest.settings.differences(earlier.settings))
            raise RunDirError(f"{folder.path}: resumed with other settings ({differ}); use a new folder")
        for what, before, now in (
            (
                "model",
                earlier.model.sha256 if earlier.model else None,
                manifest.model.sha256 if manifest.model else None,
            ),
            (
                "server flags",
                earlier.server.args if earlier.server else None,
                manifest.server.args if manifest.server else None,
            ),
        ):
            if before != now:
                raise RunDirError(f"{folder.path}: resumed with another {what} ({now} vs {before}); use a new folder")
        if (folder.path / (ANSWERS + ".gz")).exists():
            raise RunDirError(
                f"{folder.path}: its answers are packed ({ANSWERS}.gz, a committed run); unpack to resume"
            )
        return earlier.model_copy(update={"status": "running", "status_detail": None, "ended_at": None})
    folder.path.mkdir(parents=True, exist_ok=True)
    write_jsonl(folder.path / QUESTIONS, questions)
    folder.write_manifest(manifest)
    return manifest


def run_eval(
    url: str,
    folder: EvalDir,
    manifest: EvalManifest,
    questions: list[Question],
    question_file: Path,
    *,
    progress: Callable[[AnswerRecord], None] | None = None,
) -> EvalManifest:
    """Ask what is not yet graded, record each answer as it comes, and find repeat mismatches."""
    if manifest.settings.mode == "completion":
        check_completions_endpoint(url)  # before the folder: a chat-only server leaves nothing behind
    manifest = prepare_eval_dir(folder, manifest, questions, question_file)
    settings = manifest.settings
    graded = {(record.question_id, record.repeat) for record in folder.answers()}
    pending = [
        (question, repeat)
        for repeat in range(settings.repeat)
        for question in questions
        if (question.id, repeat) not in graded
    ]
    started = time.monotonic()
    timeout = httpx.Timeout(10.0, read=REQUEST_TIMEOUT_S)
    with httpx.Client(timeout=timeout, limits=httpx.Limits(max_connections=settings.concurrency)) as client:
        pool = ThreadPoolExecutor(max_workers=settings.concurrency)
        try:
            for record in pool.map(lambda item: ask(client, url, item[0], settings, item[1]), pending):
                folder.add_answer(record)
                if progress:
                    progress(record)
            pool.shutdown()
        except BaseException as error:
            pool.shutdown(wait=False, cancel_futures=True)
            manifest = manifest.model_copy(
                update={
                    "status": "interrupted" if isinstance(error, KeyboardInterrupt) else "failed",
                    "status_detail": f"stopped: {str(error)[:300] or type(error).__name__}; rerun to resume",
                    "ended_at": utc_now(),
                    "wall_seconds": round((manifest.wall_seconds or 0.0) + time.monotonic() - started, 2),
                }
            )
            folder.write_manifest(manifest)
            raise
        answers = folder.answers()
        if settings.repeat > 1:
            write_jsonl(folder.path / REPEATS, repeat_mismatches(answers, lambda text: tokenize(client, url, text)))
    manifest = manifest.model_copy(
        update={
            "status": "complete",
            "ended_at": utc_now(),
            "wall_seconds": round((manifest.wall_seconds or 0.0) + time.monotonic() - started, 2),
        }
    )
    folder.write_manifest(manifest)
    return manifest
