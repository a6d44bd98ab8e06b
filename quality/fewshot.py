"""Few-shot completion prompts for base models: K worked examples, then the question left open.

Why: a base model has no chat template; asked through one it continues a conversation it was
never trained on, and answers badly. Evaluation harnesses score such models by completion:
solved problems in one fixed format, then the graded question in the same format, and the
model's continuation is its answer. The format lives here and only here; an eval records it
whole in its settings (:class:`core.rundir.quality.FewShotPrompt`), so reading a run never
needs this module's constants.

The exemplars come from a pool that must never hold a graded question (the model would be
shown the answer): any exemplar whose text equals a graded question's is dropped before the
draw, and the draw is seeded, so the same seed gives the same prompt.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from core.errors import UsageError
from core.rundir.quality import FewShotPrompt, Question
from core.rundir.quality_files import questions_sha256, read_questions
from core.wording import counted
from quality.generator import generate_questions
from quality.grading import MARKER

EXEMPLAR_TEMPLATE = "Question: {question}\nAnswer: {answer}"
QUESTION_TEMPLATE = "Question: {question}\nAnswer:"
SEPARATOR = "\n\n"
# Having answered, a base model goes on to write the next exemplar: where it starts, the answer ended.
STOP = [SEPARATOR + QUESTION_TEMPLATE.split("{question}")[0].rstrip()]
# The generator's exemplar pool: a seed no graded set is made with by default (they use 0 and up),
# large enough for any K a prompt has room for.
POOL_SEED = 7919
POOL_SIZE = 200


@dataclass(frozen=True)
class ExemplarPool:
    """Worked questions to draw exemplars from, and how a manifest names where they came from."""

    questions: list[Question]
    source: str


def generator_pool(count: int = POOL_SIZE, seed: int = POOL_SEED) -> ExemplarPool:
    return ExemplarPool(
        generate_questions(count, seed=seed),
        f"the project's generator, seed {seed}, {counted(count, 'problem')}",
    )


def file_pool(path: Path) -> ExemplarPool:
    """A question file as the pool; a bad line is refused naming the file and the line."""
    questions = read_questions(path)
    return ExemplarPool(questions, f"{path.name} (sha256 {questions_sha256(path)[:12]}, "
                                   f"{counted(len(questions), 'question')})")


def normalized(text: str) -> str:
    """Question text as compared for overlap: case and runs of whitespace do not make a new question."""
    return " ".join(text.casefold().split())


def unseen_exemplars(pool: ExemplarPool, graded: list[Question]) -> list[Question]:
    """The pool without any question the eval grades."""
    asked = {normalized(question.question) for question in graded}
    return [question for question in pool.questions if normalized(question.question) not in asked]


def draw_exemplars(pool: ExemplarPool, graded: list[Question], shots: int, seed: int) -> list[Question]:
    """``shots`` exemplars from the pool's unseen questions, the same ones for the same seed."""
    usable = unseen_exemplars(pool, graded)
    if shots > len(usable):
        dropped = len(pool.questions) - len(usable)
        raise UsageError(
            f"--shots {shots}: the exemplar pool ({pool.source}) offers "
            f"{counted(len(usable), 'question')}"
            + (f" once {dropped} equal to graded ones are dropped" if dropped else "")
            + f"; give --shots {len(usable)} or fewer, or a larger --shots-from file"
        )
    return random.Random(seed).sample(usable, shots)


def few_shot_prompt(pool: ExemplarPool, graded: list[Question], shots: int, seed: int) -> FewShotPrompt:
    return FewShotPrompt(
        exemplar_template=EXEMPLAR_TEMPLATE,
        question_template=QUESTION_TEMPLATE,
        separator=SEPARATOR,
        exemplars=draw_exemplars(pool, graded, shots, seed),
        pool=pool.source,
    )


def worked_answer(question: Question) -> str:
    """An exemplar's answer as the grader reads it, ending ``#### N``: a bare-number answer gets
    the marker, so the model learns one place to put its answer."""
    answer = question.answer.strip()
    return answer if MARKER in answer else f"{MARKER} {answer}"


def completion_text(prompt: FewShotPrompt, question: Question) -> str:
    """The whole prompt for one graded question: the exemplars, then the question left open."""
    parts = [
        prompt.exemplar_template.format(question=exemplar.question, answer=worked_answer(exemplar))
        for exemplar in prompt.exemplars
    ]
    parts.append(prompt.question_template.format(question=question.question))
    return prompt.separator.join(parts)
