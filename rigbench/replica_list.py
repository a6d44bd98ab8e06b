"""``rigbench sweep --replicas-file``: the replicas a sweep spreads its users over, from a file.

Replicas started elsewhere (the rig's serve step, by hand) are not this process's to plan, so their
list comes in as data: a JSON list of :class:`core.rundir.models.ReplicaInfo` (index, url, slots,
gpu, cpus), as the rig's serve step writes it beside its state. The run's manifest lists them, and
the sweep sends user i to replica i mod N, as it does for the replicas ``rigbench local`` starts.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from core.errors import UsageError
from core.rundir import RunManifest
from core.rundir.models import ReplicaInfo
from core.wording import counted
from loadtest.preflight import check_url

OPTION = "--replicas-file"


def read_replicas(path: Path | None, arms: list[tuple[str | None, str]]) -> list[ReplicaInfo]:
    """The replicas ``path`` lists (none without one); the sweep's one bare ``--url`` must be the first's, since
    the run's server is the first replica and its pre-flight check goes there."""
    if path is None:
        return []
    try:
        listed = TypeAdapter(list[ReplicaInfo]).validate_json(path.read_bytes())
    except OSError as error:
        raise UsageError(f"{OPTION} {path}: cannot read it ({error.strerror or error})") from None
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "the file"
        raise UsageError(f"{OPTION} {path}: not a JSON list of replicas (index, url, slots, gpu, cpus): {where}: "
                         f"{first['msg']}") from None
    if len(listed) < 2:
        raise UsageError(f"{OPTION} {path}: lists {counted(len(listed), 'replica')}; give 2 or more, or leave it "
                         "out for one server")
    urls = [check_url(replica.url, f"{OPTION} replica {replica.index}") for replica in listed]
    if len(set(urls)) != len(urls):
        raise UsageError(f"{OPTION} {path}: a replica's URL is listed twice")
    if len(arms) != 1 or arms[0][0] is not None or arms[0][1] != urls[0]:
        raise UsageError(f"{OPTION}: give one bare --url, the first replica's ({urls[0]}); replicas are one "
                         "server configuration, not several arms")
    return [replica.model_copy(update={"url": url}) for replica, url in zip(listed, urls, strict=True)]


def with_replicas(manifest: RunManifest, replicas: list[ReplicaInfo]) -> RunManifest:
    """``manifest`` with its server's replicas listed and its slots the replicas' together."""
    if not replicas or manifest.server is None:
        return manifest
    server = manifest.server.model_copy(update={
        "replicas": replicas, "parallel_slots": sum(replica.slots for replica in replicas), "slots_from": "flags"})
    return manifest.model_copy(update={"server": server})
