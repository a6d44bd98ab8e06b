"""One rig of a cloud loop, from nothing to destroyed: attempts, set-up, provision, studies, fetch.

Runs in its own thread; every phase is a child process (``rigbench.cloud.phase_runner``) and
every change goes into the loop's record at once. Whatever ends the rig's work — success, a
failed phase, the loop being cancelled — the ``finally`` destroys what the stack holds,
unless ``--keep`` asked to leave it up. A failed ``pulumi up`` is destroyed too before the
next attempt: it may have created the key pair and security group without the instance.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

from core.errors import CloudError, RigbenchError
from core.load_file import load_fields_text
from core.pulumi_cli import QUIET_FLAGS, pulumi_executable, pulumi_json
from core.whole_files import write_whole
from core.wording import counted
from infra.spot_placement import failure_scope, retryable_failure
from provision.connection import known_hosts_path
from rigbench.cloud.attempts import PlannedAttempt, config_changes
from rigbench.cloud.phase_runner import PhaseOutcome, run_phase
from rigbench.cloud.quality_studies import eval_name, ladder_name, write_settings_file
from rigbench.cloud.record import RIG_PHASES, AttemptRecord, CloudRunFolder, PhaseRecord, RigRecord
from rigbench.cloud.settings import CloudSettings
from rigbench.cloud.stacks import StackSettings, write_attempt_config
from rigbench.own_command import rigbench_program

UP_TIMEOUT_S = 1800
DESTROY_TIMEOUT_S = 1800
DESTROY_TRIES = 3
PHASE_TIMEOUT_S = {"setup": 1200, "toolkit": 1800, "build": 3600, "download": 7200, "serve": 900, "project": 1800,
                   "bench": 3600, "sweep": 6 * 3600, "ladder": 12 * 3600, "eval": 6 * 3600, "fetch": 1800}
RUN_STUDIES = ("sweep", "ladder", "eval", "fetch")  # phases whose result lists run folders copied home


class RigFailed(CloudError):
    pass


class Cancelled(CloudError):
    pass


def describe(name: str, result: object) -> str | None:
    """One line of what a phase found, from the step's result (where the build came from, runs copied)."""
    if name == "build" and isinstance(result, dict):
        if result.get("restored_from"):
            return f"restored from {result['restored_from']}"
        if result.get("cached"):
            return "cached on the rig"
        uploaded = f", uploaded to {result['uploaded_to']}" if result.get("uploaded_to") else ""
        return f"built in {result.get('build_seconds')} s{uploaded}"
    if name in RUN_STUDIES and isinstance(result, list):
        return counted(len(result), "run")
    if name == "bench" and isinstance(result, dict):
        return ", ".join(f"{key} {value}" for key, value in list(result.items())[:4])
    return None


class RigDriver:
    def __init__(self, stack: StackSettings, attempts: list[PlannedAttempt], settings: CloudSettings,
                 folder: CloudRunFolder, save: Callable[[], None], record: RigRecord, cancel: threading.Event,
                 event: Callable[..., None], resume: bool = False) -> None:
        self.stack = stack
        self.attempts = attempts
        self.settings = settings
        self.folder = folder
        self.save = save
        self.rec = record
        self.cancel = cancel
        self.event = event
        self.resume = resume
        self.rig_folder = folder.rig_folder(stack.stack)
        self.log = self.rig_folder / "log.txt"
        self.runs_dir = self.rig_folder / "runs"
        self.project = Path(settings.project_dir).resolve()
        self.config_file: Path | None = self.last_config_file()

    # ---------------------------------------------------------------- the rig's life

    def run(self) -> None:
        rec = self.rec
        try:
            studies = [name for name in self.settings.studies if not self.done(name)]
            if not studies and self.done("fetch"):
                rec.status = "finished"
                self.event(rec.stack, "nothing left to do (resumed)")
                return
            rec.status, rec.error = "running", None
            self.save()
            if not (self.resume and self.still_up()):
                self.forget_rig_phases()
                self.launch()
            for name in RIG_PHASES[1:]:
                if name == "project" and self.settings.rig_rigbench:
                    continue
                self.phase(name)
            for name in studies:
                self.phase(name)
            self.phase("fetch")
            rec.status = "finished"
        except Cancelled:
            rec.status, rec.error = "cancelled", "stopped by a signal"
        except RigbenchError as error:
            rec.status, rec.error = "failed", str(error)
            self.event(rec.stack, f"failed: {str(error).splitlines()[0]}")
        except Exception as error:  # noqa: BLE001 - the rig must still be destroyed
            rec.status, rec.error = "failed", f"{type(error).__name__}: {error}"
            self.event(rec.stack, f"failed: {rec.error}")
        finally:
            self.save()
            self.salvage()
            self.end()

    def salvage(self) -> None:
        """After a study failed or was stopped, copy home what the rig has before it is destroyed."""
        started = any(name in self.rec.phases for name in self.settings.studies)
        if self.rec.status == "finished" or not self.rec.up or not started or self.done("fetch"):
            return
        try:
            self.phase("fetch", cancel=False)
        except RigbenchError as error:
            self.event(self.rec.stack, f"fetch before destroy failed: {str(error).splitlines()[0]}")

    def end(self) -> None:
        if not self.rec.up:
            return
        if self.settings.keep:
            self.rec.kept = True
            self.save()
            expires = "" if self.rec.launched_at is None or self.rec.ttl_hours is None else time.strftime(
                " (TTL %H:%M UTC)", time.gmtime(self.rec.launched_at + self.rec.ttl_hours * 3600))
            self.event(self.rec.stack, f"LEFT RUNNING {self.rec.instance_id} {self.rec.instance_type} at "
                       f"${self.rec.usd_per_hour or 0:.3f}/h{expires}: `pulumi destroy --stack {self.rec.stack}`",
                       alarm=True)
            return
        self.destroy()

    # ---------------------------------------------------------------- attempts

    def launch(self) -> None:
        skipped: set[tuple[str, str]] = set()
        tried = []
        for planned in self.attempts:
            if planned.scope in skipped:
                continue
            if self.cancel.is_set():
                raise Cancelled("cancelled before launch")
            outcome, attempt = self.attempt(planned)
            tried.append(f"{planned.instance_type} {planned.market} {planned.zone or 'stack az'}: "
                         f"{attempt.failure_code or ('ok' if outcome.ok else 'failed')}")
            if outcome.ok:
                self.took_off(attempt)
                return
            attempt.destroyed = self.destroy()
            self.save()
            if outcome.cancelled:
                raise Cancelled("cancelled during pulumi up")
            if attempt.failure_code is None:
                raise RigFailed(f"pulumi up failed ({planned.instance_type} {planned.market} "
                                f"{planned.zone or ''}); last lines:\n{outcome.tail}")
            if failure_scope(attempt.failure_code) == "type":
                skipped.add(planned.scope)
        raise RigFailed("no attempt started a rig: " + "; ".join(tried))

    def attempt(self, planned: PlannedAttempt) -> tuple[PhaseOutcome, AttemptRecord]:
        number = len(self.rec.attempts) + 1
        changes = config_changes(self.stack.instance_type, self.stack.market, planned)
        config = write_attempt_config(self.stack, self.rig_folder / f"Pulumi.{self.stack.stack}.attempt{number}.yaml",
                                      changes)
        self.config_file = config
        attempt = AttemptRecord(number=number, instance_type=planned.instance_type, market=planned.market,
                                zone=planned.zone, placement_score=planned.placement_score,
                                spot_usd_per_hour=planned.spot_usd_per_hour,
                                config_file=self.folder.relative(config), started_at=time.time())
        self.rec.attempts.append(attempt)
        self.rec.up = True  # from here the stack may hold resources, until a destroy succeeds
        self.save()
        self.event(self.rec.stack, f"up #{number}: {planned.instance_type} {planned.market} "
                   f"{planned.zone or '(stack az)'}")
        outcome = self.pulumi(["up", "--yes", "--skip-preview", "--config-file", str(config)], self.cancel,
                              UP_TIMEOUT_S, signal.SIGINT, "up")
        attempt.seconds, attempt.ok = round(outcome.seconds, 1), outcome.ok
        if not outcome.ok:
            attempt.failure_code = retryable_failure(outcome.output)
            attempt.failure = outcome.tail
            self.event(self.rec.stack, f"up #{number} failed: {attempt.failure_code or outcome.tail.splitlines()[-1:]}")
        self.save()
        return outcome, attempt

    def took_off(self, attempt: AttemptRecord) -> None:
        outputs = self.outputs()
        instance_id = outputs.get("instanceId")
        if instance_id and instance_id != self.rec.instance_id:
            # A new instance has a new host key; the stack's pinned key was the last rig's.
            known_hosts_path(self.rec.stack).unlink(missing_ok=True)
        market = outputs.get("market") or attempt.market
        price = outputs.get("spotPriceAtLaunch") if market == "spot" else None
        self.rec.instance_id = instance_id
        self.rec.instance_type = outputs.get("instanceType") or attempt.instance_type
        self.rec.zone = outputs.get("availabilityZone") or attempt.zone
        self.rec.market = market
        self.rec.usd_per_hour = float(price if price is not None else outputs.get("onDemandUsdPerHour") or "nan")
        self.rec.ttl_hours = int(outputs.get("ttlHours") or self.stack.ttl_hours)
        self.rec.launched_at = time.time()
        self.rec.destroyed_at = None
        self.rec.phases["up"] = PhaseRecord(name="up", started_at=attempt.started_at, seconds=attempt.seconds, ok=True,
                                            detail=f"attempt {attempt.number}: {self.rec.instance_id} in "
                                                   f"{self.rec.zone}, {market} ${self.rec.usd_per_hour:.4f}/h")
        self.save()
        self.event(self.rec.stack, f"up: {self.rec.instance_id} {self.rec.instance_type} {self.rec.zone} {market}")

    def destroy(self) -> bool:
        """``pulumi destroy`` (tried again on failure); never cancelled: it is what a cancel leads to."""
        config = ["--config-file", str(self.config_file)] if self.config_file else []
        started = time.time()
        for attempt in range(1, DESTROY_TRIES + 1):
            self.event(self.rec.stack, "destroy" + (f" (try {attempt})" if attempt > 1 else ""))
            outcome = self.pulumi(["destroy", "--yes", "--skip-preview", *config], None, DESTROY_TIMEOUT_S,
                                  signal.SIGINT, "destroy")
            if outcome.ok:
                self.rec.up = False
                self.rec.destroyed_at = time.time()
                self.rec.phases["destroy"] = PhaseRecord(name="destroy", started_at=started, ok=True,
                                                         seconds=round(time.time() - started, 1))
                self.save()
                self.event(self.rec.stack, "destroyed")
                return True
        self.rec.phases["destroy"] = PhaseRecord(name="destroy", started_at=started, ok=False,
                                                 seconds=round(time.time() - started, 1), error=outcome.tail)
        note = f"pulumi destroy failed {DESTROY_TRIES} times; run `pulumi destroy --stack {self.rec.stack}`"
        self.rec.error = f"{self.rec.error}; {note}" if self.rec.error else note
        self.save()
        self.event(self.rec.stack, note, alarm=True)
        return False

    # ---------------------------------------------------------------- phases on the rig

    def phase(self, name: str, cancel: bool = True) -> None:
        """Run a provision step as a phase, unless an earlier loop finished it on this same rig (a
        study whose runs came home is not run again); fetch copies again whenever it is reached.
        ``cancel=False``: a phase the loop's stop does not interrupt (the fetch before destroy)."""
        if self.done(name) and name != "fetch":
            return
        if cancel and self.cancel.is_set():
            raise Cancelled(f"cancelled before {name}")
        record = self.rec.phases[name] = PhaseRecord(name=name, started_at=time.time())
        self.save()
        self.event(self.rec.stack, name)
        result_file = self.rig_folder / f"{name}.result.json"
        result_file.unlink(missing_ok=True)
        outcome = run_phase(self.provision_argv(name, self.provision_options(name), result_file), self.log,
                            self.cancel if cancel else None, PHASE_TIMEOUT_S.get(name, 3600), cwd=self.project,
                            title=name)
        record.seconds, record.ok = round(outcome.seconds, 1), outcome.ok
        result = json.loads(result_file.read_text()) if outcome.ok and result_file.is_file() else None
        if outcome.ok:
            if name in RUN_STUDIES and isinstance(result, list):
                runs = [self.folder.relative(path) for path in result]
                self.rec.runs = list(dict.fromkeys([*self.rec.runs, *runs]))
            record.detail = describe(name, result)
        else:
            record.error = outcome.tail
        self.save()
        if outcome.cancelled:
            raise Cancelled(f"cancelled during {name}")
        if not outcome.ok:
            reason = "ran past its time limit" if outcome.timed_out else f"exited {outcome.returncode}"
            raise RigFailed(f"{name} {reason}; last lines:\n{outcome.tail}")
        self.event(self.rec.stack, f"{name} ok {outcome.seconds:.0f} s" + (f" ({record.detail})" if record.detail
                                                                          else ""))

    def provision_options(self, name: str) -> list[str]:
        settings = self.settings
        rigbench = ["--rigbench", settings.rig_rigbench] if settings.rig_rigbench else []
        if name == "setup":
            return ["--timeout", str(settings.setup_timeout_s)]
        if name == "sweep":
            load = self.rig_folder / "load.json"  # written from the record: a resumed loop sends the same load
            write_whole(load, load_fields_text(settings.load))
            return ["--load", str(load), "--runs-dir", str(self.runs_dir), *rigbench]
        if name == "fetch":
            return ["--runs-dir", str(self.runs_dir)]
        if name == "ladder":
            return ["--questions", str(settings.questions), "--rungs", ",".join(settings.rungs), "--name",
                    ladder_name(settings), "--runs-dir", str(self.runs_dir), *rigbench,
                    "--settings", str(write_settings_file(self.rig_folder, "ladder", settings))]
        if name == "eval":
            return ["--questions", str(settings.questions), "--name", eval_name(settings), "--runs-dir",
                    str(self.runs_dir), *rigbench,
                    "--settings", str(write_settings_file(self.rig_folder, "eval", settings))]
        return []

    def provision_argv(self, step: str, options: list[str], result_file: Path) -> list[str]:
        key = ["--key", self.stack.private_key] if self.stack.private_key else []
        return [*rigbench_program(), "provision", "--stack", self.rec.stack, *key, "--profile",
                self.settings.profile, "--result", str(result_file), step, *options]

    # ---------------------------------------------------------------- pulumi

    def pulumi(self, arguments: list[str], cancel: threading.Event | None, timeout: float, stop_signal: int,
               title: str) -> PhaseOutcome:
        executable = pulumi_executable(CloudError)
        return run_phase([executable, *arguments, "--stack", self.rec.stack, *QUIET_FLAGS], self.log, cancel,
                         timeout, cwd=self.project, stop_signal=stop_signal, title=title)

    def outputs(self) -> dict:
        found = pulumi_json(["stack", "output", "--json", "--stack", self.rec.stack], CloudError, cwd=self.project)
        if not isinstance(found, dict):
            raise RigFailed(f"`pulumi stack output --json --stack {self.rec.stack}` did not print an object")
        return found

    # ---------------------------------------------------------------- resume

    def done(self, name: str) -> bool:
        phase = self.rec.phases.get(name)
        return bool(phase and phase.ok)

    def still_up(self) -> bool:
        """Whether the rig an earlier loop made is still the stack's instance (a kept rig)."""
        if not self.rec.up or not self.rec.instance_id:
            return False
        try:
            return self.outputs().get("instanceId") == self.rec.instance_id
        except CloudError:
            return False

    def forget_rig_phases(self) -> None:
        """A new instance has none of the last one's set-up; its studies' runs are home already."""
        for name in (*RIG_PHASES, "fetch", "destroy"):
            self.rec.phases.pop(name, None)

    def last_config_file(self) -> Path | None:
        if not self.rec.attempts:
            return None
        path = self.folder.root / self.rec.attempts[-1].config_file
        return path if path.is_file() else None
