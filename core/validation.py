"""Turn pydantic validation errors into one readable line naming the file and field."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError


def describe_validation_error(error: ValidationError, source: Path | str) -> str:
    """``file: field.path: message`` for each problem, joined with '; '."""
    parts = []
    for problem in error.errors():
        field = ".".join(str(piece) for piece in problem["loc"]) or "(top level)"
        message = problem["msg"]
        if problem["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # a model's, a dataclass's
            message = "unknown key"
        parts.append(f"{field}: {message}")
    return f"{source}: " + "; ".join(parts)
