"""Counts and lists as a reader reads them: ``1 user``, ``2 users``; ``a, b and c``.

Every reader-facing count (a report line, a glance line, a warning, a CLI line) says ``1 user``
and ``2 users``, never ``1 users``; the rule lives here, once, so no module spells it again.
"""

from __future__ import annotations

from collections.abc import Sequence


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """``count`` and the noun in its number: ``1 user``, ``64 users``, ``0.5 users``,
    ``1 process`` / ``3 processes`` with ``plural="processes"``. A float prints as ``:g`` does
    (``2.0`` as ``2``); only exactly one takes the singular."""
    number = f"{count:g}" if isinstance(count, float) else str(count)
    return f"{number} {noun if count == 1 else plural or noun + 's'}"


def listed(items: Sequence[str]) -> str:
    """Items as a sentence lists them: ``a``, ``a and b``, ``a, b and c``."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"
