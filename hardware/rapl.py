"""CPU energy from the kernel's RAPL counters (``/sys/class/powercap/intel-rapl:*``), for CPU rigs.

Each domain (a package, its DRAM) has a cumulative counter in microjoules that wraps at
``max_energy_range_uj``; samples carry it unwrapped, in joules. Since 2020 the counters are readable
by root only on most kernels: a counter that cannot be read is named once, not a failure.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from core.rundir.hardware import CpuEnergySample

POWERCAP = Path("/sys/class/powercap")


@dataclass
class Domain:
    name: str
    counter: Path
    wrap_uj: int
    last_uj: int | None = None
    total_uj: int = 0


class RaplSource:
    name = "rapl"

    def __init__(self, root: Path = POWERCAP) -> None:
        self.root = root
        self.domains: list[Domain] = []
        self.missing: list[str] = []

    def open(self) -> bool:
        """Whether any domain can be read; what cannot is named in ``missing``."""
        if not self.root.is_dir():
            self.missing.append(f"CPU energy: no RAPL counters here ({self.root} is absent)")
            return False
        for folder in sorted(self.root.glob("intel-rapl:*")):
            counter = folder / "energy_uj"
            try:
                name = (folder / "name").read_text().strip()
                wrap = int((folder / "max_energy_range_uj").read_text())
                counter.read_text()
            except OSError as error:
                self.missing.append(f"CPU energy: {folder.name} cannot be read ({error.strerror}; root only on "
                                    "most kernels)")
                continue
            parent = folder.name.rsplit(":", 1)[0]  # intel-rapl:0:1 -> intel-rapl:0; intel-rapl:0 -> intel-rapl
            if parent != "intel-rapl":  # a subdomain (dram, core) is named under its package
                try:
                    name = f"{(self.root / parent / 'name').read_text().strip()}/{name}"
                except OSError:
                    name = f"{parent.removeprefix('intel-rapl:')}/{name}"
            self.domains.append(Domain(name, counter, wrap))
        if not self.domains and not self.missing:
            self.missing.append(f"CPU energy: no RAPL domain under {self.root}")
        return bool(self.domains)

    def sample(self) -> list[CpuEnergySample]:
        samples = []
        now = time.time()
        for domain in self.domains:
            try:
                value = int(domain.counter.read_text())
            except (OSError, ValueError):
                continue
            if domain.last_uj is not None:
                step = value - domain.last_uj
                domain.total_uj += step if step >= 0 else step + domain.wrap_uj  # the counter wrapped
            domain.last_uj = value
            samples.append(CpuEnergySample(t=now, domain=domain.name, energy_j=domain.total_uj / 1e6))
        return samples
