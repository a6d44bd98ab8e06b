"""Progress of every rig on one screen: a live table on a terminal, one line per event elsewhere.

The rigs' threads only report events; this module draws. On a terminal the table (stack,
type, zone, market, phase, time, cost so far) is redrawn twice a second; in a log or a CI
job each event is one line ``[stack] what happened``, so the output reads like a log.
"""

from __future__ import annotations

import threading
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from rigbench.cloud.record import CloudRunRecord

REFRESH_S = 0.5
ALARM = "bold red"
NOTE = "bold yellow"


class Screen:
    def __init__(self, console: Console, record: CloudRunRecord) -> None:
        self.console = console
        self.record = record
        self.live = console.is_terminal
        self.latest: dict[str, str] = {}
        self.notes: list[str] = []
        self._lock = threading.Lock()

    def event(self, stack: str, text: str, alarm: bool = False) -> None:
        """What a rig just did; ``alarm`` draws it in red (a rig left up, a destroy that failed).
        Texts are plain: a bracket in a log line is never read as markup."""
        with self._lock:
            self.latest[stack] = text
            if not self.live:
                self.console.print(Text(f"[{stack}] ") + Text(text, style=ALARM if alarm else ""), soft_wrap=True)

    def note(self, text: str) -> None:
        with self._lock:
            self.notes.append(text)
            if not self.live:
                self.console.print(Text(text, style=NOTE), soft_wrap=True)

    def follow(self, threads: list[threading.Thread]) -> None:
        """Wait for the rigs' threads, drawing the table meanwhile (signals still reach this thread)."""
        if not self.live:
            for thread in threads:
                while thread.is_alive():
                    thread.join(REFRESH_S)
            return
        with Live(self.table(), console=self.console, refresh_per_second=4, transient=False) as live:
            while any(thread.is_alive() for thread in threads):
                time.sleep(REFRESH_S)
                live.update(self.table())
            live.update(self.table())

    def table(self) -> Table:
        table = Table(title=f"rigbench cloud run {self.record.id}", expand=False)
        for column in ("stack", "type", "zone", "market", "status", "now", "hours", "cost"):
            table.add_column(column, justify="right" if column in ("hours", "cost") else "left")
        with self._lock:
            latest = dict(self.latest)
            notes = list(self.notes)
        for name, rig in self.record.rigs.items():
            hours, cost = rig.hours, rig.cost_usd
            table.add_row(name, rig.instance_type or "-", rig.zone or "-", rig.market or "-", rig.status,
                          Text(latest.get(name, "")), "-" if hours is None else f"{hours:.2f}",
                          "-" if cost is None else f"${cost:.2f}")
        if notes:
            table.caption = Text(notes[-1], style=NOTE)
        return table
