"""The local rig end to end: real build, real llama-server, real sweep, real report."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import pytest
from rich.console import Console

from core.lists import DEFAULT_USER_STEPS, parse_counts
from core.rundir import RunDir
from rigbench.local_rig import LocalRigOptions, run_local_rig

USER_STEPS = parse_counts(DEFAULT_USER_STEPS, "--steps")
STANDIN_SMI = Path(__file__).resolve().parents[1] / "hardware" / "standin_nvidia_smi.py"


@pytest.mark.integration
def test_local_rig_writes_a_valid_run_with_all_seven_steps(tmp_path, llama_build, monkeypatch):
    # 32 and 64 users queue behind the tiny profile's 4 slots: a request started in a 1.5 s window at
    # those steps may not end inside it (one that outlives the sweep is stopped), so their windows are longer
    windows = [1.5] * (len(USER_STEPS) - 2) + [3.0, 4.0]
    # a GPU to sample: the stand-in nvidia-smi (an H200's fields and units, 81.88 W throughout)
    gpu = tmp_path / "gpu-bin"
    gpu.mkdir()
    (gpu / "nvidia-smi").symlink_to(STANDIN_SMI)
    monkeypatch.setenv("PATH", f"{gpu}{os.pathsep}{os.environ['PATH']}")
    terminal = io.StringIO()
    report = run_local_rig(
        LocalRigOptions(runs_root=tmp_path, backend="cpu", load={"warmup_seconds": 0.5, "measure_seconds": windows}),
        Console(file=terminal, width=1000),  # no wrapping: the lines as printed
    )
    run = RunDir(report.parent)
    manifest = run.read_manifest()
    assert manifest.status == "complete"
    assert manifest.rig.kind == "local" and manifest.rig.machine.cpu_cores > 0
    assert manifest.build.key == llama_build.key and manifest.build.backend == "cpu"
    assert manifest.model.synthetic and len(manifest.model.sha256) == 64
    assert [step.users for step in manifest.steps] == list(USER_STEPS)
    assert all(step.measure_end and step.measure_end > step.measure_start for step in manifest.steps)
    assert "--host" in manifest.server.args and str(manifest.server.port) in manifest.server.args
    records = run.read_records()
    # requests still streaming when the last step ended were stopped by the harness (interrupted, partial)
    stopped = [r for r in records if r.interrupted]
    assert all(r.ok and r.content_chunks <= manifest.load.max_tokens for r in stopped)
    measured = [r for r in records if r.phase == "measure" and r.ok and not r.interrupted]
    assert {r.users for r in measured} == set(USER_STEPS)
    for record in measured:
        assert record.completion_tokens == record.content_chunks == manifest.load.max_tokens
        assert record.timings.predicted_n == record.completion_tokens

    text = report.read_text()
    rows = [line for line in text.splitlines() if re.match(r"^\|\s*\d+\s*\|", line)]
    users_seen = [int(row.split("|")[1]) for row in rows]
    for users in USER_STEPS:
        assert users in users_seen, f"step with {users} users missing from the report table"
    header = next(line for line in text.splitlines() if "users" in line.lower() and "|" in line)
    columns = [c.strip().lower() for c in header.split("|")]
    aggregate = next(i for i, c in enumerate(columns) if "aggregate" in c)
    for row in rows[: len(USER_STEPS)]:
        value = row.split("|")[aggregate].strip().split()[0].replace(",", "")
        assert float(value) > 0, row

    # the sampler ran around the load: every step's energy, per output token, in the manifest and report
    assert manifest.hardware.gpu_source == "nvidia-smi" and manifest.hardware.gpus[0].name == "NVIDIA H200"
    assert manifest.hardware.sampler_cpu_seconds is not None
    energy = text.split("### Energy\n\n", 1)[1].split("\n### ", 1)[0]
    assert "Sampled with nvidia-smi every 100 ms; the sampler took " in energy
    assert "Energy from integrated power; 1 GPU together." in energy
    energy_rows = [line for line in energy.splitlines() if re.match(r"^\|\s*\d+\s*\|", line)]
    assert all((report.parent / "plots" / f"{name}.png").stat().st_size > 5000 for name in
               ("j_per_token", "power_over_time"))
    assert len(energy_rows) == len(USER_STEPS), energy_rows
    assert all(re.search(r"\|\s+81\.9\s+\|", row) for row in energy_rows), energy_rows

    # the terminal ends with the headline the report opens with, then where the report is
    (headline,) = text.split("## At a glance\n\n", 1)[1].split("\n\n## ", 1)[0].strip().split("\n\n")
    assert headline.startswith("Best aggregate output ")
    shown = terminal.getvalue()
    assert shown.endswith(f"At a glance:\n{headline}\n\nreport: {report}\n"), shown[-2000:]


@pytest.mark.integration
def test_a_synthetic_model_is_labelled_and_held_to_fixed_replies(tmp_path, llama_build, tiny_model):
    # a profile that does not ask for ignore_eos, serving a synthetic file given with --model
    profile = tmp_path / "plain.toml"
    profile.write_text(
        'description = "a real-model profile"\n'
        '[model]\nrepo = "example/real"\nfile = "real.gguf"\nsha256 = "unknown"\n'
        '[server]\nargs = "-c 1024 --parallel 2 -t 1 --metrics"\n'
        '[request]\nmax_tokens = 8\ntemperature = 0.0\n'
    )
    report = run_local_rig(LocalRigOptions(
        profile=str(profile), runs_root=tmp_path / "runs", backend="cpu", model_path=tiny_model,
        load={"user_steps": [1], "warmup_seconds": 0.3, "measure_seconds": 1.0}))
    manifest = RunDir(report.parent).read_manifest()
    assert manifest.model.synthetic and manifest.model.repo is None
    assert "synthetic random weights (llama architecture" in manifest.model.label
    assert manifest.load.ignore_eos is True
    assert "synthetic random weights" in report.read_text()


@pytest.mark.integration
def test_local_rig_with_one_measured_window_per_step(tmp_path, llama_build):
    from typer.testing import CliRunner

    from core.errors import UsageError
    from rigbench.cli import app

    runner = CliRunner()
    bad = runner.invoke(app, ["local", "--steps", "1,2", "--measure", "1,2,3", "--runs-dir", str(tmp_path)])
    assert isinstance(bad.exception, UsageError)  # the console script prints it as one line, exit 2
    assert str(bad.exception).startswith("--measure: 3 measured windows for 2 user steps")
    assert not any(tmp_path.iterdir())  # refused before anything was built, served or written

    done = runner.invoke(app, ["local", "--steps", "1,2", "--warmup", "0.3", "--measure", "1,2.5",
                               "--backend", "cpu", "--runs-dir", str(tmp_path)])
    assert done.exit_code == 0, done.output
    run = RunDir(next(tmp_path.iterdir()))
    manifest = run.read_manifest()
    assert manifest.load.measure_seconds == [1.0, 2.5]
    assert [round(s.measure_end - s.measure_start, 2) for s in manifest.steps] == [1.0, 2.5]
    assert "measure 1,2.5 s per step" in (run.path / "report.md").read_text()


def test_a_server_that_fails_once_the_run_exists_fails_the_run_with_exit_1(tmp_path, llama_build):
    """Refused before anything exists is exit 2; a run folder that was made and failed is exit 1."""
    from core.errors import RunIncomplete
    from rigbench.local_rig import LocalRigOptions, run_local_rig

    options = LocalRigOptions(profile="tiny", backend="cpu", runs_root=tmp_path,
                              server_overrides=["--no-such-llama-flag"],
                              load={"user_steps": [1], "warmup_seconds": 0.3, "measure_seconds": 1.0})
    with pytest.raises(RunIncomplete, match="run failed: ") as raised:
        run_local_rig(options)
    assert raised.value.exit_code == 1
    run = RunDir(next(tmp_path.iterdir()))
    assert run.read_manifest().status == "failed"


@pytest.mark.integration
def test_two_replicas_from_one_profile_share_the_load_and_each_record_names_its_replica(tmp_path, llama_build):
    """The tiny profile with [server] replicas = 2: two llama-servers of 2 slots each, the users split between
    them (user i to replica i mod 2), every record naming its replica and each replica its own log."""
    text = (Path(__file__).resolve().parents[2] / "core" / "profiles" / "tiny.toml").read_text()
    profile = tmp_path / "tiny-replicas.toml"
    profile.write_text(text.replace("[server]\n", "[server]\nreplicas = 2\n", 1))
    report = run_local_rig(
        LocalRigOptions(profile=str(profile), runs_root=tmp_path, backend="cpu",
                        load={"user_steps": [1, 4], "warmup_seconds": 0.3, "measure_seconds": 1.5}),
        Console(file=io.StringIO(), width=1000),
    )
    run = RunDir(report.parent)
    manifest = run.read_manifest()
    assert manifest.status == "complete"
    replicas = manifest.server.replicas
    assert [r.index for r in replicas] == [0, 1] and [r.slots for r in replicas] == [2, 2]
    assert replicas[1].url.endswith(f":{int(replicas[0].url.rsplit(':', 1)[1]) + 1}")
    records = [r for r in run.read_records() if not r.interrupted]
    assert {r.replica for r in records if r.users == 1} == {0}
    assert {r.replica for r in records if r.users == 4} == {0, 1}
    assert all((run.path / f"llama-server-{index}.log").stat().st_size > 0 for index in (0, 1))
    section = report.read_text().split("### Replicas\n\n", 1)[1].split("\n### ", 1)[0]
    assert "2 llama-server replicas (0: http://127.0.0.1:" in section and "replica 1: share" in section
