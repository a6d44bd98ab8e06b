"""A table of settings written as a file, TOML or JSON (``.json``): a load (``core.load_file``), an eval's or
a ladder's settings (``core.quality_settings``). Read whole here; each reader checks the keys its model has."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from core.errors import UsageError


def read_table(path: Path, option: str, holds: str) -> dict[str, Any]:
    """The file's table as written; a file that cannot be read, is not TOML (or JSON), or holds no table is
    refused in one line naming ``option`` and the file. ``holds``: what the table is, for that line."""
    try:
        text = path.read_text()
    except OSError as error:
        raise UsageError(f"{option} {path}: cannot read it ({error.strerror or error})") from None
    try:
        fields = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except (json.JSONDecodeError, tomllib.TOMLDecodeError) as error:
        kind = "JSON" if path.suffix == ".json" else "TOML (name it .json for JSON)"
        raise UsageError(f"{option} {path}: not {kind}: {error}") from None
    if not isinstance(fields, dict):
        raise UsageError(f"{option} {path}: expected a table of {holds}, found {type(fields).__name__}")
    return fields
