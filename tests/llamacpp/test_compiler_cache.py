"""The compiler cache in the build script, with real cmake, ninja and ccache on a small C++ project
standing in for the llama.cpp tree: a second build that differs by one patch recompiles only the
patched file, the manifest says so, and two processes asking for one build share it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from core.build_manifest import BuildManifest
from llamacpp import build_script as lb

FILES = ("main.cpp", "pick.cpp", "parse.cpp", "print.cpp")


def small_project(root: Path) -> Path:
    tree = root / "src" / "mini" / "llama.cpp"
    tree.mkdir(parents=True)
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(mini CXX)\n"
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        f"add_executable(llama-server {' '.join(FILES)})\n"
    )
    (tree / "main.cpp").write_text("int pick(); int parse(); int print();\n"
                                   "int main() { return pick() + parse() + print(); }\n")
    for name in FILES[1:]:
        (tree / name).write_text(f"int {name[:-4]}() {{\n    return 0;\n}}\n")
    return tree


def patch_for(root: Path) -> Path:
    patch = root / "pick-one.patch"
    patch.write_text("--- a/pick.cpp\n+++ b/pick.cpp\n@@ -1,3 +1,3 @@\n"
                     " int pick() {\n-    return 0;\n+    return 1;\n }\n")
    return patch


@pytest.fixture()
def mini(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert shutil.which("ccache"), "ccache is missing: `make build-tools` installs it"
    tree = small_project(tmp_path)
    monkeypatch.setattr(lb, "fetch_source", lambda source, cache: tree)
    return tmp_path


def test_a_build_that_differs_by_one_patch_recompiles_only_the_patched_file(mini: Path) -> None:
    cache = mini / "cache"
    first = lb.build(cache, {"sha256": "mini"}, backend="cpu", targets=["llama-server"])
    assert first["compiler_cache"]["misses"] == len(FILES) and first["compiler_cache"]["hits"] == 0
    assert first["compiler_cache"]["folder"] == str((cache / "ccache").resolve())
    assert first["compiler_cache"]["tool"].startswith("ccache ")
    second = lb.build(cache, {"sha256": "mini"}, backend="cpu", targets=["llama-server"], patches=[patch_for(mini)])
    assert second["key"] != first["key"]
    stats = BuildManifest.parse(second, "second build").compiler_cache
    assert stats is not None and (stats.hits, stats.misses) == (len(FILES) - 1, 1)
    assert stats.hit_rate == pytest.approx((len(FILES) - 1) / len(FILES), abs=1e-4)
    assert subprocess.run([second["binaries"]["llama-server"]]).returncode == 1, "the patched binary runs patched"
    assert subprocess.run([first["binaries"]["llama-server"]]).returncode == 0
    assert Path(second["source_tree"]) == cache / "builds" / second["key"] / "llama.cpp"


def test_without_the_cache_the_build_compiles_plainly_and_says_so(mini: Path, monkeypatch) -> None:
    off = lb.build(mini / "off", {"sha256": "mini"}, backend="cpu", targets=["llama-server"], compiler_cache=False)
    assert off["compiler_cache"] is None and not (mini / "off" / "ccache").exists()
    assert "COMPILER_LAUNCHER" not in (mini / "off" / "builds" / off["key"] / "cmake" / "CMakeCache.txt").read_text()
    monkeypatch.setattr(lb.shutil, "which", lambda name: None if name == "ccache" else shutil.which(name))
    assert lb.find_compiler_cache(mini, mini / "out") is None


def test_unity_sources_are_made_relocatable_only_where_cmake_can(mini: Path, monkeypatch) -> None:
    cache = lb.CompilerCache("/usr/bin/ccache", "4.7.5", mini / "ccache", mini / "builds", mini / "log", False)
    assert cache.cmake_options("cpu") == ["-DCMAKE_C_COMPILER_LAUNCHER=/usr/bin/ccache",
                                          "-DCMAKE_CXX_COMPILER_LAUNCHER=/usr/bin/ccache"]
    relocatable = lb.CompilerCache("/usr/bin/ccache", "4.7.5", mini / "ccache", mini / "builds", mini / "log", True)
    assert relocatable.cmake_options("cuda")[2:] == ["-DCMAKE_CUDA_COMPILER_LAUNCHER=/usr/bin/ccache",
                                                     "-DCMAKE_UNITY_BUILD_RELOCATABLE=ON"]
    for found, expected in (("3.25.1", False), ("3.27.0", True), ("4.1.2", True), (None, False)):
        monkeypatch.setattr(lb, "tool_version", lambda executable, found=found: found)
        assert lb.cmake_at_least((3, 27)) is expected


def test_the_stats_log_counts_hits_and_misses_per_compile(tmp_path: Path) -> None:
    log = tmp_path / "stats.log"
    log.write_text("# a.c\ncache_miss\ndirect_cache_miss\n# b.c\ndirect_cache_hit\nlocal_storage_hit\n"
                   "# c.c\npreprocessed_cache_hit\n# d.c\ncompiler_check_failed\n")
    cache = lb.CompilerCache("ccache", "4.7.5", tmp_path / "ccache", tmp_path, log, False)
    assert cache.summary() == {"tool": "ccache 4.7.5", "folder": str(tmp_path / "ccache"), "hits": 2, "misses": 1,
                               "hit_rate": 0.6667}
    log.unlink()
    assert cache.summary()["hit_rate"] is None


def test_two_processes_asking_for_one_build_share_it(mini: Path) -> None:
    tree = mini / "src" / "mini" / "llama.cpp"
    cache = mini / "cache"
    # the standalone script, run twice at once, with the small project as a git-free "source" already in place
    script = (f"import sys; sys.path.insert(0, {str(Path(lb.__file__).parent)!r}); import build_script as lb; "
              f"lb.fetch_source = lambda source, cache: __import__('pathlib').Path({str(tree)!r}); "
              "sys.exit(lb.main(sys.argv[1:]))")
    command = [sys.executable, "-c", script, "--cache", str(cache), "--backend", "cpu", "--target", "llama-server",
               "--source", json.dumps({"sha256": "mini"})]
    runs = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(2)]
    manifests = [json.loads(run.communicate(timeout=300)[0]) for run in runs]
    assert all(run.returncode == 0 for run in runs)
    assert sorted(manifest["cached"] for manifest in manifests) == [False, True], "one compiled, one waited for it"
    assert manifests[0]["key"] == manifests[1]["key"]
    log = (cache / "builds" / manifests[0]["key"] / "build.log").read_text()
    assert log.count("Configuring done") == 1
