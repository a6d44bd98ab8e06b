"""Answer-quality runs in the run directory: what an eval and a ladder folder hold.

::

    <eval run>/
      eval.json          EvalManifest (settings, model, server, question set), atomic
      questions.jsonl    the question set as asked (Question per line)
      answers.jsonl      AnswerRecord per line, append-only (a rerun skips graded ones)
      repeats.jsonl      RepeatMismatch per question whose repeats differ (``--repeat``)
    <ladder>/
      ladder.json        LadderManifest: each rung's file, bytes, sha256, speed, memory, eval
      rungs/<rung>/      one eval run per rung
      report.md, quality.json, plots/   written by analysis

The quality stage writes these, analysis reads them; eval and ladder folders are not sweep
runs (no ``manifest.json``), so ``rigbench report`` and ``rigbench check`` never misread one.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from core.rundir.models import BuildInfo, ModelInfo, RigInfo, RunStatus, ServerInfo
from core.strict import Strict
from core.wording import counted

QUALITY_SCHEMA_VERSION = 1
FailureKind = Literal["cut_off", "looping", "thinking_opened", "empty", "http_error"]
FAILURE_KINDS: tuple[FailureKind, ...] = ("cut_off", "looping", "thinking_opened", "empty", "http_error")
PromptMode = Literal["chat", "completion"]


class Question(Strict):
    """One question: GSM8K's form (``answer`` ends ``#### N``) or a bare number as the answer."""

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    answer: str = Field(min_length=1)


class QuestionSetInfo(Strict):
    name: str
    count: int
    sha256: str = Field(description="sha256 of the question file as read")
    source: str | None = Field(None, description="where the set came from (generator seed, dataset and digest)")


class FewShotPrompt(Strict):
    """The text a completion-mode eval writes around every question. Kept whole, exemplars and
    all rather than their ids alone, because the pool they were drawn from (the generator, a
    file) can change, and a run must stay readable and repeatable without it."""

    exemplar_template: str = Field(description="one worked example: {question} and {answer} filled in")
    question_template: str = Field(description="the graded question, left open for the model to answer")
    separator: str = Field(description="between two exemplars, and before the graded question")
    exemplars: list[Question] = Field(default_factory=list, description="in prompt order")
    pool: str = Field(description="where the exemplars were drawn from, and how many it offered")

    @property
    def exemplar_ids(self) -> list[str]:
        return [exemplar.id for exemplar in self.exemplars]


class EvalSettings(Strict):
    """What every request of an eval run asks; recorded because each one changes answers."""

    temperature: float = 0.0
    seed: int = 0
    max_tokens: int = Field(1024, gt=0)
    cache_prompt: bool = False
    thinking: bool = False
    concurrency: int = Field(1, gt=0, description="requests in flight at once: batching can change the arithmetic")
    repeat: int = Field(1, gt=0, description="times each question is asked")
    system_prompt: str | None = None
    mode: PromptMode = Field(
        "chat", description="chat: the server's chat template; completion: a few-shot prompt a base model continues"
    )
    shots: int = Field(0, ge=0, description="worked examples before each question (completion mode)")
    shot_seed: int = Field(0, description="seed of the exemplars' draw from their pool")
    stop: list[str] = Field(default_factory=list, description="strings that end a reply where they appear")
    prompt: FewShotPrompt | None = Field(None, description="completion mode: the format and the exemplars")

    @model_validator(mode="after")
    def _prompt_fits_mode(self) -> EvalSettings:
        """A completion run without its prompt could not be asked again; a chat run with one would
        claim exemplars no request carried."""
        if self.mode == "chat" and (self.shots or self.prompt is not None):
            raise ValueError("worked examples (shots, prompt) are asked in completion mode only")
        if self.mode == "completion":
            if self.prompt is None:
                raise ValueError("completion mode needs its prompt (format and exemplars)")
            if len(self.prompt.exemplars) != self.shots:
                raise ValueError(f"shots is {self.shots} but the prompt holds {len(self.prompt.exemplars)} exemplars")
        return self

    def differences(self, other: EvalSettings, ignore: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """How ``other`` asks differently, readable in one line: the prompt named as a report names
        it (``chat`` vs ``completion, 5 shots``, or the exemplars' ids), never the whole prompt."""
        prompt_keys = {"mode", "shots", "prompt"}
        mine, theirs = self.model_dump(exclude=ignore | prompt_keys), other.model_dump(exclude=ignore | prompt_keys)
        differ = [f"{key} {mine[key]} vs {theirs[key]}" for key in mine if mine[key] != theirs[key]]
        if self.mode_label() != other.mode_label():
            differ.insert(0, f"prompt mode {self.mode_label()} vs {other.mode_label()}")
        elif self.prompt != other.prompt:
            mine_ids = ", ".join(self.prompt.exemplar_ids) if self.prompt else "none"
            their_ids = ", ".join(other.prompt.exemplar_ids) if other.prompt else "none"
            differ.append(f"exemplars {mine_ids} vs {their_ids}")
        return differ

    def mode_label(self) -> str:
        """How a report names the way answers were asked: ``chat`` or ``completion, 5 shots``."""
        if self.mode == "chat":
            return "chat"
        return f"completion, {counted(self.shots, 'shot')}"


class EvalManifest(Strict):
    schema_version: Literal[1] = QUALITY_SCHEMA_VERSION
    run_id: str
    arm: str = Field("default", description="the configuration compared (a rung, drafter on/off, a machine)")
    status: RunStatus = "running"
    status_detail: str | None = None
    created_at: str
    ended_at: str | None = None
    settings: EvalSettings
    questions: QuestionSetInfo
    rig: RigInfo = Field(default_factory=RigInfo)
    build: BuildInfo | None = None
    model: ModelInfo | None = None
    server: ServerInfo | None = None
    wall_seconds: float | None = None
    notes: list[str] = Field(default_factory=list)


class AnswerRecord(Strict):
    """One asked question: the raw reply, what was read from it, and how it was graded."""

    schema_version: Literal[1] = QUALITY_SCHEMA_VERSION
    question_id: str
    repeat: int = 0
    text: str
    extracted: str | None = Field(description="the answer read from the text, normalised")
    expected: str
    right: bool
    failures: list[FailureKind] = Field(default_factory=list)
    finish_reason: str | None = None
    http_status: int | None = None
    error_message: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    decode_tokens_per_second: float | None = None
    seconds: float


class RepeatMismatch(Strict):
    """Two repeats of one question whose texts differ, and where they part."""

    schema_version: Literal[1] = QUALITY_SCHEMA_VERSION
    question_id: str
    repeats: tuple[int, int]
    same_extracted: bool
    same_grade: bool
    first_token_index: int | None = Field(description="index of the first differing token (None: not tokenised)")
    first_tokens: tuple[str, str] | None = None
    first_char_index: int


class BenchSpeed(Strict):
    prompt_tokens_per_second: float | None = None
    generation_tokens_per_second: float | None = None
    flags: list[str] = Field(default_factory=list)


class RungInfo(Strict):
    name: str = Field(description="the llama-quantize type (F16, Q4_K_M, ...) or a given file's stem")
    file: str
    size_bytes: int
    sha256: str
    origin: Literal["quantized", "given"]
    quantize_seconds: float | None = None
    bench: BenchSpeed | None = None
    memory_after_load_mib: float | None = Field(None, description="server RSS (CPU) or GPU memory used, once loaded")
    eval_run: str | None = Field(None, description="the rung's eval folder, relative to the ladder")


class LadderManifest(Strict):
    schema_version: Literal[1] = QUALITY_SCHEMA_VERSION
    ladder_id: str
    status: RunStatus = "running"
    status_detail: str | None = None
    created_at: str
    ended_at: str | None = None
    source: ModelInfo
    source_note: str | None = Field(None, description="what the top rung is (e.g. widened from a quantized file)")
    reference: str = Field(description="the rung others are compared with")
    rungs: list[RungInfo] = Field(default_factory=list)
    questions: QuestionSetInfo
    settings: EvalSettings
    rig: RigInfo = Field(default_factory=RigInfo)
    build: BuildInfo | None = None
    server_args: list[str] = Field(default_factory=list)
    wall_seconds: float | None = None
