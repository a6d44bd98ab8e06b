"""Committed runs re-render to the reports committed beside them.

``rigbench report RUN`` re-renders everything from the saved files, so a change to the code
that moves a figure of a committed run shows here. The runs cover each kind committed in the
repository: one user, a drafter, 1 and 64 users, a run with a failed request, a 120,000-token
context, nine steps from one load process with pinned slots, a patched build's run from four
processes, one server past its slots and replicas under MPS with GPU samples (each report says what
limits the card), and a cross-run report of five runs with its comparisons (no committed run is
open-loop).
report.md must be the same byte for byte; summary.json the same but for when and where it was
written (``generated_at``, the run's path) and the last digits of floats, which differ between
machines' maths libraries.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from analysis.report import write_report
from rigbench.decode_bytes import decode_bytes_for_runs

RUNS = Path(__file__).resolve().parents[2] / "runs"
COMMITTED = [
    "gpu-h200-study-2026-11-30/runs/20261130T063437Z-gemma4-e2b-e2b-ctx0-c584",  # one user, no drafter
    "gpu-h200-study-2026-11-30/runs/20261130T062952Z-gemma4-e2b-e2b-drafter2-random-181f",  # 1 and 64 users, drafter
    "gpu-h200-profiles-2026-11-30/runs/20261130T084313Z-gemma4-e2b-many-e2b-drafter2-random-75e1",
    "gpu-h200-e2b-autotune/20261130T041650Z-gemma4-e2b-p64-bs-4a4c",  # a request failed at 64 users
    "gpu-h200-study-2026-11-30/runs/20261130T063558Z-gemma4-e2b-e2b-ctx120000-d9bb",  # long context
    "gpu-h200-slots-2026-12-01/runs/20261201T193445Z-gemma4-e2b-many-e2b-per-slot-kv-pinned-7ee4",  # one process
    "gpu-h200-slots-2026-12-01/runs/20261201T193954Z-gemma4-e2b-many-patched-e2b-unified-kv-patched-0e8f",
    # one server of 64 slots at up to 128 users, limited by its own loop (What limits the card), and 8 replicas
    # under MPS with their GPU samples
    "mps-h200-2026-12-04/autotune/20261204T145026Z-gemma3-270m-many-profile-cede",
    "mps-h200-2026-12-04/autotune/20261204T145723Z-gemma3-270m-many-profile-8-replicas-mps-2712",
]
CROSS = RUNS / "gpu-h200-slots-2026-12-01"  # report/ is `rigbench report runs/* --out report`
WHERE_AND_WHEN = {"generated_at", "path", "plots"}


def same(committed: object, rendered: object, where: str = "") -> list[str]:
    """Where two summaries differ, ignoring WHERE_AND_WHEN and float rounding."""
    if isinstance(committed, dict) and isinstance(rendered, dict):
        keys = (set(committed) | set(rendered)) - WHERE_AND_WHEN
        return [d for key in sorted(keys) for d in same(committed.get(key), rendered.get(key), f"{where}.{key}")]
    if isinstance(committed, list) and isinstance(rendered, list):
        if len(committed) != len(rendered):
            return [f"{where}: {len(committed)} items, rendered {len(rendered)}"]
        pairs = enumerate(zip(committed, rendered, strict=True))
        return [d for i, (a, b) in pairs for d in same(a, b, f"{where}[{i}]")]
    if isinstance(committed, float) and isinstance(rendered, float):
        close = math.isclose(committed, rendered, rel_tol=1e-9, abs_tol=1e-12)
        return [] if close else [f"{where}: {committed} != {rendered}"]
    return [] if committed == rendered else [f"{where}: {committed!r} != {rendered!r}"]


@pytest.mark.parametrize("name", COMMITTED, ids=lambda name: name.rsplit("-", 1)[-1])
def test_a_committed_run_renders_its_committed_report(name: str, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))  # the bundled prices only
    source = RUNS / name
    # the run in a study folder like its own, with the study's batched ceilings beside it (the report reads them)
    copy = shutil.copytree(source, tmp_path / "study" / "runs" / source.name, ignore=shutil.ignore_patterns("plots"))
    for ceiling in source.parents[1].glob("batched-bench-*.json"):
        shutil.copy(ceiling, tmp_path / "study" / ceiling.name)
    report = write_report([copy], decode_bytes=decode_bytes_for_runs([copy], []))  # as `rigbench report` does
    assert report.read_text() == (source / "report.md").read_text()
    committed = json.loads((source / "summary.json").read_text())
    assert same(committed, json.loads((copy / "summary.json").read_text())) == []


def test_a_committed_cross_run_report_renders_again(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RIGBENCH_PRICE_CACHE", str(tmp_path / "no-price-cache.json"))
    runs = [
        shutil.copytree(source, tmp_path / "runs" / source.name, ignore=shutil.ignore_patterns("plots"))
        for source in sorted((CROSS / "runs").iterdir())
    ]
    for ceiling in CROSS.glob("batched-bench-*.json"):  # the study's batched ceilings, which the report reads
        shutil.copy(ceiling, tmp_path / ceiling.name)
    report = write_report(runs, tmp_path / "report", decode_bytes=decode_bytes_for_runs(runs, []))
    assert report.read_text() == (CROSS / "report" / "report.md").read_text()
    committed = json.loads((CROSS / "report" / "summary.json").read_text())
    assert len(committed["comparisons"]) == 4
    assert same(committed, json.loads((tmp_path / "report" / "summary.json").read_text())) == []


def test_the_comparison_sees_a_changed_figure() -> None:
    committed = {"runs": [{"steps": [{"value": 1.0, "path": "/a"}]}], "generated_at": "x"}
    assert same(committed, {"runs": [{"steps": [{"value": 1.0 + 1e-15, "path": "/b"}]}], "generated_at": "y"}) == []
    assert same(committed, {"runs": [{"steps": [{"value": 1.01, "path": "/a"}]}]}) == [
        ".runs[0].steps[0].value: 1.0 != 1.01"]
