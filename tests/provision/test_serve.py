"""build, download (synthetic), serve, status, logs, bench and stop on the SSH rig, each run twice."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import httpx
import pytest

from core.errors import ProvisionError
from core.network import free_port
from core.profile import load_profile
from llamacpp.build import BUILD_SCRIPT
from provision.build import build
from provision.serve import serve, status, stop
from provision.tunnel import open_tunnel

pytestmark = pytest.mark.integration


def test_build_reuses_the_cache_and_keeps_the_manifest(rig, rig_paths, llama_build, build_cache) -> None:
    profile = load_profile("tiny")
    first = build(rig, profile, rig_paths, build_script=BUILD_SCRIPT, cache=build_cache)
    second = build(rig, profile, rig_paths, build_script=BUILD_SCRIPT, cache=build_cache)
    assert first.cached and second.cached, "the rig build must be a cache hit of the shared CPU build"
    assert first.binaries == llama_build.binaries and first.backend == "cpu"
    kept = json.loads(Path(rig_paths.build_manifest).read_text())
    assert kept["key"] == llama_build.key and "Available devices" in kept["devices"]


def test_a_profiles_patch_goes_to_the_rig_and_one_that_does_not_apply_fails_before_cmake(
        rig, rig_paths, build_cache, tmp_path: Path) -> None:
    bad = tmp_path / "bad.patch"
    bad.write_text("--- a/README.md\n+++ b/README.md\n@@ -1,1 +1,1 @@\n-no such line here\n+a new line\n")
    with pytest.raises(ProvisionError) as error:
        build(rig, load_profile("tiny"), rig_paths, build_script=BUILD_SCRIPT, cache=build_cache, patch_files=[bad])
    assert "patch bad.patch does not apply to llama.cpp sha256:b0a2feb64c6f" in str(error.value)
    assert Path(rig_paths.helper("bad.patch")).read_text() == bad.read_text()


def test_serve_status_logs_stop_twice_each(built_rig, capsys) -> None:
    rig, paths, profile, manifest = built_rig
    port = free_port()
    state = serve(rig, profile, paths, port=port, health_timeout=120)
    assert state.supervisor == "process" and state.host == "127.0.0.1"
    assert state.command[0] == manifest.binary("llama-server")
    timings = state.timings
    assert 0 < timings.health_seconds <= timings.first_token_seconds and timings.replicas == []
    assert json.loads(Path(paths.serve, "serve.json").read_text())["timings"] is None
    pid = Path(paths.serve, "supervisor.pid").read_text().strip()
    again = serve(rig, profile, paths, port=port, health_timeout=120)
    assert again.started_at == state.started_at, "serving the same command twice must not restart it"
    assert again.timings is None, "a serve that started nothing has nothing to time"
    assert Path(paths.serve, "supervisor.pid").read_text().strip() == pid
    assert "already serving" in capsys.readouterr().out

    report = status(rig, paths)
    assert report["service"] == "running" and report["health"]["status"] == 200
    assert report["slots"]["summary"]["total"] == profile.server.parallel_slots
    assert report["gpus"] == [] or report["gpus"] is None

    with open_tunnel(rig, remote_port=port) as local_port:
        reply = httpx.get(f"http://127.0.0.1:{local_port}/health", timeout=10)
    assert reply.status_code == 200

    assert stop(rig, paths) is True
    assert stop(rig, paths) is False
    assert not Path(paths.serve, "supervisor.pid").exists()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0, "llama-server must be gone after stop"
    after = status(rig, paths)
    assert after["service"] == "stopped" and after["health"]["status"] == 0


def test_port_in_use_is_refused(built_rig) -> None:
    rig, paths, profile, _ = built_rig
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        with pytest.raises(ProvisionError, match=rf"serve: port {port} on the rig is already in use"):
            serve(rig, profile, paths, port=port, health_timeout=30)


def test_server_that_cannot_start_fails_with_its_log(built_rig) -> None:
    rig, paths, profile, _ = built_rig
    Path(paths.models, profile.model.local_name).write_bytes(b"GGUF but not really a model")
    with pytest.raises(ProvisionError, match=r"serve: llama-server did not answer /health .*last lines") as caught:
        serve(rig, profile, paths, port=free_port(), health_timeout=60)
    assert "exited" in str(caught.value)
    assert not Path(paths.serve, "supervisor.pid").exists()


def test_public_needs_an_api_key(built_rig) -> None:
    rig, paths, profile, _ = built_rig
    with pytest.raises(ProvisionError, match="serve: --public .* needs --api-key"):
        serve(rig, profile, paths, port=free_port(), public=True)


def test_serve_without_a_model_says_run_download(rig, rig_paths, llama_build, build_cache) -> None:
    profile = load_profile("tiny")
    build(rig, profile, rig_paths, build_script=BUILD_SCRIPT, cache=build_cache)
    with pytest.raises(ProvisionError, match=r"serve: model file .*synthetic-llama-tiny-s0.gguf is missing"):
        serve(rig, profile, rig_paths, port=free_port())


def test_public_serve_requires_the_key_and_keeps_it_out_of_argv(built_rig) -> None:
    rig, paths, profile, _ = built_rig
    port, key = free_port(), "rigbench-test-key-42"
    state = serve(rig, profile, paths, port=port, public=True, api_key=key, health_timeout=120)
    try:
        assert state.host == "0.0.0.0" and key not in " ".join(state.command)
        assert state.timings.first_token_seconds > 0, "the first-token request must carry the key"
        for secret in ("api_key", "api_key_header"):
            assert oct(Path(paths.serve, secret).stat().st_mode & 0o777) == "0o600"
        assert key not in Path(paths.serve, "serve.json").read_text()
        assert key not in Path(paths.serve, "supervise.sh").read_text()
        url = f"http://127.0.0.1:{port}/v1/models"
        assert httpx.get(url, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 200
        # A new key restarts the server: the old key stops working.
        serve(rig, profile, paths, port=port, public=True, api_key="rotated-key", health_timeout=120)
        assert httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=10).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer rotated-key"}, timeout=10).status_code == 200
    finally:
        stop(rig, paths)


def test_replicas_are_timed_each_and_as_a_whole(built_rig, replica_ports, tmp_path: Path) -> None:
    rig, paths, _, _ = built_rig
    profile_file = tmp_path / "tiny-x2.toml"
    profile_file.write_text('[model.synthetic]\narchitecture = "llama"\npreset = "tiny"\nseed = 0\n\n'
                            '[server]\nargs = "-c 4096 --parallel 4 -kvu"\nreplicas = 2\n')
    base = replica_ports.free_ports(2)
    try:
        timings = serve(rig, load_profile(profile_file), paths, port=base, health_timeout=120).timings
    finally:
        stop(rig, paths)
    assert [(each.index, each.port) for each in timings.replicas] == [(0, base), (1, base + 1)]
    for each in timings.replicas:
        assert 0 < each.health_seconds <= each.first_token_seconds
    assert timings.health_seconds == max(each.health_seconds for each in timings.replicas)
    assert timings.first_token_seconds == max(each.first_token_seconds for each in timings.replicas)
