"""Read the answer out of a reply, grade it, and name what went wrong with the reply.

The answer is the number right after the first ``####`` that has one (GSM8K's convention,
which instruction-tuned models copy; a Markdown ``#### Step 1`` heading is not an answer, and
what a model writes after its answer is not its answer); without one, the last number in the
text. Both sides are normalised the same
way (commas, a ``$``, a trailing ``.0`` dropped), so ``1,000.00`` and ``1000`` grade equal.
Failure kinds are facts about the reply, independent of the grade: a looping reply can still
contain the right number.
"""

from __future__ import annotations

import re
from collections import Counter

from core.rundir.quality import FailureKind

NUMBER = re.compile(r"(?<![\w.])-?\$?\d[\d,]*(?:\.\d+)?|\$?\d[\d,]*(?:\.\d+)?")
MARKER = "####"
MARKED = re.compile(r"####\s*(-?\$?\d[\d,]*(?:\.\d+)?)")
LOOP_REPEATS = 5
THINK_OPEN = ("<think>", "<|channel|>analysis", "<thinking>")


def normalise_number(text: str) -> str | None:
    """``"$1,234.50"`` → ``"1234.5"``; ``"-0.0"`` → ``"0"``; not a number → None."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    if not re.fullmatch(r"[-+]?\d+(?:\.\d+)?", cleaned):
        return None
    negative = cleaned.startswith("-")
    digits = cleaned.lstrip("+-")
    whole, _, fraction = digits.partition(".")
    whole = whole.lstrip("0") or "0"
    fraction = fraction.rstrip("0")
    value = f"{whole}.{fraction}" if fraction else whole
    return f"-{value}" if negative and value != "0" else value


def extract_answer(text: str) -> str | None:
    """The reply's answer, normalised, or None when it holds no number."""
    marked = MARKED.search(text)
    if marked:
        return normalise_number(marked.group(1))
    numbers = NUMBER.findall(text)
    return normalise_number(numbers[-1]) if numbers else None


def expected_answer(answer: str) -> str:
    """A question's gold answer: after ``####`` when present (GSM8K), else the whole field."""
    value = answer.rsplit(MARKER, 1)[-1] if MARKER in answer else answer
    normalised = normalise_number(value)
    return normalised if normalised is not None else value.strip()


def is_looping(text: str, repeats: int = LOOP_REPEATS) -> bool:
    """A non-empty line that appears ``repeats`` or more times."""
    lines = Counter(line.strip() for line in text.splitlines() if line.strip())
    return bool(lines) and max(lines.values()) >= repeats


def failure_kinds(
    text: str,
    finish_reason: str | None,
    http_status: int | None,
    *,
    thinking: bool = False,
    reasoning: str | None = None,
) -> list[FailureKind]:
    """What is wrong with a reply, in a fixed order; empty for a clean reply."""
    kinds: list[FailureKind] = []
    if http_status != 200:
        kinds.append("http_error")
        return kinds
    if finish_reason == "length":
        kinds.append("cut_off")
    if is_looping(text):
        kinds.append("looping")
    if not thinking and (reasoning or any(tag in text for tag in THINK_OPEN)):
        kinds.append("thinking_opened")
    if not text.strip():
        kinds.append("empty")
    return kinds
