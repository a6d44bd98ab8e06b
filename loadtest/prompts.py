"""Prompts as data: six bundled categories, or a user's JSONL file.

Each JSONL line is ``{"category": "...", "messages": [{"role": "user", "content": "..."}]}``
(or ``"prompt": "..."`` as shorthand for one user message). ``mixed`` rotates the
categories evenly, so every step of a sweep sees the same mix whatever its length.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from core.errors import LoadTestError

PROMPT_DIR = Path(__file__).resolve().parent / "prompts"
CATEGORIES = ("code", "chat", "story", "explanation", "facts", "summary")


@dataclass(frozen=True)
class Prompt:
    category: str
    messages: tuple[dict[str, str], ...]

    def with_context(self, context: str) -> Prompt:
        """The same prompt with a long document ahead of the question (long-context runs)."""
        if not context:
            return self
        first, *rest = self.messages
        merged = {**first, "content": f"{context}\n\n{first['content']}"}
        return Prompt(self.category, (merged, *rest))


def _parse_line(line: str, where: str, default_category: str) -> Prompt:
    try:
        data = json.loads(line)
    except json.JSONDecodeError as error:
        raise LoadTestError(f"{where}: not JSON ({error}); expected one JSON object per line") from None
    if not isinstance(data, dict):
        raise LoadTestError(f"{where}: expected a JSON object with 'messages' or 'prompt'")
    if "messages" in data:
        messages = data["messages"]
        if not (
            isinstance(messages, list) and messages and all(isinstance(m, dict) and "content" in m for m in messages)
        ):
            raise LoadTestError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
    elif isinstance(data.get("prompt"), str):
        messages = [{"role": "user", "content": data["prompt"]}]
    else:
        raise LoadTestError(f"{where}: expected a 'messages' list or a 'prompt' string")
    return Prompt(str(data.get("category", default_category)), tuple(messages))


def load_prompt_file(path: Path | str) -> list[Prompt]:
    path = Path(path)
    if not path.exists():
        raise LoadTestError(
            f"prompt file {path} does not exist; give a JSONL file or one of: mixed, {', '.join(CATEGORIES)}"
        )
    prompts = [
        _parse_line(line, f"{path}:{number}", path.stem)
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line.strip()
    ]
    if not prompts:
        raise LoadTestError(f"prompt file {path} holds no prompts")
    return prompts


def load_prompts(selection: str = "mixed") -> list[Prompt]:
    """``mixed``, one category name, a comma list of categories, or a JSONL path."""
    if selection == "mixed":
        names = list(CATEGORIES)
    elif all(name in CATEGORIES for name in selection.split(",")):
        names = selection.split(",")
    else:
        return load_prompt_file(selection)
    return [prompt for name in names for prompt in load_prompt_file(PROMPT_DIR / f"{name}.jsonl")]


def rotation(prompts: list[Prompt], offset: int = 0) -> Iterator[Prompt]:
    """Endless prompts, categories in turn (code, chat, story, ... then the next of each).

    ``offset`` shifts the start so concurrent users do not all send the same prompt first.
    """
    by_category: dict[str, list[Prompt]] = {}
    for prompt in prompts:
        by_category.setdefault(prompt.category, []).append(prompt)
    cycles = {name: itertools.cycle(items) for name, items in by_category.items()}
    names = list(by_category)
    for index in itertools.count(offset):
        yield next(cycles[names[index % len(names)]])
