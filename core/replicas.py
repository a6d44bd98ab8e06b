"""Several llama-server processes on one rig: how a profile's server line becomes one line per replica.

Why replicas: one llama-server decodes all its busy slots in one loop, and for a small model on a
large card that loop, not the card, sets the pace past a few users; several processes, each with a
share of the slots, run several loops. They must share what the machine has without fighting over
it: the slots and the context are divided (each slot keeps its context), each replica gets its own
port, its GPU (all on one card, or one card each, round-robin when there are more replicas than
cards), and, unless the profile pins threads itself, its own share of the host's cores (``-t``,
``-tb`` and the CPUs it may run on), since four servers each spinning every core served half of what
one did on the H200.

A plan is pure arithmetic on the profile's line: the same plan is started by ``rigbench local``,
``serve`` and the rig's serve step, and written into the run's manifest.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from core.errors import ProfileError
from core.mps import client_environment
from core.profile import flag_value, parallel_slots, split_flags
from core.strict import Strict
from core.wording import counted

GpuPlacement = Literal["shared", "each"]
THREAD_FLAGS = ("-t", "--threads", "-tb", "--threads-batch")


class ReplicaPlan(Strict):
    """One replica: its index, port, llama-server arguments, environment and CPUs."""

    model_config = ConfigDict(frozen=True)

    index: int
    port: int
    args: list[str]
    slots: int
    gpu: int | None = Field(None, description="the GPU it runs on (CUDA_VISIBLE_DEVICES), None without one")
    cpus: list[int] = Field(default_factory=list, description="the CPUs it may run on; empty: any")
    mps_pipe: str | None = Field(None, description="the MPS daemon's pipe folder it is a client of (core.mps); None: "
                                 "no MPS")

    @property
    def environment(self) -> dict[str, str]:
        # the GPU by nvidia-smi's index, which is PCI bus order; CUDA's own order is fastest first unless told
        found = {} if self.gpu is None else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": str(self.gpu)}
        return found | (client_environment(self.mps_pipe) if self.mps_pipe else {})

    def under_mps(self, pipe_dir: str | None) -> ReplicaPlan:
        """This plan as a client of the MPS daemon at ``pipe_dir`` (None: not under MPS)."""
        return self.model_copy(update={"mps_pipe": pipe_dir})


def replace_flag(args: list[str], names: tuple[str, ...], value: str | None) -> list[str]:
    """``args`` without any of ``names``, then ``names[0] value`` appended (when value is given)."""
    kept = [piece for piece in split_flags(args) if piece[0] not in names]
    flat = [token for piece in kept for token in piece]
    return flat + ([names[0], value] if value is not None else [])


def with_threads(args: list[str], threads: int) -> list[str]:
    """``args`` running ``threads`` threads (``-t`` and ``-tb``): a server's share of the cores, since llama-server's
    default counts every core of the machine."""
    line = replace_flag(args, ("-t", "--threads"), str(threads))
    return replace_flag(line, ("-tb", "--threads-batch"), str(threads))


def pins_threads(args: list[str]) -> bool:
    """Whether the line sets its threads itself (then a share of the cores is not given it)."""
    return any(flag in args for flag in THREAD_FLAGS)


def replica_gpu(index: int, gpus: list[int] | None, placement: GpuPlacement) -> int | None:
    """Replica ``index``'s GPU: ``each``, GPU index mod the GPUs; ``shared``, the first; None without a GPU."""
    if not gpus:
        return None
    return gpus[index % len(gpus)] if placement == "each" else gpus[0]


def plan_replicas(args: list[str], replicas: int, base_port: int, *, gpus: list[int] | None = None,
                  placement: GpuPlacement = "each", cores: list[int] | None = None,
                  source: str = "[server] replicas") -> list[ReplicaPlan]:
    """One plan per replica from the whole rig's server line (its ``-np`` and ``-c`` are the rig's totals).

    ``gpus``: the GPU indices the rig has (None or empty: no GPU); ``cores``: the CPUs to divide (None: no
    pinning); ``source`` names where the replica count came from, for the errors."""
    if replicas < 1:
        raise ProfileError(f"{source} = {replicas}: give 1 or more")
    slots = parallel_slots(args)
    if replicas > slots:
        raise ProfileError(f"{source} = {replicas} is more replicas than the {counted(slots, 'slot')} of the server "
                           f"line (-np {slots}): each replica needs a slot; raise -np or lower the replicas")
    if slots % replicas:
        raise ProfileError(f"{source} = {replicas} does not divide the {slots} slots (-np {slots}) evenly; give a "
                           "count that does, so every replica serves the same share")
    context = flag_value(args, "-c", "--ctx-size")
    if replicas > 1 and context is None:
        raise ProfileError(f"{source} = {replicas}: the server line has no -c, so each replica would get "
                           "llama-server's whole default context and its slots more than the single server's; give -c "
                           "(the rig's total, divided between the replicas)")
    if context is not None and int(context) % replicas:
        raise ProfileError(f"{source} = {replicas} does not divide -c {context} evenly (each slot keeps its context)")
    if replicas == 1:  # the server as the profile says, seeing every GPU and core as it always did
        return [ReplicaPlan(index=0, port=base_port, args=list(args), slots=slots)]
    pinned_threads = pins_threads(args)
    share = len(cores) // replicas if cores else 0
    if cores and not pinned_threads and share < 1:
        raise ProfileError(f"{source} = {replicas}: more replicas than the {counted(len(cores), 'CPU core')} to "
                           "share; give each replica -t in the server line, or fewer replicas")
    plans = []
    for index in range(replicas):
        line = replace_flag(args, ("-np", "--parallel"), str(slots // replicas))
        if context is not None:
            line = replace_flag(line, ("-c", "--ctx-size"), str(int(context) // replicas))
        cpus: list[int] = []
        if cores and not pinned_threads:
            cpus = cores[index * share:(index + 1) * share]
            line = with_threads(line, share)
        plans.append(ReplicaPlan(index=index, port=base_port + index, args=line, slots=slots // replicas,
                                 gpu=replica_gpu(index, gpus, placement), cpus=cpus))
    return plans


def user_replica(user: int, replicas: int) -> int:
    """Which replica a user (or an open-loop arrival, by its number) is sent to: user i to replica i mod N, so
    a user keeps its replica for the whole run (replicas share users evenly only where N divides the users)."""
    return user % replicas
