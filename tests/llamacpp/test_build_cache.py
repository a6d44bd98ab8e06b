"""The build cache key: everything that changes the binaries changes the key, nothing else does."""

from __future__ import annotations

import json

from llamacpp import build_script as lb


def test_key_is_stable_and_order_insensitive():
    a = lb.build_key("sha256:x", "cpu", None, ["-DA=1", "-DB=2"], ["llama-server", "llama-bench"])
    b = lb.build_key("sha256:x", "cpu", None, ["-DB=2", "-DA=1"], ["llama-bench", "llama-server"])
    assert a == b and len(a) == 16


def test_key_changes_with_each_input():
    base = ("sha256:x", "cuda", "89", ["-DA=1"], ["llama-server"])
    key = lb.build_key(*base)
    assert lb.build_key("sha256:y", *base[1:]) != key
    assert lb.build_key(base[0], "cpu", *base[2:]) != key
    assert lb.build_key(base[0], base[1], "90", *base[3:]) != key
    assert lb.build_key(*base[:3], ["-DA=2"], base[4]) != key
    assert lb.build_key(*base[:4], ["llama-server", "llama-bench"]) != key


def test_cmake_options_for_backends():
    cpu = lb.cmake_options("cpu", None, [])
    assert "-DGGML_CUDA=OFF" in cpu and "-DLLAMA_USE_PREBUILT_UI=OFF" in cpu
    # AMX is compiled out of a native x86-64 build (its path crashes the pinned source on quantized weights)
    amx_off = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    assert (f"-DCMAKE_CXX_FLAGS={amx_off}" in cpu) == (lb.platform.machine().lower() in ("x86_64", "amd64"))
    cuda = lb.cmake_options("cuda", "90", ["-DX=1"])
    assert "-DGGML_CUDA=ON" in cuda and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda and cuda[-1] == "-DX=1"


def test_cached_build_is_returned_without_cmake(tmp_path, monkeypatch):
    """A finished build folder with its manifest and binaries is reused as is."""
    tree = tmp_path / "src" / "llama.cpp"
    tree.mkdir(parents=True)
    monkeypatch.setattr(lb, "fetch_source", lambda source, cache: tree)
    options = lb.cmake_options("cpu", None, [])
    key = lb.build_key("sha256:test", "cpu", None, options, ["llama-server"])
    out = tmp_path / "builds" / key
    (out / "cmake" / "bin").mkdir(parents=True)
    binary = out / "cmake" / "bin" / "llama-server"
    binary.write_text("")
    (out / "build_manifest.json").write_text(json.dumps({"key": key, "binaries": {"llama-server": str(binary)}}))

    def no_cmake(*args, **kwargs):
        raise AssertionError("cmake must not run for a cached build")

    monkeypatch.setattr(lb, "run_step", no_cmake)
    manifest = lb.build(tmp_path, {"sha256": "test"}, backend="cpu", targets=["llama-server"])
    assert manifest["cached"] is True and manifest["key"] == key


def test_sdist_sha256_mismatch_is_refused(tmp_path, monkeypatch):
    """A corrupt download is deleted and the error names the expected digest."""
    import http.server
    import threading

    payload = b"not the sdist"
    listing = {"files": [{"filename": "pkg-1.0.tar.gz", "url": "/files/pkg-1.0.tar.gz"}]}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = json.dumps(listing).encode() if self.path == "/simple/pkg/" else payload
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("RIGBENCH_PYPI_SIMPLE", base + "/simple")
    dest = tmp_path / "x.tar.gz"
    try:
        lb.download_sdist("pkg", "1.0", "0" * 64, dest)
    except lb.BuildError as error:
        assert "expected " + "0" * 64 in str(error)
    else:
        raise AssertionError("mismatch not detected")
    finally:
        server.shutdown()
    assert not dest.exists() and not dest.with_suffix(".part").exists()


def test_a_fresh_build_writes_a_manifest_the_build_model_reads(tmp_path, monkeypatch):
    """The compile path end to end with cmake stood in for: the manifest it writes is valid JSON that
    ``BuildManifest`` accepts, names the fetched source and is a cache hit the second time."""
    from core.build_manifest import BuildManifest

    tree = tmp_path / "src" / "llama.cpp"
    tree.mkdir(parents=True)
    monkeypatch.setattr(lb, "fetch_source", lambda source, cache: tree)
    steps = []

    def fake_cmake(name, command, log, cwd=None, env=None):
        steps.append(name)
        if name == "compile":
            build_dir = lb.Path(command[command.index("--build") + 1])
            (build_dir / "bin").mkdir(parents=True)
            (build_dir / "bin" / "llama-server").write_text("")

    monkeypatch.setattr(lb, "run_step", fake_cmake)
    manifest = lb.build(tmp_path, {"sha256": "fetched"}, backend="cpu", targets=["llama-server"])
    assert steps == ["configure", "compile"] and manifest["cached"] is False
    parsed = BuildManifest.parse((tmp_path / "builds" / manifest["key"] / "build_manifest.json").read_text(), "test")
    assert parsed.source == "sha256:fetched" and parsed.key == manifest["key"]
    assert lb.build(tmp_path, {"sha256": "fetched"}, backend="cpu", targets=["llama-server"])["cached"] is True
