"""The report's replicas section: how a run's load spread over several llama-server replicas.

Why: the rig is one unit for tok/s, plans and dollars, but an uneven spread (a replica that served
fewer users, or slower) is where the aggregate hides its cause. Each step gives every replica's share
of the measured requests' output tokens and its tok/s over the window; a share further than a quarter
from its expected one is a warning. Expected, in a closed loop: the replica's share of the requests
in flight over the window (its users: user i goes to replica i mod N, and the load processes number
their users apart, so 1 user leaves the other replicas idle by design and 12 users over 8 replicas put
two on some, one on others); a replica serving fewer tokens than the requests it held is serving its
users slower. An open loop's arrivals go round the replicas: 1/N each.
"""

from __future__ import annotations

import numpy as np
from tabulate import tabulate

from analysis.report_model import RunSection
from core.load_reached import mean_in_flight
from core.wording import counted

UNEVEN = 0.25  # a share this far (relative) from 1/N is called uneven


def replica_tokens(section: RunSection) -> dict[int, np.ndarray]:
    """Each step's measured requests' output tokens per replica (step index -> one sum per replica, in the
    manifest's order); empty for one server. The energy section reads it too, to give each GPU its replicas'
    tokens."""
    figures = section.figures
    replicas = figures.run.manifest.server.replicas if figures.run.manifest.server else []
    frame = figures.run.records
    if len(replicas) < 2 or "replica" not in frame:
        return {}
    measured = (frame["phase"] == "measure").to_numpy() & ~frame["interrupted"].to_numpy()
    tokens = np.nan_to_num(frame["completion_tokens"].to_numpy(dtype=float))
    replica = frame["replica"].to_numpy(dtype=float)
    steps = frame["step"].to_numpy()
    found = {}
    for step in figures.steps:
        here = measured & (steps == step.index)
        found[step.index] = np.asarray([tokens[here & (replica == index)].sum() for index in range(len(replicas))])
    return found


def replica_rows(section: RunSection) -> tuple[list[dict], list[str]]:
    per_step = replica_tokens(section)
    if not per_step:
        return [], []
    figures = section.figures
    rows, warnings = [], []
    for step in figures.steps:
        by_replica = per_step[step.index]
        count = len(by_replica)
        total = by_replica.sum()
        row: dict[str, object] = {"users" if step.rate is None else "req/s": step.load_label.split()[0]}
        for index, (mine, expected) in enumerate(zip(by_replica, expected_shares(section, step, count),
                                                      strict=True)):
            share = mine / total if total else 0.0
            row[f"replica {index}: share"] = f"{share:.0%}"
            row[f"replica {index}: tok/s ↑"] = f"{mine / step.window_seconds:,.1f}" if step.window_seconds else "-"
            if total and expected and abs(share / expected - 1) > UNEVEN:
                warnings.append(f"{step.load_label}: replica {index} served {share:.0%} of the output tokens "
                                f"({expected_said(step, expected)}): the spread is uneven")
        rows.append(row)
    return rows, warnings


def expected_shares(section: RunSection, step, count: int) -> list[float]:
    """Each replica's expected share of a step's tokens: in a closed loop, its share of the requests in flight over
    the step's window (the users it held); in an open loop, or where nothing was in flight, 1/N."""
    figures = section.figures
    window = next((w for w in figures.run.manifest.steps if w.index == step.index), None)
    frame = figures.run.records
    if step.rate is not None or window is None or window.measure_end is None:
        return [1 / count] * count
    here = frame[frame["step"].to_numpy() == step.index]
    replica = here["replica"].to_numpy(dtype=float)
    starts, ends = here["t_start"].to_numpy(dtype=float), here["t_end"].to_numpy(dtype=float)
    held = [mean_in_flight(starts[replica == index], ends[replica == index], window.measure_start,
                           window.measure_end) for index in range(count)]
    total = sum(held)
    return [mine / total for mine in held] if total > 0 else [1 / count] * count


def expected_said(step, expected: float) -> str:
    """What the share was judged against, for the warning."""
    if step.rate is not None:
        return f"an even share is {expected:.0%}"
    return f"it held {expected:.0%} of the requests in flight"


def replicas_section(section: RunSection) -> list[str]:
    rows, warnings = replica_rows(section)
    if not rows:
        return []
    replicas = section.figures.run.manifest.server.replicas  # type: ignore[union-attr]
    where = ", ".join(f"{r.index}: {r.url}, {counted(r.slots, 'slot')}"
                      + (f", GPU {r.gpu}" if r.gpu is not None else "") for r in replicas)
    lines = ["", "### Replicas", "", f"{counted(len(replicas), 'llama-server replica')} ({where}); "
             "user i went to replica "
             "i mod N. Share: of the measured requests' output tokens; tok/s: those tokens over the window.", "",
             tabulate(rows, headers="keys", tablefmt="github"), ""]
    return lines + [f"- {warning}" for warning in warnings] + ([""] if warnings else [])
