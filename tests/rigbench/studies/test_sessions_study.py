"""The sessions study's plumbing: its sweeps' repeats, and which run of a load its README reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from analysis.report import write_report
from core.rundir.models import RepeatInfo
from rigbench.studies.sessions_study import SessionsStudy, _run_folder


def test_the_sweeps_take_repeats_only_when_asked_for(tmp_path: Path) -> None:
    assert SessionsStudy(out=tmp_path).repeated() == []
    assert SessionsStudy(out=tmp_path, repeats=3).repeated() == ["--repeats", "3"]


def test_a_loads_repeats_are_read_from_the_typical_one_and_runs_made_alone_from_the_first(kit, tmp_path) -> None:
    speeds = [40.0, 80.0, 50.0]  # mean 56.7: the third is the typical one
    repeated = tmp_path / "repeated"
    repeated.mkdir()
    runs = []
    for index, speed in enumerate(speeds, 1):
        run = kit.steady_sweep(f"r{index}", speed, users=(1,),
                    repeat=RepeatInfo(series="s", arm="default", index=index, of=3, order=index - 1))
        write_report([run])
        runs.append(Path(shutil.move(run, repeated / run.name)))
    assert _run_folder(repeated) == runs[2]
    alone = [kit.steady_sweep(name, 40.0, users=(1,)) for name in ("first", "second")]
    assert _run_folder(kit.root) == min(alone)
