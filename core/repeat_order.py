"""The order a comparison's runs are made in: every arm once, then every arm again (A B A B, not A A B B).

Why interleaved: a machine drifts (it warms, clocks move, other work comes and goes), and runs of one arm
made back to back would carry that drift into the difference between arms. Interleaved, each round holds
one run of every arm close together in time, so drift moves the arms alike, and the pairs of a round can be
compared with each other (``analysis.repeats``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from core.rundir.manifest import new_run_id
from core.rundir.models import RepeatInfo

Arm = TypeVar("Arm")


@dataclass(frozen=True)
class Planned(Generic[Arm]):
    """One run of the series: which arm, which repeat, and the record the run keeps of it."""

    arm: Arm
    repeat: RepeatInfo


def interleaved(arms: Sequence[Arm], labels: Sequence[str], repeats: int, series: str) -> list[Planned[Arm]]:
    """Every run of ``repeats`` rounds over ``arms`` (labelled ``labels``), in the order to make them."""
    if len(arms) != len(labels):
        raise ValueError(f"{len(arms)} arms and {len(labels)} labels")
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, not {repeats}")
    planned = []
    for index in range(1, repeats + 1):
        for arm, label in zip(arms, labels, strict=True):
            planned.append(Planned(arm, RepeatInfo(series=series, arm=label, index=index, of=repeats,
                                                   order=len(planned))))
    return planned


def new_series_id(label: str) -> str:
    """A series' id: as a run's (sorts by time, says what ran), marked as a series."""
    return new_run_id(f"{label}-series")
