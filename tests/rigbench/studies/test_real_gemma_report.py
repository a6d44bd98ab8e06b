"""The real-Gemma study's tables, made again from its committed H200 folder: the decode-call budget
(the report's own code path) gives the numbers the study published."""

from __future__ import annotations

import json
from pathlib import Path

from analysis.report import write_report
from rigbench.studies.real_gemma_report import arm_runs, study_tables

STUDY = Path(__file__).resolve().parents[3] / "runs" / "real-gemma-h200-2026-12-02"
BUDGET = "### Where the time of one decode call goes (ms), and the reading"


def table_after(text: str, heading: str) -> str:
    """The Markdown table under ``heading``."""
    lines = text.split(heading, 1)[1].strip().splitlines()
    return "\n".join(line for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("|"))])


def test_the_budget_table_is_the_one_the_study_published() -> None:
    published = table_after((STUDY / "README.md").read_text(), BUDGET)
    made = table_after(study_tables(STUDY), BUDGET)
    assert made == published
    assert "|      64 | cpu-sampling |               0.07 |           5.4 |            81.8 |       56.1 |" in made




def test_an_arm_run_in_repeats_is_read_from_its_typical_repeat(kit, tmp_path: Path) -> None:
    speeds = {"r1": 40.0, "r2": 80.0, "r3": 50.0}  # mean 56.7: the third repeat is the typical one
    runs = {name: kit.steady_sweep(name, speed, users=(1, 2)) for name, speed in speeds.items()}
    alone = [kit.steady_sweep(name, 40.0, users=(1,)) for name in ("first", "again")]
    for run in [*runs.values(), *alone]:
        write_report([run])  # summary.json in the run's folder, as the local rig leaves it
    entries = [{"phase": "run", "label": "gpu-sampling", "status": "complete", "run": run.name, "repeat": index,
                "series": "s"} for index, run in enumerate(runs.values(), 1)]
    entries += [{"phase": "run", "label": "cpu-sampling", "status": "complete", "run": run.name} for run in alone]
    (tmp_path / "phases.jsonl").write_text("".join(json.dumps(entry) + "\n" for entry in entries))
    assert arm_runs(tmp_path) == {"gpu-sampling": runs["r3"], "cpu-sampling": alone[1]}  # alone: the last, as before
