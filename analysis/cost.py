"""Dollars: $ per million output tokens per step, and what the whole run cost.

$/Mtok = hourly price / (aggregate output tok/s x 3600) x 1e6. Its interval is the price over
the ends of the throughput interval (the price itself is taken as exact, with its source).

Which price, by what the run is known to have run on:

- *recorded*: a run whose manifest names an instance type (an AWS rig) is priced as that type:
  the price the rig recorded at run time for its market, the price book for the other market.
  ``--price-as`` and ``--usd-per-hour`` do not re-price it (a warning says so).
- *price-as*: any other run (a local machine) is priced only when the user says which known type
  its machine counts as (``--price-as TYPE``), labelled ``(--price-as)``, or
- *given*: what it costs an hour (``--usd-per-hour USD``: the price book's ``given`` quote), labelled
  ``given $USD/h (--usd-per-hour)``, claiming no instance type, market or GPU. Without either the run is not
  priced at all: the report says once why (:func:`not_priced_line`) and shows no $ figure, since a price of
  hardware the run did not use would read as a measurement.
- *hypothetical*: ``rigbench plan --hypothetical TYPE`` extrapolates any run to another type,
  labelled ``(hypothetical)``.

Every price but a recorded one is of hardware that did not measure the figures, so its label says
whose did (:func:`measured_on`: the run's instance type, else its GPU, else its CPU), e.g.
``g6e.xlarge on-demand (hypothetical), measured on CPU (2 cores)``: the label is the one spelling of a
price in the report's tables and cost section, its plots' legends, summary.json, the plan and the gate, so
no figure priced as an L40S reads as an L40S's measurement.

A run priced as a type it did not run on is priced as the share of the type's GPUs it used
(:func:`gpus_used`): for a type of N > 1 GPUs a run that used k of them is priced at k/N of the
instance, labelled ``per-GPU share (1/(N/k)) of TYPE``. So a run on one lent H200 with
``--price-as p5en.48xlarge`` is priced at 1/8 of that instance (8x H200), four replicas one per GPU
priced as a g6.12xlarge (4x L4) at the whole instance, and a run that used one GPU as a quarter of
it. A ``--price-as`` type whose GPU is not the one the run recorded is a counted warning: the price
is of other hardware. A price the book lacks is a counted warning too, never a silent zero.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Literal

from analysis.figures import RunFigures
from analysis.intervals import Estimate
from analysis.prices import GIVEN_PRICE_FLAG, Market, PriceBook, PriceQuote
from analysis.run_name import machine_name as short_machine_name
from core.gpus import find_gpu
from core.instance_types import INSTANCE_TYPES, known_types
from core.profile import flag_value
from core.rundir import RigInfo, RunManifest
from core.wording import counted

DEFAULT_REGION = "us-east-1"
MARKETS: tuple[Market, ...] = ("on-demand", "spot")
PriceBasis = Literal["recorded", "price-as", "hypothetical", "given"]
BASIS_SUFFIX: dict[str, str] = {"recorded": "", "price-as": " (--price-as)", "hypothetical": " (hypothetical)",
                                "given": f" ({GIVEN_PRICE_FLAG})"}


def price_label(instance_type: str | None, market: str | None, basis: PriceBasis, gpu_share: int = 1,
                measured_on: str | None = None, usd_per_hour: float | None = None) -> str:
    """'g6.xlarge spot'; a price of hardware that did not measure the figures says whose did: 'g6.xlarge spot
    (--price-as), measured on NVIDIA L4', 'per-GPU share (1/8) of p5en.48xlarge on-demand (--price-as), measured
    on NVIDIA H200', 'given $0.5/h (--usd-per-hour), measured on CPU (2 cores)': the one spelling of a price's
    name in tables, plots, summary.json, the plan and the gate. ``usd_per_hour``: the given price's."""
    if basis == "given":
        text = f"given ${usd_per_hour:g}/h"
    else:
        text = f"{instance_type} {market}"
        if gpu_share > 1:
            text = f"per-GPU share (1/{gpu_share}) of {text}"
    return text + BASIS_SUFFIX[basis] + (f", measured on {measured_on}" if measured_on else "")


@dataclass(frozen=True)
class PriceChoice:
    """A price applied to a run, and on what grounds (see the module docstring)."""

    quote: PriceQuote  # for a per-GPU share, usd_per_hour is already the share
    basis: PriceBasis = "recorded"
    gpu_share: int = 1  # the quote is 1/gpu_share of the instance's price
    measured_on: str | None = None  # the machine that measured the figures, where it is not the priced type

    @property
    def hypothetical(self) -> bool:
        return self.basis == "hypothetical"

    @property
    def label(self) -> str:
        quote = self.quote
        return price_label(quote.instance_type, quote.market, self.basis, self.gpu_share, self.measured_on,
                           quote.usd_per_hour)


def gpu_description(instance_type: str) -> str | None:
    """'1x L4 24 GiB' from the shared instance table, or None for a type it does not list."""
    known = INSTANCE_TYPES.get(instance_type)
    return None if known is None else f"{known.gpu_count}x {known.gpu_name} {known.gpu_memory_gib} GiB"


def dollars_per_mtok(usd_per_hour: float, tok_s: float | None) -> float | None:
    if tok_s is None or not math.isfinite(tok_s) or tok_s <= 0:
        return None
    return usd_per_hour / (tok_s * 3600.0) * 1e6


def dollars_per_mtok_estimate(usd_per_hour: float, throughput: Estimate) -> Estimate:
    """$/Mtok with the interval mapped from throughput's (its high end gives the low cost)."""
    value = dollars_per_mtok(usd_per_hour, throughput.value)
    low = dollars_per_mtok(usd_per_hour, throughput.high)
    high = dollars_per_mtok(usd_per_hour, throughput.low)
    return Estimate(value, low, high, throughput.n, throughput.method)


def machine_name(rig: RigInfo) -> str:
    """What a run ran on, in the words its manifest allows: the instance type, else the host and its GPU
    (or CPU)."""
    if rig.instance_type:
        return rig.instance_type
    machine = rig.machine
    host = machine.hostname or "an unnamed machine"
    if machine.gpu_name:
        return f"{host} ({machine.gpu_name})"
    cores = counted(machine.cpu_cores, "core") if machine.cpu_cores else ""
    cpu = ", ".join(part for part in (machine.cpu_model, cores) if part)
    return f"{host} ({cpu + ', ' if cpu else ''}no GPU recorded)"


def measured_on(manifest: RunManifest) -> str:
    """The machine whose run measured the figures, as a price of other hardware names it: the instance type, else
    the GPU, else the CPU (the machine part of the run's name, ``analysis.run_name``; no host name, so two runs on
    alike machines share their prices' labels)."""
    return short_machine_name(manifest)


def _manifest_quote(manifest: RunManifest) -> PriceQuote | None:
    rig = manifest.rig
    if rig.price_per_hour is None or rig.market is None or rig.instance_type is None:
        return None
    return PriceQuote(
        instance_type=rig.instance_type,
        region=rig.region or "unknown",
        market=rig.market,
        availability_zone=rig.availability_zone,
        usd_per_hour=rig.price_per_hour,
        source=f"run manifest ({rig.price_source or 'source not recorded'})",
        as_of=rig.launch_time or manifest.created_at,
    )


def ran_on_a_priced_type(manifest: RunManifest) -> bool:
    """Whether the run is priced from what it ran on: a known instance type, or a price its rig recorded."""
    rig = manifest.rig
    if rig.instance_type is None:
        return False
    return rig.instance_type in INSTANCE_TYPES or _manifest_quote(manifest) is not None


def not_priced_line(manifest: RunManifest) -> str:
    """The one line a run that is not priced gets, saying why and how to price it."""
    return (
        f"not priced: ran on {machine_name(manifest.rig)}, not a known instance type; "
        f"--price-as TYPE prices it as one, {GIVEN_PRICE_FLAG} USD at a given hourly price"
    )


def not_priced(manifest: RunManifest, price_as: list[str] | tuple[str, ...] | None, book: PriceBook) -> str | None:
    """The run's not-priced line where nothing prices it: it ran on no priced type, and neither ``--price-as`` nor
    ``--usd-per-hour`` was given; else None (a price the book lacks is a warning instead)."""
    if price_as or book.given is not None or ran_on_a_priced_type(manifest):
        return None
    return not_priced_line(manifest)


def _recorded_choices(manifest: RunManifest, book: PriceBook, warnings: list[str]) -> list[PriceChoice]:
    rig = manifest.rig
    instance_type = rig.instance_type or ""
    recorded = _manifest_quote(manifest)
    region = rig.region or DEFAULT_REGION
    choices = []
    for market in MARKETS:
        if recorded is not None and recorded.market == market:
            choices.append(PriceChoice(recorded))
            continue
        quote = book.find(instance_type, region, market, rig.availability_zone)
        if quote is not None:
            choices.append(PriceChoice(quote))
        elif instance_type in INSTANCE_TYPES:
            warnings.append(f"no {market} price for {instance_type} in {region}; run `rigbench prices fetch`")
        else:
            warnings.append(f"no {market} price for {instance_type} in {region} (not a type rigbench knows)")
    return choices


def per_gpu_share(quote: PriceQuote, gpus: int) -> PriceQuote:
    """The quote of one GPU of a ``gpus``-GPU instance, saying what it is a share of."""
    if gpus <= 1:
        return quote
    note = f"per-GPU share: 1/{gpus} of the instance's ${quote.usd_per_hour:.4f}/h"
    return quote.model_copy(
        update={"usd_per_hour": quote.usd_per_hour / gpus, "note": note + (f"; {quote.note}" if quote.note else "")}
    )


def _choices_as(
    manifest: RunManifest, book: PriceBook, instance_type: str, basis: PriceBasis, warnings: list[str]
) -> list[PriceChoice]:
    """The run priced as a type it did not run on: the type's prices, per GPU for a multi-GPU type."""
    rig = manifest.rig
    known = INSTANCE_TYPES[instance_type]
    if basis == "price-as" and find_gpu(rig.machine.gpu_name) is not find_gpu(known.gpu_name):
        warnings.append(
            f"priced as {instance_type} ({known.gpu_count}x {known.gpu_name}) as --price-as says, though it ran on "
            f"{machine_name(rig)}: the price is of other hardware"
        )
    region = rig.region or DEFAULT_REGION
    share = gpu_share(manifest, known.gpu_count, instance_type, warnings)
    choices = []
    for market in MARKETS:
        quote = book.find(instance_type, region, market)
        if quote is None:
            warnings.append(f"no {market} price for {instance_type} in {region}; left out")
        else:
            choices.append(PriceChoice(per_gpu_share(quote, share), basis, share, measured_on(manifest)))
    return choices


def gpus_used(manifest: RunManifest) -> int:
    """How many GPUs the run's server used: the GPUs its replicas were placed on; for one server, one with ``-sm
    none``, else the devices its line names (``-dev``), else every GPU the sampler was told it uses (the manifest's
    ``hardware.gpus``: llama.cpp splits a model over every GPU it sees, by layer unless told otherwise), since a
    split server priced as one GPU of a 4-GPU type would read as a quarter of what it cost; else one."""
    server = manifest.server
    placed = {r.gpu for r in server.replicas if r.gpu is not None} if server is not None else set()
    if placed:
        return len(placed)
    if server is not None:
        if flag_value(server.args, "-sm", "--split-mode") == "none":
            return 1
        devices = flag_value(server.args, "-dev", "--device")
        if devices is not None:
            return max(1, len([d for d in devices.split(",") if d.strip() and d.strip() != "none"]))
    hardware = manifest.hardware
    return max(1, len(hardware.gpus)) if hardware is not None else 1


def gpu_share(manifest: RunManifest, gpu_count: int, instance_type: str, warnings: list[str]) -> int:
    """N of a 1/N share of the type, from the GPUs the run used (:func:`gpus_used`); a count that does not divide
    the type's GPUs, or is more than it has, is priced as the whole instance, said once."""
    used = gpus_used(manifest)
    if used > gpu_count:
        warnings.append(f"the run used {used} GPUs, more than {instance_type}'s {gpu_count}: priced as the whole "
                        "instance")
        return 1
    if gpu_count % used:
        warnings.append(f"the run used {used} GPUs, which do not divide {instance_type}'s {gpu_count}: priced as the "
                        "whole instance")
        return 1
    return gpu_count // used


def price_choices(
    manifest: RunManifest,
    book: PriceBook,
    price_as: tuple[str, ...] | list[str] | None,
    warnings: list[str],
    hypothetical: tuple[str, ...] | list[str] | None = None,
) -> list[PriceChoice]:
    """The prices a run is costed at (see the module docstring): ``price_as`` and the book's given price
    (``--usd-per-hour``) for a run on no priced type, ``hypothetical`` for any; missing ones become warnings. An
    unknown type in either list is refused (UsageError, exit 2), naming its flag."""
    price_as = known_types(price_as or [], "--price-as")
    hypothetical = known_types(hypothetical or [], "--hypothetical")
    rig = manifest.rig
    choices: list[PriceChoice] = []
    if ran_on_a_priced_type(manifest):
        choices += _recorded_choices(manifest, book, warnings)
        for instance_type in price_as:
            if instance_type != rig.instance_type:
                warnings.append(
                    f"--price-as {instance_type} not applied: the run ran on {rig.instance_type} (its manifest "
                    "says so) and is priced as that"
                )
        if book.given is not None:
            warnings.append(
                f"{GIVEN_PRICE_FLAG} {book.given.usd_per_hour:g} not applied: the run ran on {rig.instance_type} (its "
                "manifest says so) and is priced as that"
            )
        priced_as = [rig.instance_type]
    else:
        for instance_type in price_as:
            choices += _choices_as(manifest, book, instance_type, "price-as", warnings)
        if book.given is not None:
            choices.append(PriceChoice(book.given, "given", measured_on=measured_on(manifest)))
        priced_as = price_as
    for instance_type in hypothetical:
        if instance_type not in priced_as:
            choices += _choices_as(manifest, book, instance_type, "hypothetical", warnings)
    return choices


def _parse_time(text: str | None) -> float | None:
    if not text:
        return None
    try:
        stamp = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=dt.UTC)
    return stamp.timestamp()


def run_uptime_seconds(figures: RunFigures, warnings: list[str]) -> tuple[float | None, str]:
    """Seconds billed: from the rig's launch (setup and build included) to the run's end.

    Without a launch time (a local rig) the run's own span is used, and said so."""
    manifest = figures.run.manifest
    records = figures.run.records
    end = _parse_time(manifest.ended_at)
    if end is None and len(records):
        end = float(records["t_end"].max())
    launch = _parse_time(manifest.rig.launch_time)
    basis = "rig launch to run end (setup and build included)"
    if launch is None:
        launch = _parse_time(manifest.created_at)
        basis = "run start to run end (no rig launch time recorded: setup and build not included)"
    if launch is None or end is None or end < launch:
        warnings.append("run duration unknown (no usable created_at/ended_at); run cost left out")
        return None, basis
    return end - launch, basis
