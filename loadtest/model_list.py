"""A server's ``/v1/models`` (OpenAI's list of models), read once before the load.

Why once: the list names the model a sweep's requests must carry, stands in for ``/health`` on an
OpenAI-compatible server without one, and may say how many tokens one request holds (vLLM's
``max_model_len``). Each of those checks reads this record, so a sweep asks the server once.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from core.errors import UsageError
from loadtest.path_answer import PathAnswer, ask_path

MODELS_PATH = "/v1/models"
MODEL_LIST_TIMEOUT_S = 5.0


class ModelList(BaseModel):
    """What ``/v1/models`` answered and what it listed (nothing, unless it answered 200 with a list)."""

    url: str
    answer: PathAnswer
    names: list[str] = Field(default_factory=list, description="each listed model's id, the name requests carry")
    context_lengths: list[int] = Field(default_factory=list,
                                       description="each listed model's max_model_len, where it names one above 0")


def read_model_list(url: str, timeout: float = MODEL_LIST_TIMEOUT_S) -> ModelList:
    """``GET /v1/models`` once; a server that answers otherwise, or not at all, lists nothing."""
    answer = ask_path(url, MODELS_PATH, timeout)
    listed = answer.body.get("data") if isinstance(answer.body, dict) else None
    entries = [entry for entry in listed if isinstance(entry, dict)] if isinstance(listed, list) else []
    lengths = [entry.get("max_model_len") for entry in entries]
    return ModelList(
        url=url,
        answer=answer,
        names=[str(entry["id"]) for entry in entries if entry.get("id")],
        context_lengths=[length for length in lengths if type(length) is int and length > 0],
    )


def listed_model(models: ModelList) -> str | None:
    """The one model the server lists, the name its requests must carry; None when it lists none. A
    server listing several is refused: which one to load is the user's choice (``--model-name``)."""
    names = models.names
    if len(names) > 1:
        shown = ", ".join(repr(name) for name in names[:5]) + (", ..." if len(names) > 5 else "")
        raise UsageError(f"--model-name: {models.url} serves {len(names)} models ({shown}); name the one to load")
    return names[0] if names else None
