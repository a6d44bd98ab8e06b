"""``rigbench cloud run``: every stack's rig in parallel, then one cross-run report and plan.

Before anything is created the loop checks the stacks, plans each rig's attempts (zones by
spot placement score, fallbacks), estimates hours and dollars, and asks (``--yes`` skips,
``--max-usd`` refuses above a limit). Then one thread per rig (``RigDriver``) and, on this
thread, the screen and the signals: the first Ctrl-C or SIGTERM stops every rig's current
phase and lets each destroy its stack; the loop ends only when every destroy has returned.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.text import Text

from core.errors import CloudError
from core.wording import counted
from rigbench.cloud.attempts import PlannedAttempt, Ranking, plan_attempts
from rigbench.cloud.estimate import BENCH_SECONDS, estimate_rig, sweep_seconds
from rigbench.cloud.quality_studies import eval_seconds, ladder_seconds
from rigbench.cloud.record import CloudRunFolder, CloudRunRecord, RigEstimate, RigRecord
from rigbench.cloud.results import final_table, write_quality_report, write_report_and_plan
from rigbench.cloud.rig_driver import RigDriver
from rigbench.cloud.screen import ALARM, Screen
from rigbench.cloud.settings import CloudSettings
from rigbench.cloud.stacks import StackSettings

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass
class LoopPlan:
    """Everything decided before money is spent."""

    stacks: dict[str, StackSettings]
    attempts: dict[str, list[PlannedAttempt]]
    estimate: list[RigEstimate]

    @property
    def usd(self) -> float:
        return sum(rig.usd for rig in self.estimate)


def plan_loop(settings: CloudSettings, stacks: dict[str, StackSettings], ranking_for: Callable[[str | None], Ranking],
              model_bytes: int | None) -> LoopPlan:
    attempts: dict[str, list[PlannedAttempt]] = {}
    estimate = []
    skip = {"project"} if settings.rig_rigbench else set()
    for name, stack in stacks.items():
        planned = plan_attempts(stack.instance_type, stack.market, stack.az, settings.fallback_types,
                                settings.fallback_market, ranking_for(stack.region))
        if not planned:
            raise CloudError(f"--stack {name}: no zone offers {stack.instance_type} in {stack.region} for spot; "
                             "give --fallback-type or --fallback-market on-demand, or another region")
        attempts[name] = planned
        studies = study_seconds(settings, planned[0].instance_type, model_bytes)
        estimate.append(estimate_rig(name, planned[0], studies, model_bytes, skip))
    return LoopPlan(stacks, attempts, estimate)


def study_seconds(settings: CloudSettings, instance_type: str, model_bytes: int | None) -> dict[str, float]:
    """Each study's expected seconds on the type: the ladder and eval from their questions, rungs and the
    type's expected decode rate (``rigbench.cloud.quality_studies``)."""
    seconds = {}
    for study in settings.studies:
        if study == "sweep":
            load = settings.sweep_load
            seconds["sweep"] = sweep_seconds(load.user_steps, load.warmup_seconds, load.measure_seconds)
        elif study == "bench":
            seconds["bench"] = BENCH_SECONDS
        elif study == "ladder":
            seconds["ladder"] = ladder_seconds(settings, instance_type, model_bytes)
        elif study == "eval":
            seconds["eval"] = eval_seconds(settings, instance_type, model_bytes)
    return seconds


def check_budget(plan: LoopPlan, max_usd: float | None) -> None:
    if any(math.isnan(rig.usd) for rig in plan.estimate):
        unknown = [rig.stack for rig in plan.estimate if math.isnan(rig.usd)]
        if max_usd is not None:
            raise CloudError(f"--max-usd: no price is known for {', '.join(unknown)}, so the cost cannot be held "
                             "under the limit; run without --max-usd, or use a type with a known price")
    elif max_usd is not None and plan.usd > max_usd:
        raise CloudError(f"--max-usd: the estimate is ${plan.usd:.2f} ({counted(len(plan.estimate), 'rig')}), above "
                         f"the "
                         f"limit ${max_usd:.2f}; nothing was created. Raise --max-usd, or run fewer stacks or studies")


class CloudLoop:
    def __init__(self, settings: CloudSettings, plan: LoopPlan, folder: CloudRunFolder, record: CloudRunRecord,
                 console: Console, resume: bool = False) -> None:
        self.settings = settings
        self.plan = plan
        self.folder = folder
        self.record = record
        self.console = console
        self.resume = resume
        self.cancel = threading.Event()
        self.signals = 0
        self.screen = Screen(console, record)

    def save(self) -> None:
        self.folder.save(self.record)

    def run(self) -> int:
        """Run every rig to its end; 0 when every rig finished, 1 otherwise."""
        self.save()
        previous = {number: signal.signal(number, self.on_signal) for number in STOP_SIGNALS}
        try:
            threads = [threading.Thread(target=self.driver(name).run, name=f"rig-{name}")
                       for name in self.settings.stacks]
            for thread in threads:
                thread.start()
            self.screen.follow(threads)
        finally:
            for number, handler in previous.items():
                signal.signal(number, handler)
        self.record.finished_at = time.time()
        self.save()
        self.console.print(Text(final_table(self.record)))
        if not self.cancel.is_set():
            write_report_and_plan(self.settings, self.folder, self.record, self.console)
            write_quality_report(self.settings, self.folder, self.record, self.console)
            self.save()
        left = [rig.stack for rig in self.record.rigs.values() if rig.up]
        for stack in left:
            rig = self.record.rigs[stack]
            why = "kept" if rig.kept else "destroy failed"
            self.console.print(Text(f"{stack} is still up ({rig.instance_id}, {why}): `pulumi destroy --stack "
                                    f"{stack}`", style=ALARM))
        self.console.print(Text(f"record: {self.folder.record_path}"))
        finished = all(rig.status == "finished" for rig in self.record.rigs.values())
        return 0 if finished and not self.cancel.is_set() else 1

    def driver(self, name: str) -> RigDriver:
        rig = self.record.rigs.setdefault(name, RigRecord(stack=name))
        return RigDriver(self.plan.stacks[name], self.plan.attempts[name], self.settings, self.folder, self.save, rig,
                         self.cancel, self.screen.event, resume=self.resume)

    def on_signal(self, number: int, _frame: object) -> None:
        self.signals += 1
        self.cancel.set()
        what = signal.Signals(number).name
        if self.signals == 1:
            self.screen.note(f"{what}: stopping every rig's phase; each stack is destroyed before the loop ends")
        else:
            self.screen.note(f"{what} again: still destroying; the loop ends when every `pulumi destroy` has "
                             "returned (a kill now leaves rigs up: then run `pulumi destroy`)")


def new_record(settings: CloudSettings, loop_id: str, estimate: list[RigEstimate]) -> CloudRunRecord:
    return CloudRunRecord(id=loop_id, created_at=time.time(), settings=settings.model_dump(), estimate=estimate,
                          rigs={name: RigRecord(stack=name) for name in settings.stacks})


def loop_folder(runs_dir: Path, loop_id: str) -> CloudRunFolder:
    return CloudRunFolder(Path(runs_dir) / f"cloud-{loop_id}")
