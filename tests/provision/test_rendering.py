"""Pure pieces of the steps: the systemd unit, the restart loop, CUDA package choice, build output."""

from __future__ import annotations

import json
import shlex

import pytest

from core.errors import ProvisionError
from core.profile import load_profile
from provision.build import parse_manifest
from provision.rig_paths import RigPaths
from provision.serve import render_supervisor, render_unit, server_command, systemd_quote
from provision.toolkit import check_package_fits_driver, keyring_url, package_cuda_version, parse_gpu


def test_unit_serves_the_profile_on_loopback_with_restart_and_one_log() -> None:
    profile = load_profile("gemma4-e2b")
    paths = RigPaths()
    command = server_command(profile, "/opt/dlami/nvme/rigbench/cache/builds/k/cmake/bin/llama-server", paths,
                             "127.0.0.1", 8080, None)
    unit = render_unit(command, "ubuntu", paths.serve, f"{paths.serve}/llama-server.log", "rigbench llama-server")
    lines = unit.splitlines()
    exec_start = next(line for line in lines if line.startswith("ExecStart="))
    assert exec_start.startswith('ExecStart="/opt/dlami/nvme/rigbench/cache/builds/k/cmake/bin/llama-server" "-m" '
                                 '"/opt/dlami/nvme/rigbench/models/gemma-4-E2B-it-q4_0-exact.gguf" "-md" ')
    assert exec_start.endswith('"--host" "127.0.0.1" "--port" "8080"')
    # systemd reads C escapes inside quotes: the regex's backslash must be doubled to survive.
    assert '"per_layer_token_embd\\\\.weight=CUDA0"' in exec_start
    for expected in ("User=ubuntu", "Restart=on-failure", "WorkingDirectory=/opt/dlami/nvme/rigbench/serve",
                     "StandardOutput=append:/opt/dlami/nvme/rigbench/serve/llama-server.log",
                     "WantedBy=multi-user.target"):
        assert expected in lines
    assert "--api-key" not in unit


def test_api_key_is_passed_as_a_file_never_as_a_value() -> None:
    command = server_command(load_profile("tiny"), "/x/llama-server", RigPaths("/w"), "0.0.0.0", 9000,
                             "/w/rigbench/serve/api_key")
    assert command[-2:] == ["--api-key-file", "/w/rigbench/serve/api_key"] and "--api-key" not in command


def test_systemd_quote_escapes_what_systemd_would_expand() -> None:
    assert systemd_quote('50%$HOME"x\\y') == '"50%%$$HOME\\"x\\\\y"'


def test_supervisor_script_restarts_and_keeps_a_pid_file() -> None:
    script = render_supervisor(["/x/llama-server", "-m", "/m dir/model.gguf"], "/s", "/s/log", "/s/pid")
    assert script.startswith("#!/bin/sh\n") and "echo $$ > /s/pid" in script
    assert f"{shlex.join(['/x/llama-server', '-m', '/m dir/model.gguf'])} >> /s/log 2>&1 &" in script
    assert "while :; do" in script and "sleep 2" in script


def test_cuda_package_must_not_be_newer_than_the_driver() -> None:
    assert package_cuda_version("cuda-toolkit-13-1") == (13, 1)
    check_package_fits_driver("cuda-toolkit-13-1", "13.1")
    check_package_fits_driver("cuda-toolkit-12-8", "13.0")
    with pytest.raises(ProvisionError, match="cuda-toolkit-13-1 is newer than the driver supports .*cuda-toolkit-12-8"):
        check_package_fits_driver("cuda-toolkit-13-1", "12.8")
    with pytest.raises(ProvisionError, match="not of the form cuda-toolkit-MAJOR-MINOR"):
        package_cuda_version("cuda")


def test_keyring_url_follows_nvidia_repository_layout() -> None:
    assert keyring_url("ubuntu", "24.04", "x86_64") == (
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/cuda-keyring_1.1-1_all.deb")
    assert "/ubuntu2204/sbsa/" in keyring_url("ubuntu", "22.04", "aarch64")


BUILD = {"key": "abc", "source": "sha256:x", "source_tree": "/src", "backend": "cpu", "cuda_arch": None,
         "cmake_options": [], "targets": ["llama-server"], "binaries": {"llama-server": "/b/llama-server"},
         "build_seconds": 1.0, "jobs": 2, "machine": "x86_64", "built_at": "2026-12-01T00:00:00Z", "cached": False}


def test_parse_manifest_takes_the_json_after_the_progress_lines() -> None:
    stdout = "[build] configure: cmake ...\n[build] {not json\n" + json.dumps(BUILD, indent=2) + "\n"
    manifest = parse_manifest(stdout)
    assert manifest.key == "abc" and manifest.binary("llama-server") == "/b/llama-server"
    with pytest.raises(ProvisionError, match="printed no manifest"):
        parse_manifest("[build] compile failed\n")
    with pytest.raises(ProvisionError, match="build: the build script's output: backend: "):
        parse_manifest(json.dumps({**BUILD, "backend": "tpu"}, indent=2))


def test_gpu_parsing_on_output_seen_on_an_h200() -> None:
    banner = ("| NVIDIA-SMI 580.159.04             Driver Version: 580.159.04     CUDA Version: 13.0     |\n")
    report = parse_gpu("NVIDIA H200, 580.159.04, 9.0", banner)
    assert (report.gpu, report.driver, report.compute_cap, report.driver_cuda) == (
        "NVIDIA H200", "580.159.04", "9.0", "13.0")
    # That driver's CUDA 13.0 is older than the default package: the step refuses rather than installs.
    with pytest.raises(ProvisionError, match="cuda-toolkit-13-1 is newer .*CUDA 13.0.*cuda-toolkit-13-0"):
        check_package_fits_driver("cuda-toolkit-13-1", report.driver_cuda)


def test_on_demand_rig_takes_the_list_price_from_the_stack() -> None:
    from core.rundir import RigInfo
    from provision.run_metadata import aws_rig

    rig = aws_rig({"instanceType": "g6.2xlarge", "availabilityZone": "us-west-2b", "market": "on-demand",
                   "onDemandUsdPerHour": 0.9776}, RigInfo())
    assert (rig.kind, rig.region, rig.market, rig.price_per_hour) == ("aws", "us-west-2", "on-demand", 0.9776)
    assert rig.price_source.startswith("on-demand list price")


def test_project_archive_holds_the_packages_but_no_caches() -> None:
    import io
    import tarfile

    from provision.sweep import project_archive

    with tarfile.open(fileobj=io.BytesIO(project_archive())) as archive:
        names = archive.getnames()
    assert "rigbench-src/pyproject.toml" in names and "rigbench-src/provision/rig_agent.py" in names
    assert "rigbench-src/loadtest" in names and "rigbench-src/core/profiles/tiny.toml" in names
    assert not [name for name in names if "__pycache__" in name or name.startswith("rigbench-src/runs")]


def test_one_server_keeps_its_names_and_replicas_get_their_own() -> None:
    from provision.serve import ServedReplica, ServeState, Service, services

    paths = RigPaths("/w")
    single = ServeState(profile="p", command=["/b/llama-server"], supervisor="process", port=8080, host="127.0.0.1",
                        log="/w/rigbench/serve/llama-server.log")
    (one,) = services(single, paths)
    assert (one.unit, one.pid_file(paths), one.script(paths), one.log) == (
        "rigbench-llama.service", "/w/rigbench/serve/supervisor.pid", "/w/rigbench/serve/supervise.sh",
        "/w/rigbench/serve/llama-server.log")
    assert services(None, paths) == [Service(None, 8080, [], "/w/rigbench/serve/llama-server.log")]
    replicas = single.model_copy(update={"replicas": [
        ServedReplica(index=i, port=8080 + i, slots=2, command=["x"], log=f"/w/rigbench/serve/llama-server-{i}.log")
        for i in range(2)]})
    second = services(replicas, paths)[1]
    assert (second.unit, second.pid_file(paths), second.script(paths), second.port, second.label) == (
        "rigbench-llama-1.service", "/w/rigbench/serve/supervisor-1.pid", "/w/rigbench/serve/supervise-1.sh", 8081,
        "replica 1")
    assert ServeState.model_validate_json(single.model_dump_json(exclude={"replicas"})).replicas == [], \
        "a rig's serve.json from before replicas still reads"


def test_a_replicas_command_carries_its_gpu_and_cores() -> None:
    from core.replicas import plan_replicas
    from provision.serve import parse_cpu_list, replica_command

    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11] and parse_cpu_list("5") == [5]
    plans = plan_replicas(["-m", "/m.gguf", "-c", "8192", "-np", "8"], 2, 9000, gpus=[0, 1], cores=[0, 1, 2, 3])
    command = replica_command(plans[1], "/b/llama-server", "127.0.0.1", "/k", "/usr/bin/taskset")
    gpu_1 = ["/usr/bin/env", "CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=1"]  # nvidia-smi's index
    assert command == [*gpu_1, "/usr/bin/taskset", "-c", "2,3", "/b/llama-server",
                       "-m", "/m.gguf", "-np", "4", "-c", "4096", "-t", "2", "-tb", "2", "--host", "127.0.0.1",
                       "--port", "9001", "--api-key-file", "/k"]
    unpinned = replica_command(plans[0], "/b/llama-server", "127.0.0.1", None, None)
    assert unpinned[:4] == [*gpu_1[:2], "CUDA_VISIBLE_DEVICES=0", "/b/llama-server"] and "-t" in unpinned, \
        "without taskset the replica still runs its share of threads"
    unit = render_unit(command, "ubuntu", "/s", "/s/llama-server-1.log", "rigbench llama-server (p, replica 1)")
    assert ('ExecStart="/usr/bin/env" "CUDA_DEVICE_ORDER=PCI_BUS_ID" "CUDA_VISIBLE_DEVICES=1" "/usr/bin/taskset" '
            '"-c" "2,3" ') in unit
