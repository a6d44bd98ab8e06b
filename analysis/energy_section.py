"""The report's energy section: what the card drew and what each output token cost in joules, per step.

Why beside dollars: a cloud card's price per hour hides its power, and a local card's cost is its
electricity and its purchase price, which a price list does not have. With ``--kwh-price`` (and
``--card-usd`` over ``--card-years``) the section turns joules per token into dollars per million
tokens, so a card you own and a card you rent meet in one table. A run that sampled nothing says so
once; a run made before the sampler existed gets no section.

A run on several GPUs also gets one row per step and GPU: the totals hide a card that idled while
the others worked (a replica that served little, a layer split that leaves most cards waiting), and
with one replica per GPU each card's joules per output token can be set against its replicas' tokens.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
from tabulate import tabulate

from analysis.cost import dollars_per_mtok
from analysis.energy import EnergyPrices, card_usd_per_hour, electricity_usd_per_mtok
from analysis.intervals import Estimate
from analysis.replicas_section import replica_tokens
from analysis.report_model import RunSection
from core.wording import counted

TITLE = "### Energy"


def _watts(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _per_token(estimate: Estimate | None) -> str:
    if estimate is None or estimate.value is None:
        return "-"
    if estimate.low is None or estimate.high is None:
        return f"{estimate.value:.4g}"
    return f"{estimate.value:.4g} [{estimate.low:.4g}, {estimate.high:.4g}]"


def energy_section(section: RunSection, prices: EnergyPrices | None = None) -> list[str]:
    manifest = section.figures.run.manifest
    hardware = manifest.hardware
    if hardware is None:
        return []
    lines = ["", TITLE, ""]
    steps = [step for step in section.figures.steps if step.energy is not None]
    if not steps:
        reasons = "; ".join(hardware.missing) or "no sample reached a measured window"
        return [*lines, f"Not measured here: {reasons}.", ""]
    share = hardware.cpu_share
    sampled = [name for name in (hardware.gpu_source, hardware.cpu_source) if name]
    lines.append(f"Sampled with {' and '.join(sampled)} every {hardware.interval_s * 1000:.0f} ms"
                 + (f"; the sampler took {share:.2%} of one core" if share is not None else "") + ".")
    idle = section.figures.idle_power_w
    if idle is not None:
        lines.append(f"Idle power before the load: {idle:,.1f} W (each GPU's median sample, summed).")
    gpus = len(hardware.gpus)
    rows = []
    for step in steps:
        energy = step.energy
        assert energy is not None
        peak = max((gpu.peak_w for gpu in energy.gpus if gpu.peak_w is not None), default=None)
        utilisation = [gpu.sm_util_pct for gpu in energy.gpus if gpu.sm_util_pct is not None]
        memory = [gpu.memory_used_mib for gpu in energy.gpus if gpu.memory_used_mib is not None]
        row = {
            "users" if step.rate is None else "req/s": step.load_label.split()[0],
            "GPU power W (mean)": _watts(energy.mean_w),
            "peak W (one GPU)": _watts(peak),
            "energy J": "-" if energy.joules is None else f"{energy.joules:,.0f}",
            "J per output token ↓": _per_token(energy.j_per_token),
            "SM util %": "-" if not utilisation else f"{sum(utilisation) / len(utilisation):.0f}",
            "memory MiB": "-" if not memory else f"{sum(memory):,.0f}",
        }
        if energy.cpu_joules:
            row["CPU J per token ↓"] = "-" if energy.cpu_j_per_token is None else f"{energy.cpu_j_per_token:.4g}"
        if prices is not None and prices.given:
            row |= price_cells(step.energy.j_per_token, step.aggregate_tok_s.value, prices)
        rows.append(row)
    lines += ["", tabulate(rows, headers="keys", tablefmt="github"), ""]
    methods = sorted({gpu.method for step in steps for gpu in step.energy.gpus})  # type: ignore[union-attr]
    lines.append(f"Energy from {', '.join(methods)}; {counted(gpus, 'GPU')} together. J per output token is the "
                 "window's energy over its output tokens; its interval comes from the aggregate's sub-windows.")
    lines += per_gpu_lines(section)
    lines += [f"- {line}" for line in hardware.missing]
    return [*lines, ""]


def replicas_by_gpu(section: RunSection) -> dict[int, list[int]]:
    """The replicas placed on each GPU (GPU index -> replica indices); empty for one server, or replicas on no GPU."""
    server = section.figures.run.manifest.server
    placed: dict[int, list[int]] = defaultdict(list)
    for replica in server.replicas if server is not None else []:
        if replica.gpu is not None:
            placed[replica.gpu].append(replica.index)
    return dict(placed)


def gpu_rows(section: RunSection) -> list[dict[str, str]]:
    """One row per step and GPU, for a run that sampled more than one GPU (none otherwise). With replicas placed on
    GPUs, each GPU's row names them and gives its J per output token over its replicas' share of the step's output
    tokens (the share of the measured requests' tokens, as the replicas section counts them)."""
    steps = [step for step in section.figures.steps if step.energy is not None]
    if max((len(step.energy.gpus) for step in steps), default=0) < 2:  # type: ignore[union-attr]
        return []
    placed = replicas_by_gpu(section)
    tokens = replica_tokens(section) if placed else {}
    rows = []
    for step in steps:
        energy = step.energy
        assert energy is not None
        by_replica = tokens.get(step.index)
        for gpu in energy.gpus:
            row = {"users" if step.rate is None else "req/s": step.load_label.split()[0], "GPU": str(gpu.gpu)}
            if placed:
                row["replicas"] = ", ".join(map(str, placed.get(gpu.gpu, []))) or "none"
            share = None if gpu.joules is None or not energy.joules else gpu.joules / energy.joules
            row |= {
                "power W (mean)": _watts(gpu.mean_w),
                "peak W": _watts(gpu.peak_w),
                "energy J": "-" if gpu.joules is None else f"{gpu.joules:,.0f}",
                "share of the energy": "-" if share is None else f"{share:.0%}",
                "SM util %": "-" if gpu.sm_util_pct is None else f"{gpu.sm_util_pct:.0f}",
                "memory MiB": "-" if gpu.memory_used_mib is None else f"{gpu.memory_used_mib:,.0f}",
            }
            if placed:
                row["J per output token of its replicas ↓"] = _gpu_per_token(
                    gpu.joules, step.output_tokens, by_replica, placed.get(gpu.gpu, []))
            rows.append(row)
    return rows


def _gpu_per_token(joules: float | None, output_tokens: float, by_replica: np.ndarray | None,
                   replicas: list[int]) -> str:
    """A GPU's joules over its replicas' share of the step's output tokens ('-' where it served none)."""
    if joules is None or by_replica is None or not replicas or not by_replica.sum():
        return "-"
    mine = output_tokens * sum(by_replica[index] for index in replicas if index < len(by_replica)) / by_replica.sum()
    return f"{joules / mine:.4g}" if mine > 0 else "-"


def per_gpu_lines(section: RunSection) -> list[str]:
    rows = gpu_rows(section)
    if not rows:
        return []
    hardware = section.figures.run.manifest.hardware
    names = sorted({device.name for device in hardware.gpus}) if hardware is not None else []
    cards = f" ({', '.join(names)})" if names else ""
    placed = replicas_by_gpu(section)
    how = ("each row names the replicas placed on that GPU, and its J per output token is the GPU's own energy over "
           "those replicas' share of the step's output tokens" if placed else
           "one server used them together, so its tokens are not divided by GPU")
    return ["", f"Per GPU{cards}: {how}. Share of the energy: the GPU's part of all GPUs' joules over the window.", "",
            tabulate(rows, headers="keys", tablefmt="github"), ""]


def price_cells(per_token: Estimate | None, tok_s: float | None, prices: EnergyPrices) -> dict[str, str]:
    cells = {}
    if prices.usd_per_kwh is not None:
        value = None if per_token is None or per_token.value is None else electricity_usd_per_mtok(
            per_token.value, prices.usd_per_kwh)
        cells[f"electricity $/Mtok at ${prices.usd_per_kwh:g}/kWh ↓"] = "-" if value is None else f"{value:.4f}"
    if prices.card_usd is not None:
        hourly = card_usd_per_hour(prices.card_usd, prices.card_years)
        value = dollars_per_mtok(hourly, tok_s)
        cells[f"card $/Mtok (${prices.card_usd:,.0f} over {prices.card_years:g} y) ↓"] = (
            "-" if value is None else f"{value:.4f}")
    return cells
