"""GPU samples from ``nvidia-smi --query-gpu … -lms N`` where the NVML binding cannot load.

nvidia-smi samples on its own clock and prints one CSV line per GPU per interval; a reader thread
turns each into a :class:`GpuSample`. Its power is ``power.draw.instant`` where the driver has it
(``power.draw`` is a one-second average on recent cards, too slow for 100 ms samples), and it has
no energy counter: analysis integrates power instead. A field this driver does not know is dropped
and named once; a value the card does not give (``[N/A]``, ``[Not Supported]``) is None; lines that
say a GPU is lost, or nvidia-smi ending early, are named once and sampling goes on without them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

from core.errors import RigbenchError
from core.rundir.hardware import GpuDevice, GpuSample

# nvidia-smi's field, and where it goes in a sample (scaled as nounits prints it)
FIELDS = {
    "timestamp": None,
    "index": "gpu",
    "power.draw.instant": "power_w",
    "utilization.gpu": "sm_util_pct",
    "utilization.memory": "memory_util_pct",
    "memory.used": "memory_used_mib",
    "clocks.sm": "sm_clock_mhz",
    "temperature.gpu": "temperature_c",
    "clocks_event_reasons.active": "throttle_reasons",
}
FALLBACK = {"power.draw.instant": "power.draw", "clocks_event_reasons.active": "clocks_throttle_reasons.active"}
NOT_GIVEN = {"[N/A]", "[Not Supported]", "N/A", "[Unknown Error]", ""}
LOST = ("Unable to determine the device handle", "GPU is lost", "No devices were found")


class SmiUnavailable(RigbenchError):
    pass


def smi_executable() -> str:
    found = shutil.which("nvidia-smi")
    if found is None:
        raise SmiUnavailable("no nvidia-smi on PATH")
    return found


def parse_timestamp(text: str) -> float:
    """``2026/12/03 09:52:05.837`` (local time, as nvidia-smi prints it) -> unix seconds."""
    whole, _, fraction = text.strip().partition(".")
    return time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S")) + (float(f"0.{fraction}") if fraction else 0.0)


def _value(text: str, field: str) -> float | int | None:
    text = text.strip()
    if text in NOT_GIVEN:
        return None
    if field == "throttle_reasons":
        return int(text, 16)
    return float(text.split()[0])


class SmiSource:
    name = "nvidia-smi"

    def __init__(self, interval_s: float) -> None:
        self.executable = smi_executable()
        self.interval_ms = max(1, round(interval_s * 1000))
        self.fields = dict(FIELDS)
        self.missing: list[str] = []
        self.devices: list[GpuDevice] = []
        self._samples: list[GpuSample] = []
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None
        self._said: set[str] = set()
        self._cpu_seconds = 0.0

    def _query(self, fields: list[str], extra: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run([self.executable, f"--query-gpu={','.join(fields)}",
                                   "--format=csv,noheader,nounits", *extra], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired) as error:  # a driver that hangs, a binary that cannot run
            raise SmiUnavailable(f"nvidia-smi did not answer ({error})") from None

    def open(self) -> list[GpuDevice]:
        """One query first: it names the GPUs and finds the fields this driver does not know."""
        for _ in range(len(FIELDS)):
            probe = self._query([*self.fields, "name"], [])
            invalid = next((line for line in (probe.stdout + probe.stderr).splitlines()
                            if "is not a valid field" in line), None)
            if invalid is None:
                break
            name = invalid.split('"')[1] if '"' in invalid else ""
            if name not in self.fields:
                raise SmiUnavailable(f"nvidia-smi: {invalid.strip()}")
            target = self.fields.pop(name)
            if name in FALLBACK:
                self.fields[FALLBACK[name]] = target
            else:
                self.missing.append(f"{target}: nvidia-smi here has no field {name}")
        if probe.returncode != 0:
            raise SmiUnavailable(f"nvidia-smi exited {probe.returncode}: {(probe.stdout + probe.stderr).strip()[:200]}")
        for line in probe.stdout.splitlines():
            cells = [cell.strip() for cell in line.split(",")]
            if len(cells) == len(self.fields) + 1 and cells[1].isdigit():
                self.devices.append(GpuDevice(index=int(cells[1]), name=cells[-1], energy_counter=False))
        if not self.devices:
            raise SmiUnavailable(f"nvidia-smi lists no GPU: {probe.stdout.strip()[:200] or probe.stderr.strip()[:200]}")
        self.missing.append("energy_j: nvidia-smi has no energy counter; energy is power integrated over samples")
        self._process = subprocess.Popen(
            [self.executable, f"--query-gpu={','.join(self.fields)}", "--format=csv,noheader,nounits",
             "-lms", str(self.interval_ms)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, name="nvidia-smi-reader", daemon=True)
        self._reader.start()
        return self.devices

    def _note(self, text: str) -> None:
        if text not in self._said:
            self._said.add(text)
            self.missing.append(text)

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        targets = list(self.fields.values())
        for line in self._process.stdout:
            if any(marker in line for marker in LOST):
                self._note(f"nvidia-smi: {line.strip()} (at {time.time():.1f}); that GPU's samples stop there")
                continue
            cells = line.rstrip("\n").split(",")
            if len(cells) != len(targets):
                continue
            try:
                fields = {target: _value(cell, target) for target, cell in zip(targets[1:], cells[1:], strict=True)}
                sample = GpuSample(t=parse_timestamp(cells[0]), **fields)
            except ValueError:
                self._note(f"nvidia-smi printed a line that is not a sample: {line.strip()[:120]}")
                continue
            with self._lock:
                self._samples.append(sample)
        code = self._process.wait()
        if code not in (0, -15) and not self._stopping:
            self._note(f"nvidia-smi ended early (exit {code}) at {time.time():.1f}; no GPU samples after")

    _stopping = False

    def sample(self) -> list[GpuSample]:
        with self._lock:
            taken, self._samples = self._samples, []
        return taken

    def close(self) -> None:
        process = self._process
        if process is None:
            return
        self._stopping = True
        self._cpu_seconds = _process_cpu_seconds(process.pid)
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)

    def own_cpu_seconds(self) -> float:
        """The nvidia-smi process's own CPU time (read before it was stopped)."""
        return self._cpu_seconds


def _process_cpu_seconds(pid: int) -> float:
    """user + system time of a child still running, from /proc (0 where there is none)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
