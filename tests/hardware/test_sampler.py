"""The hardware sampler against a stand-in nvidia-smi on PATH (fields and units as an H200's driver prints
them), the real NVML binding's own failure here (no driver), a stand-in of the binding for what only a card
can do (the energy counter, a field not supported, a GPU lost), and a stand-in powercap tree for RAPL."""

from __future__ import annotations

import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from core.rundir.hardware import read_cpu_energy_samples, read_gpu_samples
from hardware.nvml_source import NvmlSource
from hardware.rapl import RaplSource
from hardware.sampler import HardwareSampler
from hardware.smi_source import parse_timestamp

STANDIN = Path(__file__).resolve().parent / "standin_nvidia_smi.py"


@pytest.fixture()
def smi_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "bin"
    folder.mkdir()
    (folder / "nvidia-smi").symlink_to(STANDIN)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


def sample_for(run: Path, seconds: float, **kwargs) -> HardwareSampler:
    sampler = HardwareSampler(run, interval_s=0.05, powercap=run / "no-powercap", **kwargs)
    with sampler:
        time.sleep(seconds)
    return sampler


def test_nvidia_smi_is_the_fallback_and_its_lines_become_samples(tmp_path: Path, smi_on_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_GPUS", "2")
    monkeypatch.setenv("STANDIN_NA", "temperature.gpu")
    sampler = sample_for(tmp_path, 0.6)
    info = sampler.info
    assert info is not None and info.gpu_source == "nvidia-smi" and [g.name for g in info.gpus] == ["NVIDIA H200"] * 2
    assert "energy_j: nvidia-smi has no energy counter; energy is power integrated over samples" in info.missing
    assert "CPU energy: no RAPL counters here" in " ".join(info.missing)
    samples = read_gpu_samples(tmp_path)
    assert {s.gpu for s in samples} == {0, 1} and len(samples) >= 8
    first = samples[0]
    assert (first.power_w, first.sm_util_pct, first.memory_used_mib, first.sm_clock_mhz) == (81.88, 37, 874, 1980)
    assert first.temperature_c is None and first.throttle_reasons == 1 and first.energy_j is None
    assert all(info.started_at - 1.0 <= s.t <= info.ended_at + 1.0 for s in samples), "on the records' clock"
    assert info.samples == len(samples) and info.sampler_cpu_seconds is not None


def test_four_gpus_are_sampled_each_apart_and_only_those_the_server_uses(tmp_path: Path, smi_on_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A 4-GPU rig (a g6.12xlarge's four L4s): every GPU the server uses is in the manifest's account and has its
    own samples; a GPU it does not use (another job's) is named and left out of the run's energy."""
    monkeypatch.setenv("STANDIN_GPUS", "4")
    monkeypatch.setenv("STANDIN_NAME", "NVIDIA L4")
    monkeypatch.setenv("STANDIN_POWER", "72.5,71.0,70.0,35.0")

    def sampled(run: Path, gpus: list[int]) -> HardwareSampler:
        """Sample until every GPU the server uses has a sample (a loaded machine starts the stand-in late)."""
        run.mkdir()
        sampler = HardwareSampler(run, interval_s=0.05, powercap=run / "no-powercap", gpus=gpus)
        with sampler:
            deadline = time.monotonic() + 15
            while {s.gpu for s in read_gpu_samples(run)} != set(gpus) and time.monotonic() < deadline:
                time.sleep(0.05)
        return sampler

    info = sampled(tmp_path / "all", [0, 1, 2, 3]).info
    assert info is not None and [(g.index, g.name) for g in info.gpus] == [(i, "NVIDIA L4") for i in range(4)]
    power = {s.gpu: s.power_w for s in read_gpu_samples(tmp_path / "all")}
    assert power == {0: 72.5, 1: 71.0, 2: 70.0, 3: 35.0}
    info = sampled(tmp_path / "two", [1, 3]).info
    assert info is not None and [g.index for g in info.gpus] == [1, 3]
    assert "GPU(s) 0, 2: not sampled, the server does not use them" in info.missing
    assert {s.gpu for s in read_gpu_samples(tmp_path / "two")} == {1, 3}


def test_a_driver_without_the_newer_fields_falls_back_and_names_what_it_lacks(tmp_path: Path, smi_on_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_UNKNOWN", "power.draw.instant,clocks_event_reasons.active,utilization.memory")
    info = sample_for(tmp_path, 0.3).info
    assert info is not None and info.gpu_source == "nvidia-smi"
    assert "memory_util_pct: nvidia-smi here has no field utilization.memory" in info.missing
    assert not any(line.startswith(("power_w", "throttle")) for line in info.missing), "older names stand in"
    sample = read_gpu_samples(tmp_path)[0]
    assert sample.power_w == 81.24 and sample.throttle_reasons == 1 and sample.memory_util_pct is None


def test_a_gpu_lost_mid_run_is_named_and_the_run_goes_on(tmp_path: Path, smi_on_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_LOSE_AFTER", "3")
    info = sample_for(tmp_path, 0.5).info
    assert info is not None and len(read_gpu_samples(tmp_path)) == 3
    lost = [line for line in info.missing if "GPU is lost" in line]
    assert len(lost) == 1 and lost[0].startswith("nvidia-smi: Unable to determine the device handle")
    assert any(line.startswith("nvidia-smi ended early (exit 15)") for line in info.missing)


def test_no_gpu_at_all_is_one_line_and_no_shard(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    info = sample_for(tmp_path, 0.1).info
    assert info is not None and info.gpu_source is None and info.gpus == []
    gpu_line = next(line for line in info.missing if line.startswith("GPU: not measured here"))
    assert "NVML: NVML did not start (NVML Shared Library Not Found)" in gpu_line, "the real binding's own error"
    assert "nvidia-smi: no nvidia-smi on PATH" in gpu_line
    assert not (tmp_path / "hardware").exists()


def test_the_nvidia_smi_timestamp_is_local_time() -> None:
    assert parse_timestamp(time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(1_800_000_000)) + ".250") == \
        pytest.approx(1_800_000_000.25)


class FakeNvml:
    """The part of pynvml the source calls, for two GPUs: GPU 1 has no energy counter, GPU 0 is lost after
    ``lose_after`` power reads."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's own name
        pass

    NVML_CLOCK_SM = 1
    NVML_TEMPERATURE_GPU = 0

    def __init__(self, lose_after: int = 1000) -> None:
        self.lose_after = lose_after
        self.power_reads = 0
        self.slow_reads = 0

    def nvmlInit(self) -> None: ...  # noqa: N802
    def nvmlShutdown(self) -> None: ...  # noqa: N802
    def nvmlDeviceGetCount(self) -> int: return 2  # noqa: N802
    def nvmlDeviceGetHandleByIndex(self, index: int) -> int: return index  # noqa: N802
    def nvmlDeviceGetName(self, handle: int) -> bytes: return b"NVIDIA L4"  # noqa: N802

    def nvmlDeviceGetPowerUsage(self, handle: int) -> int:  # noqa: N802
        if handle == 0:
            self.power_reads += 1
            if self.power_reads > self.lose_after:
                raise self.NVMLError("GPU is lost")
        return 72_500

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:  # noqa: N802
        if handle == 1:
            raise self.NVMLError_NotSupported("Not Supported")
        return 5_000_000 + 7_250 * self.power_reads

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:  # noqa: N802
        self.slow_reads += 1
        return SimpleNamespace(gpu=90, memory=40)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:  # noqa: N802
        return SimpleNamespace(used=3 * 2**30)

    def nvmlDeviceGetClockInfo(self, handle: int, clock: int) -> int: return 2040  # noqa: N802
    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int: return 55  # noqa: N802
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: int) -> int: return 4  # noqa: N802


def test_nvml_reads_the_energy_counter_names_what_a_card_lacks_and_drops_a_lost_gpu() -> None:
    nvml = FakeNvml(lose_after=3)
    source = NvmlSource(slow_every=2, nvml=nvml)
    devices = source.open()
    assert [(d.index, d.energy_counter) for d in devices] == [(0, True), (1, False)]
    rounds = [source.sample() for _ in range(5)]
    first = rounds[0][0]
    assert (first.power_w, first.energy_j, first.sm_util_pct, first.memory_used_mib) == (72.5, 5_007.25, 90.0, 3072)
    assert (first.sm_clock_mhz, first.temperature_c, first.throttle_reasons) == (2040, 55, 4)
    assert rounds[1][0].sm_util_pct is None, "slow fields every second sample only"
    assert [len(r) for r in rounds] == [2, 2, 2, 1, 1], "GPU 0 is left out once lost"
    assert all(s.energy_j is None for r in rounds for s in r if s.gpu == 1)
    assert source.missing == ["GPU 1: energy_j not supported by the card or driver",
                              source.missing[1]] and source.missing[1].startswith("GPU 0: stopped answering at ")


def test_the_sampler_prefers_nvml_when_the_binding_loads(tmp_path: Path) -> None:
    info = sample_for(tmp_path, 0.3, nvml=lambda: NvmlSource(slow_every=1, nvml=FakeNvml())).info
    assert info is not None and info.gpu_source == "nvml" and info.gpus[0].energy_counter
    samples = read_gpu_samples(tmp_path)
    assert {s.gpu for s in samples} == {0, 1} and samples[0].energy_j is not None


def powercap_tree(root: Path) -> Path:
    for folder, name, value, wrap in (("intel-rapl:0", "package-0", 900, 1000), ("intel-rapl:0:0", "dram", 5, 10**9)):
        (root / folder).mkdir(parents=True)
        (root / folder / "name").write_text(name + "\n")
        (root / folder / "energy_uj").write_text(f"{value}\n")
        (root / folder / "max_energy_range_uj").write_text(f"{wrap}\n")
    (root / "intel-rapl:1").mkdir()
    (root / "intel-rapl:1" / "name").write_text("package-1\n")
    (root / "intel-rapl:1" / "energy_uj").mkdir()  # a counter that cannot be read
    (root / "intel-rapl:1" / "max_energy_range_uj").write_text("1000\n")
    return root


def test_rapl_counters_are_unwrapped_and_an_unreadable_one_is_named(tmp_path: Path) -> None:
    root = powercap_tree(tmp_path / "powercap")
    source = RaplSource(root)
    assert source.open()
    assert [d.name for d in source.domains] == ["package-0", "package-0/dram"]
    assert len(source.missing) == 1 and source.missing[0].startswith("CPU energy: intel-rapl:1 cannot be read")
    source.sample()
    (root / "intel-rapl:0" / "energy_uj").write_text("100\n")  # wrapped at 1000: 200 uJ later
    (root / "intel-rapl:0:0" / "energy_uj").write_text("2000005\n")
    package, dram = source.sample()
    assert package.energy_j == pytest.approx(200e-6) and dram.energy_j == pytest.approx(2.0)


def test_the_sampler_writes_cpu_energy_where_rapl_is_readable(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    sampler = HardwareSampler(tmp_path, interval_s=0.05, powercap=powercap_tree(tmp_path / "powercap"))
    with sampler:
        time.sleep(0.2)
    assert sampler.info is not None and sampler.info.cpu_source == "rapl"
    assert {s.domain for s in read_cpu_energy_samples(tmp_path)} == {"package-0", "package-0/dram"}


class OldBinding(FakeNvml):
    """A binding from before the clock-event call, whose power read then fails in an unexpected way."""

    nvmlDeviceGetCurrentClocksEventReasons = None  # noqa: N815 - pynvml's own name

    def __getattribute__(self, name: str):
        if name == "nvmlDeviceGetCurrentClocksEventReasons":
            raise AttributeError(name)
        return super().__getattribute__(name)


def test_a_binding_without_a_call_and_a_sampler_that_breaks_never_fail_the_run(tmp_path: Path) -> None:
    source = NvmlSource(slow_every=1, nvml=OldBinding())
    source.open()
    first = source.sample()[0]
    assert first.throttle_reasons is None and first.power_w == 72.5
    assert "GPU 0: throttle_reasons the NVML binding here has no call for it" in source.missing

    class Breaking(NvmlSource):
        def sample(self):
            raise RuntimeError("driver went away")

    info = sample_for(tmp_path, 0.2, nvml=lambda: Breaking(nvml=FakeNvml())).info
    assert info is not None and any(line.startswith("sampling stopped at ") and "driver went away" in line
                                    for line in info.missing)
