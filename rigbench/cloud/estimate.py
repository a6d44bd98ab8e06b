"""What a loop will cost, stated before any money is spent.

Hours per rig are the sum of each phase's expected time: the studies' own durations (a
sweep's steps x (warm-up + measure window), plus start-up per step), and for the set-up
phases the times seen on g6 rigs with the Deep Learning AMI (a cold llama.cpp CUDA build is
the largest: 633 s on a g6.xlarge). The price is the first attempt's: the zone's spot price
now, else the on-demand price, plus the root volume and the public IPv4 address. It is an
estimate, so the loop's record keeps the hours and cost each rig really took beside it.
"""

from __future__ import annotations

from core.instance_types import get_instance_type
from core.lists import seconds_per_step
from rigbench.cloud.attempts import PlannedAttempt
from rigbench.cloud.record import RigEstimate

# Expected seconds of the phases that do not depend on the studies.
PHASE_SECONDS = {
    "up": 150.0,        # pulumi up: key pair, security group, a spot instance running
    "setup": 180.0,     # boot, NVMe mount, the user data's marker
    "toolkit": 60.0,    # nvidia-smi and nvcc present on the DLAMI
    # A cold CUDA build of the pinned llama.cpp; counted even with a build cache, whose key is known
    # only on the rig (a hit restores a 184 MB sm_90 archive in 3.3 s plus its download).
    "build": 660.0,
    "serve": 60.0,      # llama-server loads the model, /health answers
    "project": 180.0,   # this checkout into a virtualenv on the rig
    "fetch": 30.0,
    "destroy": 120.0,
}
DOWNLOAD_BYTES_PER_S = 100e6  # the Hugging Face CDN to an AWS instance in us-east-1
UNKNOWN_MODEL_DOWNLOAD_S = 120.0
STEP_OVERHEAD_S = 10.0        # a sweep step's start, pre-flight and drain
BENCH_SECONDS = 120.0
# The 200 GB gp3 root volume (about $0.022/h) and the public IPv4 address ($0.005/h).
EXTRAS_USD_PER_HOUR = 0.027


def sweep_seconds(steps: list[int], warmup: float, measure: float | list[float]) -> float:
    windows = seconds_per_step(measure, len(steps))
    return sum(warmup + window + STEP_OVERHEAD_S for window in windows)


def hourly_price(attempt: PlannedAttempt) -> tuple[float, str]:
    """USD per hour of the attempt, and where the figure came from."""
    if attempt.market == "spot" and attempt.spot_usd_per_hour is not None:
        return attempt.spot_usd_per_hour + EXTRAS_USD_PER_HOUR, f"spot in {attempt.zone} now + volume and IPv4"
    on_demand = get_instance_type(attempt.instance_type).on_demand_usd_per_hour
    if on_demand is None:
        return float("nan"), "no known price"
    basis = "on-demand" if attempt.market == "on-demand" else "on-demand (no spot price seen; the cap)"
    return on_demand + EXTRAS_USD_PER_HOUR, basis + " + volume and IPv4"


def estimate_rig(stack: str, attempt: PlannedAttempt, study_seconds: dict[str, float], model_bytes: int | None,
                 skip: set[str]) -> RigEstimate:
    phases = {name: seconds for name, seconds in PHASE_SECONDS.items() if name not in skip}
    phases["download"] = (model_bytes / DOWNLOAD_BYTES_PER_S) if model_bytes else UNKNOWN_MODEL_DOWNLOAD_S
    phases.update(study_seconds)
    hours = sum(phases.values()) / 3600
    usd_per_hour, basis = hourly_price(attempt)
    return RigEstimate(stack=stack, instance_type=attempt.instance_type, market=attempt.market,
                       usd_per_hour=round(usd_per_hour, 4), price_basis=basis, hours=round(hours, 3),
                       usd=round(hours * usd_per_hour, 3), phases_s={k: round(v, 1) for k, v in phases.items()})
