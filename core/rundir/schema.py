"""The JSON Schema of every run-directory file, generated from the models.

The committed copy (``run-v1.schema.json`` beside this module) is what other tools validate
against; ``rigbench schema --write`` regenerates it and a test keeps the two equal.
"""

from __future__ import annotations

import json
from pathlib import Path

from core.rundir.capacity_search import CapacitySearch
from core.rundir.hardware import CpuEnergySample, GpuSample
from core.rundir.models import SCHEMA_VERSION, RequestRecord, RunManifest, TelemetrySnapshot, TokenCount

SCHEMA_FILE = Path(__file__).resolve().parent / "run-v1.schema.json"


def run_json_schema() -> dict:
    """The JSON Schema of every run-directory file, keyed by file kind."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "rigbench run directory",
        "schema_version": SCHEMA_VERSION,
        "files": {
            "manifest.json": RunManifest.model_json_schema(),
            "records/<shard>.jsonl (one per line)": RequestRecord.model_json_schema(),
            "telemetry.jsonl (one per line)": TelemetrySnapshot.model_json_schema(),
            "token_counts.jsonl (one per line)": TokenCount.model_json_schema(),
            "hardware/gpu.jsonl (one per line)": GpuSample.model_json_schema(),
            "hardware/cpu_energy.jsonl (one per line)": CpuEnergySample.model_json_schema(),
            "capacity_search.json (a capacity search's folder, above its probes' runs)":
                CapacitySearch.model_json_schema(),
        },
    }


def schema_text() -> str:
    return json.dumps(run_json_schema(), indent=2, sort_keys=True) + "\n"
