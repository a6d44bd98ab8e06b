"""What a server says of itself before the load: how many tokens one request may hold.

Why: a run against a server given by URL, with no rig profile, must not borrow llama-server's
profile to fill what it was not told; rigbench sends every request setting itself (``max_tokens``,
``temperature``: the server's own defaults never apply), so what it needs from the server is
whether a reply of ``max_tokens`` fits. Read from llama-server's ``/props``
(``default_generation_settings.n_ctx``: the context one slot holds) or the OpenAI-style
``/v1/models`` (vLLM names each model's ``max_model_len``; llama-server's ``meta.n_ctx_train`` is
the model's training length, not the server's, so it is not read). llama-server's ``/props`` does
not show its ``-n`` (``params.n_predict`` stays -1), so no reply length is taken from it. A server
that answers neither is described by nothing.
"""

from __future__ import annotations

from typing import Any

from core.errors import UsageError
from core.rundir.models import ServerDescription, SessionSettings
from core.wording import counted
from loadtest.model_list import ModelList, read_model_list
from loadtest.path_answer import ask_path

DESCRIBE_TIMEOUT_S = 5.0


def describe_server(url: str, timeout: float = DESCRIBE_TIMEOUT_S,
                    models: ModelList | None = None) -> ServerDescription:
    """What ``/props`` and ``/v1/models`` said (nothing where neither answered). ``models``: the server's
    ``/v1/models`` as already read for the model name and the health check, so it is not asked again."""
    described_by: list[str] = []
    context_tokens = None
    props = ask_path(url, "/props", timeout).body
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    if isinstance(settings, dict):
        described_by.append("/props")
        context_tokens = _positive(settings.get("n_ctx"))
    lengths = (models if models is not None else read_model_list(url, timeout)).context_lengths
    if lengths:
        described_by.append("/v1/models")
        context_tokens = context_tokens or min(lengths)
    return ServerDescription(described_by=described_by, context_tokens=context_tokens)


def _context_source(description: ServerDescription) -> str:
    """Where the context per request was read, for the lines that quote it."""
    return "its /props n_ctx" if "/props" in description.described_by else "its /v1/models max_model_len"


def _positive(value: Any) -> int | None:
    return value if type(value) is int and value > 0 else None


def check_reply_fits(url: str, description: ServerDescription, *, max_tokens: int, ignore_eos: bool,
                     context_tokens: int = 0) -> str | None:
    """A reply that runs to ``max_tokens`` (``--ignore-eos``) must fit the context the server holds per
    request, or every request would be cut by the context, not by ``max_tokens``: refused. Without
    ``--ignore-eos`` replies may end sooner, so a reply longer than the context is a warning (returned)."""
    room = description.context_tokens
    if room is None or max_tokens + context_tokens < room:
        return None
    source = _context_source(description)
    asked = f"--max-tokens {max_tokens}" + (f" after --context-tokens {context_tokens}" if context_tokens else "")
    said = f"{asked}: {url} holds {room} tokens per request ({source}), prompt included"
    if ignore_eos:
        raise UsageError(f"{said}; with --ignore-eos every reply would end at the context's edge, not at "
                         f"--max-tokens: ask for fewer tokens, or serve a longer context")
    return f"{said}; a reply that runs long ends at the context's edge, not at --max-tokens"


def check_drawn_fit(url: str, description: ServerDescription, *, prompt_tokens: int, reply_tokens: int,
                    options: str) -> None:
    """The longest drawn or traced request (its prompt and its reply, which runs to its length with
    ignore_eos) must fit the context the server holds per request: a draw past it would be cut by the
    context, and its reply's length would not be the one drawn. Refused, naming the options."""
    room = description.context_tokens
    if room is None or prompt_tokens + reply_tokens < room:
        return
    source = _context_source(description)
    raise UsageError(f"{options}: the longest request may hold {prompt_tokens} prompt and {reply_tokens} reply "
                     f"tokens, but {url} holds {room} tokens per request ({source}): lower the bounds (max=), or "
                     "serve a longer context")


def check_conversation_fits(url: str, description: ServerDescription, *, sessions: SessionSettings,
                            prompt_tokens: tuple[int, int], reply_tokens: tuple[int, int], context_tokens: int,
                            options: str) -> str | None:
    """A conversation resends its history, so the last turn of a conversation of ``--turns``' upper bound holds
    the system prompt, the document ahead of its first prompt, every turn's prompt and every earlier reply, then
    makes its own; where that passes the context the server holds per request, the turn fails at the context's
    edge and ends its conversation early. ``prompt_tokens`` and ``reply_tokens``: each turn's (fewest, most):
    drawn bounds; a reply asked for with ``--ignore-eos`` is ``max_tokens`` either way, one that may end sooner
    at least 0; the prompt set's own prompts count 0 (not counted: the figures are floors), as do the chat
    template's tokens. Refused where even the fewest pass the context (every such conversation would end
    early); a warning (returned) where only the most do."""
    room = description.context_tokens
    turns = sessions.turns_max
    ahead = sessions.system_prompt_tokens + context_tokens
    least = ahead + turns * (prompt_tokens[0] + reply_tokens[0])
    most = ahead + turns * (prompt_tokens[1] + reply_tokens[1])
    if room is None or most < room:
        return None
    source = _context_source(description)
    parts = [f"a {sessions.system_prompt_tokens}-token system prompt"] if sessions.system_prompt_tokens else []
    parts += [f"--context-tokens {context_tokens}"] if context_tokens else []
    parts += [f"{counted(turns, 'prompt')} of {_span(prompt_tokens)} tokens" if prompt_tokens[1] else
              f"{turns} of the prompt set's prompts (not counted)",
              f"{counted(turns, 'reply', 'replies')} of {_span(reply_tokens)}"]
    held = f"{least}" if least == most else f"{least} to {most}"
    said = (f"{options}: the last turn of a {turns}-turn conversation holds {held} tokens ({', '.join(parts)}), "
            f"but {url} holds {room} tokens per request ({source})")
    if least >= room:
        raise UsageError(f"{said}: every conversation that long would end at the context's edge; lower --turns or "
                         "the lengths, or serve a longer context")
    return f"{said}; a conversation that runs that long fails at the context's edge and ends early"


def _span(bounds: tuple[int, int]) -> str:
    return f"{bounds[0]}" if bounds[0] == bounds[1] else f"{bounds[0]}-{bounds[1]}"


def served_model_path(url: str, timeout: float = DESCRIBE_TIMEOUT_S) -> str | None:
    """The model file llama-server says it serves (``/props`` ``model_path``), or None where it says none.
    A path on the server's machine: only a server on this one names a file that can be read here."""
    props = ask_path(url, "/props", timeout).body
    path = props.get("model_path") if isinstance(props, dict) else None
    return path if isinstance(path, str) and path else None
