"""A load written as a file: ``LoadSettings``' own fields, as TOML or JSON.

A user writes one to keep a load beside a study (any of the fields; the command's flags and defaults
give the rest), and rigbench writes one where a load crosses to another machine: the rig's sweep
step uploads the settings it checked here, and the rig's ``rigbench sweep --load`` reads them.
``context_tokens`` may be a list there (one run each); ``trace`` may be a path (read, relative to the
file, when the load is made) or the trace's full entry as a run's manifest holds it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.errors import UsageError
from core.rundir.models import LoadSettings
from core.table_file import read_table

# what a load file holds beyond LoadSettings' fields: a trace's speed next to a trace given by its path
EXTRA_KEYS = ("trace_speed",)
AUTO_PROCESSES = "auto"  # ``processes`` sized once the server answers (``--processes auto``)


def read_load_file(path: Path) -> dict[str, Any]:
    """The file's fields as given (checked together with the flags later); an unreadable file or an unknown
    key is refused in one line naming the file and the key."""
    fields = read_table(path, "--load", "LoadSettings' fields")
    unknown = [key for key in fields if key not in LoadSettings.model_fields and key not in EXTRA_KEYS]
    if unknown:
        raise UsageError(f"--load {path}: unknown key {unknown[0]!r}; a load file holds LoadSettings' fields "
                         "(docs/load-files.md)")
    return fields


def load_fields_text(fields: dict[str, Any]) -> str:
    """A load's fields (any of ``LoadSettings``', models among them) as a JSON load file: a field left unset
    (None) is left out, so the reader's defaults give it, and ``processes`` unset is ``"auto"``."""
    kept = {key: value for key, value in fields.items() if value is not None}
    if "processes" in fields and fields["processes"] is None:
        kept["processes"] = AUTO_PROCESSES
    return json.dumps(kept, indent=1, default=lambda value: value.model_dump(mode="json")) + "\n"
