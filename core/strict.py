"""The one strict pydantic base: a model that refuses keys it does not declare.

Every file format, profile and record the project reads subclasses ``Strict``, so a misspelt or
stale key is an error naming it, never a value silently dropped. A model that needs more settings
adds them (``model_config = ConfigDict(frozen=True)``); pydantic merges them with this one.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")
