"""Energy arithmetic on hand-made samples: the counter against integrated power, the window's edges, the
sub-window interval of J/token, idle power, and the dollars."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.cost import PriceChoice
from analysis.energy import (
    card_usd_per_hour,
    cpu_window_joules,
    electricity_usd_per_mtok,
    gpu_traces,
    gpu_window_energy,
    idle_power_w,
    joules_per_token,
    sub_window_joules,
)
from analysis.figures import run_figures
from analysis.load import load_run
from analysis.plan import Targets, plan_for, plan_table
from analysis.prices import PriceQuote
from core.rundir.hardware import GPU_SAMPLES, CpuEnergySample, GpuSample, append_samples, shard


def trace(samples: list[GpuSample]):
    """One GPU's samples as the trace analysis reads (None without any)."""
    return gpu_traces(samples).get(0)


def steady(watts: float, start: float, end: float, every: float = 0.1, gpu: int = 0, counter: bool = True,
           joules0: float = 1_000.0) -> list[GpuSample]:
    """A GPU drawing ``watts`` from ``start`` to ``end``, sampled every ``every`` s."""
    times = np.arange(start, end + every / 2, every)
    return [GpuSample(t=float(t), gpu=gpu, power_w=watts,
                      energy_j=joules0 + watts * (t - start) if counter else None) for t in times]


def test_the_counter_and_integrated_power_agree_on_steady_power_with_edges_between_samples() -> None:
    samples = steady(300.0, 100.0, 110.0)
    by_counter = gpu_window_energy(trace(samples), 101.05, 108.95)
    assert by_counter.method == "counter" and by_counter.joules == pytest.approx(300.0 * 7.9)
    no_counter = [s.model_copy(update={"energy_j": None}) for s in samples]
    by_power = gpu_window_energy(trace(no_counter), 101.05, 108.95)
    assert by_power.method == "integrated power" and by_power.joules == pytest.approx(300.0 * 7.9)
    assert (by_power.mean_w, by_power.peak_w) == (300.0, 300.0)


def test_the_counter_sees_a_burst_between_samples_that_power_samples_miss() -> None:
    """Power sampled at the wrong instants misses a burst; the card's counter does not."""
    samples = steady(100.0, 0.0, 10.0, every=1.0)
    burst = [s.model_copy(update={"energy_j": s.energy_j + (500.0 if s.t >= 5 else 0.0)}) for s in samples]
    window = gpu_window_energy(trace(burst), 0.0, 10.0)
    assert window.method == "counter" and window.joules == pytest.approx(1000.0 + 500.0)
    assert gpu_window_energy(trace([s.model_copy(update={"energy_j": None}) for s in burst]), 0.0, 10.0).joules == \
        pytest.approx(1000.0)


def test_a_window_the_samples_do_not_cover_has_no_energy() -> None:
    samples = steady(200.0, 5.0, 10.0)
    assert gpu_window_energy(trace(samples), 4.0, 9.0).joules is None
    assert gpu_window_energy(trace([]), 4.0, 9.0).method == "no samples"


def test_joules_per_token_is_a_ratio_of_sums_over_sub_windows_with_its_interval() -> None:
    two_gpus = steady(300.0, 0.0, 12.0) + steady(100.0, 0.0, 12.0, gpu=1)
    edges = np.linspace(1.0, 11.0, 6)
    joules = sub_window_joules(gpu_traces(two_gpus), edges)
    assert joules == pytest.approx([800.0] * 5), "both GPUs' energy in each 2 s sub-window"
    estimate = joules_per_token(joules, [400.0, 410.0, 390.0, 400.0, 400.0])
    assert estimate.value == pytest.approx(4000.0 / 2000.0)
    assert estimate.low < estimate.value < estimate.high and estimate.n == 5
    assert sub_window_joules(gpu_traces(two_gpus), [11.0, 13.0]) is None, "a sub-window past the samples"


def test_idle_power_is_the_median_before_the_load() -> None:
    samples = steady(80.0, 0.0, 3.0) + steady(400.0, 3.05, 6.0)
    assert idle_power_w(gpu_traces(samples), before=3.0) == 80.0
    assert idle_power_w(gpu_traces(samples), before=0.0) is None


def test_cpu_energy_per_domain_from_its_counter() -> None:
    samples = [CpuEnergySample(t=float(t), domain=d, energy_j=w * t) for t in range(0, 11)
               for d, w in (("package-0", 35.0), ("package-0/dram", 4.0))]
    assert cpu_window_joules(samples, 2.5, 7.5) == {"package-0": pytest.approx(175.0),
                                                    "package-0/dram": pytest.approx(20.0)}


def test_dollars_of_electricity_and_of_a_card_bought_outright() -> None:
    # 2 J per token is 2e6 J per million tokens: 0.556 kWh, at $0.30/kWh $0.1667
    assert electricity_usd_per_mtok(2.0, 0.30) == pytest.approx(2e6 / 3.6e6 * 0.30)
    assert card_usd_per_hour(1_600.0, 3.0) == pytest.approx(1_600.0 / (3 * 8766))


def test_a_runs_steps_carry_their_energy_and_joules_times_tok_s_is_the_mean_power(kit) -> None:
    """A run with one GPU at 250 W idle-free from before the window to after it: every step's J/token times its
    aggregate tok/s gives back the power, the interval holds the value, and a run without samples has none."""
    records = [kit.record(f"r{i}", t_start=kit.T0 + 99 + i * 0.5, tokens=21) for i in range(20)]
    path = kit.make_run("energy", [kit.window()], {"p0": records})
    plain = run_figures(load_run(path)).steps[0]
    assert plain.energy is None
    append_samples(shard(path, GPU_SAMPLES), steady(250.0, kit.T0 + 90, kit.T0 + 120))
    step = run_figures(load_run(path)).steps[0]
    energy = step.energy
    assert energy is not None and energy.gpus[0].method == "counter" and energy.mean_w == pytest.approx(250.0)
    assert energy.joules == pytest.approx(250.0 * 10)
    assert energy.j_per_token.value * step.aggregate_tok_s.value == pytest.approx(250.0)
    assert energy.j_per_token.low <= energy.j_per_token.value <= energy.j_per_token.high


def test_the_plan_gives_joules_per_token_at_capacity_where_the_run_sampled_them(kit) -> None:

    records = [kit.record(f"r{i}", t_start=kit.T0 + 99 + i * 0.5, tokens=21) for i in range(20)]
    path = kit.make_run("plan-energy", [kit.window()], {"p0": records})
    quote = PriceQuote(instance_type="g6.xlarge", region="us-east-1", market="on-demand", usd_per_hour=0.8048,
                       source="test", as_of="2026-12-03")
    targets = Targets(users=4, min_tok_s=1.0, ttft_p90_s=10.0)
    plain = plan_for(run_figures(load_run(path)), PriceChoice(quote), targets)
    assert plain.j_per_token is None and "J per output token" not in plan_table([plain])
    append_samples(shard(path, GPU_SAMPLES), steady(250.0, kit.T0 + 90, kit.T0 + 120))
    figures = run_figures(load_run(path))
    sampled = plan_for(figures, PriceChoice(quote), targets)
    assert sampled.j_per_token.value == pytest.approx(figures.steps[0].energy.j_per_token.value)
    assert "J per output token at capacity (lower is better)" in plan_table([sampled, plain])


def test_a_run_on_four_gpus_gets_a_row_per_gpu_naming_its_replica_and_its_joules_per_token(kit) -> None:
    """A g6.12xlarge-like rig: four replicas, replica i on GPU i, three serving alike at 70 W and the fourth half as
    many tokens at 49 W. The step's totals are all four GPUs'; each GPU's row has its own power, share of the energy
    and J per output token over its replica's tokens, so the fourth card's worse joules per token show where the
    totals hide them."""
    from analysis.energy_section import energy_section, gpu_rows
    from analysis.prices import PriceBook
    from analysis.replicas_section import replicas_section
    from analysis.report_model import build_section
    from core.rundir.hardware import GpuDevice, HardwareInfo
    from core.rundir.models import ReplicaInfo, ServerInfo

    replicas = [ReplicaInfo(index=i, url=f"http://127.0.0.1:{8080 + i}", slots=16, gpu=i) for i in range(4)]
    server = ServerInfo(args=["-np", "64"], host="127.0.0.1", port=8080, parallel_slots=64, replicas=replicas)
    hardware = HardwareInfo(gpu_source="nvml", interval_s=0.1, samples=1,
                            gpus=[GpuDevice(index=i, name="NVIDIA L4", energy_counter=True) for i in range(4)])
    records = [kit.record(f"r{i}-{n}", t_start=kit.T0 + 99 + n * 0.5, tokens=20 if i < 3 else 10)
               .model_copy(update={"replica": i}) for i in range(4) for n in range(20)]
    path = kit.make_run("four-gpus", [kit.window(0, 4)], {"p0": records}, server=server, hardware=hardware)
    append_samples(shard(path, GPU_SAMPLES), [sample for gpu, watts in enumerate((70.0, 70.0, 70.0, 49.0))
                                              for sample in steady(watts, kit.T0 + 90, kit.T0 + 120, gpu=gpu)])
    section = build_section(path, PriceBook([]))
    (step,) = section.figures.steps
    assert [gpu.gpu for gpu in step.energy.gpus] == [0, 1, 2, 3]
    assert step.energy.mean_w == pytest.approx(259.0) and step.energy.joules == pytest.approx(2590.0)
    rows = gpu_rows(section)
    assert [(r["GPU"], r["replicas"], r["power W (mean)"], r["share of the energy"]) for r in rows] == [
        ("0", "0", "70.0", "27%"), ("1", "1", "70.0", "27%"), ("2", "2", "70.0", "27%"), ("3", "3", "49.0", "19%")]
    # each GPU's joules over its replica's share of the step's output tokens (replica 3 served 10 of 70 per round)
    tokens = step.output_tokens
    per_token = [float(r["J per output token of its replicas ↓"]) for r in rows]
    assert per_token == pytest.approx([700 / (tokens * 2 / 7)] * 3 + [490 / (tokens / 7)], rel=1e-3)
    assert per_token[3] == pytest.approx(1.4 * per_token[0], rel=1e-3)
    assert (700 * 3 + 490) / tokens == pytest.approx(step.energy.j_per_token.value), "the step's own, all GPUs"
    text = "\n".join(energy_section(section))
    assert "Energy from counter; 4 GPUs together." in text
    assert "Per GPU (NVIDIA L4): each row names the replicas placed on that GPU" in text
    headers = [[cell.strip() for cell in line.strip("|").split("|")] for line in text.splitlines()
               if line.startswith("|") and "users" in line]
    assert headers[1] == [
        "users", "GPU", "replicas", "power W (mean)", "peak W", "energy J", "share of the energy", "SM util %",
        "memory MiB", "J per output token of its replicas ↓"]
    replicas_text = "\n".join(replicas_section(section))
    assert "3: http://127.0.0.1:8083, 16 slots, GPU 3" in replicas_text
    assert ("replica 3 served 14% of the output tokens (it held 25% of the requests in flight): the spread "
            "is uneven") in replicas_text


def test_one_server_over_four_gpus_gets_rows_per_gpu_without_dividing_its_tokens(kit) -> None:
    """A server split by layer over four GPUs: a row per GPU (the later layers' card idles more), no replicas and no
    per-GPU J per token, since one server's tokens pass through every GPU; a run on one GPU gets no per-GPU rows."""
    from analysis.energy_section import energy_section, gpu_rows
    from analysis.prices import PriceBook
    from analysis.report_model import build_section
    from core.rundir.hardware import GpuDevice, HardwareInfo

    hardware = HardwareInfo(gpu_source="nvml", interval_s=0.1, samples=1,
                            gpus=[GpuDevice(index=i, name="NVIDIA L4", energy_counter=True) for i in range(4)])
    records = [kit.record(f"r{n}", t_start=kit.T0 + 99 + n * 0.5, tokens=20) for n in range(20)]
    path = kit.make_run("split", [kit.window()], {"p0": records}, hardware=hardware)
    append_samples(shard(path, GPU_SAMPLES), [sample for gpu, watts in enumerate((60.0, 50.0, 50.0, 40.0))
                                              for sample in steady(watts, kit.T0 + 90, kit.T0 + 120, gpu=gpu)])
    section = build_section(path, PriceBook([]))
    rows = gpu_rows(section)
    assert [(r["GPU"], r["power W (mean)"], r["share of the energy"]) for r in rows] == [
        ("0", "60.0", "30%"), ("1", "50.0", "25%"), ("2", "50.0", "25%"), ("3", "40.0", "20%")]
    assert all("replicas" not in r and "J per output token of its replicas ↓" not in r for r in rows)
    one = kit.make_run("one-gpu", [kit.window()], {"p0": records})
    append_samples(shard(one, GPU_SAMPLES), steady(60.0, kit.T0 + 90, kit.T0 + 120))
    assert gpu_rows(build_section(one, PriceBook([]))) == []
    assert "Per GPU (NVIDIA L4): one server used them together, so its tokens are not divided by GPU." in "\n".join(
        energy_section(section))


def test_a_resumed_sweep_keeps_the_samples_of_the_run_it_was_cut_in(kit) -> None:
    """Step 0 was measured before a spot notice cut the sweep, step 1 after the resume, in a run of its own: the
    joined run's step 0 still has the power and clocks sampled in the first run."""
    from analysis.contention import run_contention

    first = kit.make_run("cut", [kit.window(0, 1)],
                         {"p0": [kit.record(f"a{i}", t_start=kit.T0 + 99 + i * 0.5, tokens=21) for i in range(20)]},
                         status="interrupted", last_complete_step=0, linked_runs=["resumed"])
    resumed = kit.make_run("resumed", [kit.window(0, 2, start=kit.T0 + 200, end=kit.T0 + 210)],
                           {"p0": [kit.record(f"b{i}", users=2, t_start=kit.T0 + 199 + i * 0.5, tokens=21)
                                   for i in range(20)]}, resumed_from="cut")
    for path, watts, start in ((first, 250.0, kit.T0 + 90), (resumed, 300.0, kit.T0 + 190)):
        append_samples(shard(path, GPU_SAMPLES), [sample.model_copy(update={"sm_clock_mhz": watts * 4})
                                                  for sample in steady(watts, start, start + 30)])
    figures = run_figures(load_run(resumed))
    assert [step.users for step in figures.steps] == [1, 2]
    assert [step.energy.mean_w if step.energy else None for step in figures.steps] == [
        pytest.approx(250.0), pytest.approx(300.0)]
    assert [noise.sm_clock_mean_mhz for noise in run_contention(figures)] == [1_000.0, 1_200.0]
