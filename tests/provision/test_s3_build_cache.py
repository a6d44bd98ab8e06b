"""The shared llama.cpp build cache in S3: the build script's key, pack and restore, and the build
step against moto's S3 server and the private sshd rig.

The pinned CPU build is already in the project's cache; no test here compiles. A rig "that has
the build" gets it by restoring a packed archive into its own cache folder, and the one fallback
that would compile (a tampered object) has the compile stood in for by a restore (see
``test_a_tampered_object_is_refused_and_the_step_builds_and_replaces_it``).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import urllib.parse
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber

from core.build_manifest import BuildManifest
from core.errors import ProvisionError
from core.profile import load_profile
from llamacpp import build_script as lb
from llamacpp.build import BUILD_SCRIPT
from provision import build as build_module
from provision.build import build
from provision.build_cache import S3BuildCache
from provision.connection import run
from rigbench.studies.rehearsal.s3 import moto_s3

pytestmark = pytest.mark.integration

BUCKET = "rigbench-build-cache"


@pytest.fixture(scope="module")
def packed(llama_build: BuildManifest, build_cache: str, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The cached CPU build packed once by the script: {"key", "archive", "sha256", "bytes"}."""
    cache = Path(build_cache)
    manifest = json.loads((cache / "builds" / llama_build.key / "build_manifest.json").read_text())
    return lb.pack_build(manifest, cache, tmp_path_factory.mktemp("packed") / "build.tar.gz")


def archive_copy(packed: dict, folder: Path) -> Path:
    """A copy of the packed archive a test may consume (a failed check deletes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy(packed["archive"], folder / "build.tar.gz"))


def seed_cache(packed: dict, cache: Path, tmp_path: Path) -> Path:
    """A cache folder that holds the build, as a rig that built it would."""
    plan = lb.plan_build(backend="cpu")
    lb.restore_build(plan, cache, archive_copy(packed, tmp_path / "seed"), packed["sha256"])
    return cache


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch):
    """The rehearsal's S3 stand-in (moto's server on 127.0.0.1, BUCKET made), boto3 pointed at it by the
    environment alone."""
    for key in ("AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    with moto_s3(BUCKET) as server:
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        yield server.endpoint


@pytest.fixture
def s3(s3_server):
    return boto3.client("s3")


@pytest.fixture
def store(s3) -> S3BuildCache:
    return S3BuildCache(BUCKET)


def put_packed(s3, store: S3BuildCache, packed: dict, body: bytes | None = None) -> None:
    """Store the packed build (or other bytes) under its key, with the packed archive's sha256."""
    data = Path(packed["archive"]).read_bytes() if body is None else body
    s3.put_object(Bucket=BUCKET, Key=store.object_key(packed["key"]), Body=data,
                  Metadata={"sha256": packed["sha256"]})


def stored(s3, store: S3BuildCache, key: str) -> tuple[str, str]:
    """(sha256 metadata, sha256 of the body) of the stored object."""
    head = s3.head_object(Bucket=BUCKET, Key=store.object_key(key))
    body = s3.get_object(Bucket=BUCKET, Key=store.object_key(key))["Body"].read()
    return head["Metadata"].get("sha256", ""), hashlib.sha256(body).hexdigest()


def step(rig, rig_paths, cache: Path, store: S3BuildCache) -> BuildManifest:
    return build(rig, load_profile("tiny"), rig_paths, build_script=BUILD_SCRIPT, cache=str(cache), backend="cpu",
                 cache_store=store)


# ---------------------------------------------------------------- the build script


def test_print_key_is_the_key_of_the_cached_build_and_fetches_nothing(llama_build, tmp_path):
    cache = tmp_path / "cache"
    result = subprocess.run(["python3", str(BUILD_SCRIPT), "--cache", str(cache), "--backend", "cpu", "--print-key"],
                            capture_output=True, text=True, check=True)
    assert result.stdout.strip() == json.dumps({"key": llama_build.key})
    assert not cache.exists()


def test_source_id_needs_no_fetch():
    assert lb.source_id({}) == f"sha256:{lb.DEFAULT_SHA256}"
    assert lb.source_id({"kind": "git", "url": "https://example.invalid/x.git", "commit": "abc123"}) == "git:abc123"


def test_pack_then_restore_elsewhere_rewrites_the_paths_and_is_a_cache_hit(packed, llama_build, tmp_path):
    with tarfile.open(packed["archive"]) as tar:
        names = sorted(tar.getnames())
        inside = json.load(tar.extractfile("build_manifest.json"))
    assert names == sorted(["build_manifest.json", *(f"cmake/bin/{t}" for t in llama_build.targets)])
    assert inside["binaries"] == {t: f"cmake/bin/{t}" for t in llama_build.targets}
    assert packed["bytes"] == Path(packed["archive"]).stat().st_size
    assert packed["sha256"] == lb.file_sha256(Path(packed["archive"]))

    cache = tmp_path / "other-cache"
    seed_cache(packed, cache, tmp_path)
    out = cache / "builds" / llama_build.key
    manifest = lb.build(cache, backend="cpu")
    assert manifest["cached"] is True and manifest["key"] == llama_build.key
    assert manifest["binaries"] == {t: str(out / "cmake" / "bin" / t) for t in llama_build.targets}
    assert not (cache / "sources").exists() and not (cache / "src").exists()  # no source was fetched
    assert not (out / "build.log").exists() and sorted(p.name for p in out.iterdir()) == ["build_manifest.json",
                                                                                          "cmake"]
    version = subprocess.run([manifest["binaries"]["llama-server"], "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and "version" in version.stdout + version.stderr


def test_restore_with_a_wrong_digest_deletes_the_archive_and_leaves_no_build(packed, tmp_path):
    archive = archive_copy(packed, tmp_path / "incoming")
    cache = tmp_path / "cache"
    wrong = "0" * 64
    result = subprocess.run(["python3", str(BUILD_SCRIPT), "--cache", str(cache), "--backend", "cpu",
                             "--restore", str(archive), "--restore-sha256", wrong], capture_output=True, text=True)
    assert result.returncode == 1
    assert str(archive) in result.stderr and packed["sha256"] in result.stderr and wrong in result.stderr
    assert not archive.exists()
    assert not (cache / "builds").exists()


def test_restore_of_another_keys_archive_is_refused(packed, tmp_path):
    other = lb.plan_build(backend="cpu", extra_options=["-DGGML_OPENMP=OFF"])
    with pytest.raises(lb.BuildError, match=rf"holds build {packed['key']}, expected {other.key}"):
        lb.restore_build(other, tmp_path / "cache", archive_copy(packed, tmp_path), packed["sha256"])
    assert list((tmp_path / "cache" / "builds").iterdir()) == []  # the staging folder is gone


@pytest.mark.parametrize("bad_name", ["../escaped", "/etc/escaped"])
def test_restore_refuses_members_outside_the_build_folder(tmp_path, bad_name):
    plan = lb.plan_build(backend="cpu")
    archive = tmp_path / "evil.tar.gz"
    manifest = json.dumps({"key": plan.key, "binaries": {}}).encode()
    with tarfile.open(archive, "w:gz") as tar:
        for name, data in (("build_manifest.json", manifest), (bad_name, b"x")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(lb.BuildError, match="a path outside the build folder; refused"):
        lb.restore_build(plan, tmp_path / "cache", archive, lb.file_sha256(archive))
    assert not (tmp_path / "escaped").exists()
    assert list((tmp_path / "cache" / "builds").iterdir()) == []


# ---------------------------------------------------------------- the S3 store


def test_object_key_uri_and_a_signed_metadata_header(store):
    key = "0123456789abcdef"
    assert store.object_key(key) == "llama.cpp/builds/0123456789abcdef.tar.gz"
    assert store.uri(key) == f"s3://{BUCKET}/llama.cpp/builds/0123456789abcdef.tar.gz"
    query = urllib.parse.parse_qs(urllib.parse.urlparse(store.upload_url(key, "ab" * 32)).query)
    assert "x-amz-meta-sha256" in query["X-Amz-SignedHeaders"][0].split(";")
    assert query["X-Amz-Expires"] == ["3600"]
    assert store.lookup(key) is None


def test_an_object_without_sha256_metadata_counts_as_absent(s3, store, capsys):
    s3.put_object(Bucket=BUCKET, Key=store.object_key("0123456789abcdef"), Body=b"old")
    assert store.lookup("0123456789abcdef") is None
    assert "has no sha256 metadata" in capsys.readouterr().out


def test_a_missing_bucket_is_named(s3_server, rig, rig_paths, tmp_path):
    missing = S3BuildCache("no-such-rigbench-bucket")
    with pytest.raises(ProvisionError, match="S3 bucket no-such-rigbench-bucket does not exist"):
        missing.lookup("0123456789abcdef")
    with pytest.raises(ProvisionError, match=r"^build: build cache: S3 bucket no-such-rigbench-bucket does not exist"):
        step(rig, rig_paths, tmp_path / "cache", missing)


def test_denied_access_is_named():
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="y")
    with Stubber(client) as stub:
        stub.add_client_error("head_object", service_error_code="403", http_status_code=403)
        with pytest.raises(ProvisionError, match=r"S3 bucket locked-bucket: access denied \(403 on HeadObject"):
            S3BuildCache("locked-bucket", client).lookup("0123456789abcdef")


# ---------------------------------------------------------------- the build step with the store


def test_a_rig_that_has_the_build_uploads_it_and_the_next_rig_restores_it(rig, rig_paths, llama_build, packed, s3,
                                                                          store, tmp_path, capsys):
    cache = seed_cache(packed, tmp_path / "rig-cache", tmp_path)
    manifest = step(rig, rig_paths, cache, store)
    uri = store.uri(llama_build.key)
    assert manifest.key == llama_build.key and manifest.cached
    assert (manifest.uploaded_to, manifest.restored_from) == (uri, None)
    metadata, body = stored(s3, store, llama_build.key)
    assert metadata == body  # the sha256 metadata is the uploaded archive's digest
    kept = BuildManifest.parse(Path(rig_paths.build_manifest).read_text(), "kept")
    assert kept.uploaded_to == uri
    out = capsys.readouterr().out
    assert f"on the rig, not in {uri}; uploading it" in out and f"uploaded build {llama_build.key} to {uri}" in out
    assert not (cache / "transfer" / f"{llama_build.key}.tar.gz").exists()
    assert manifest.pack_seconds > 0 and manifest.upload_seconds > 0
    assert (manifest.restore_seconds, manifest.compile_seconds) == (None, None)  # reused, not compiled
    assert (kept.pack_seconds, kept.upload_seconds) == (manifest.pack_seconds, manifest.upload_seconds)

    fresh = step(rig, rig_paths, tmp_path / "fresh-rig-cache", store)  # the next rig restores what this one sent
    assert (fresh.restored_from, fresh.uploaded_to) == (uri, None)
    assert fresh.restore_seconds > 0
    assert (fresh.pack_seconds, fresh.upload_seconds, fresh.compile_seconds) == (None, None, None)
    assert f"restored {llama_build.key} in" in capsys.readouterr().out

    again = step(rig, rig_paths, cache, store)  # now both have it: nothing moves
    assert (again.uploaded_to, again.restored_from) == (None, None)
    assert (again.restore_seconds, again.pack_seconds, again.upload_seconds) == (None, None, None)
    assert "nothing to transfer" in capsys.readouterr().out


def test_a_rig_with_an_empty_cache_restores_from_s3(rig, rig_paths, llama_build, packed, s3, store, tmp_path,
                                                     capsys):
    put_packed(s3, store, packed)
    cache = tmp_path / "empty-cache"
    manifest = step(rig, rig_paths, cache, store)
    uri = store.uri(llama_build.key)
    out = cache / "builds" / llama_build.key
    assert manifest.cached and (manifest.restored_from, manifest.uploaded_to) == (uri, None)
    assert manifest.binary("llama-server") == str(out / "cmake" / "bin" / "llama-server")
    version = run(rig, f"{manifest.binary('llama-server')} --version", warn=True)
    assert version.ok and "version" in version.stdout + version.stderr
    assert not (out / "build.log").exists() and not (out / "cmake" / "CMakeCache.txt").exists()  # no compile
    assert not (cache / "sources").exists()  # nor a fetched source
    assert not (cache / "transfer" / f"{llama_build.key}.tar.gz").exists()
    assert BuildManifest.parse(Path(rig_paths.build_manifest).read_text(), "kept").restored_from == uri
    assert f"restoring from {uri} instead of compiling" in capsys.readouterr().out


def test_a_tampered_object_is_refused_and_the_step_builds_and_replaces_it(rig, rig_paths, llama_build, packed, s3,
                                                                          store, tmp_path, monkeypatch, capsys):
    """The refusal is the script's and the rig's real one; the compile that follows it is stood in
    for by restoring the good archive (a real one would take minutes), so what is checked is the
    step's decision: warn naming the URI, build, and replace the bad object."""
    put_packed(s3, store, packed, body=b"not the packed build")
    cache = tmp_path / "empty-cache"
    out = cache / "builds" / llama_build.key
    real_restore = build_module.restore_from_store
    outcome = {}

    def restore_then_stand_in_for_the_compile(*args, **kwargs):
        outcome["restored"] = real_restore(*args, **kwargs)
        outcome["build_folder_after_refusal"] = out.exists()
        seed_cache(packed, cache, tmp_path)
        return outcome["restored"]

    monkeypatch.setattr(build_module, "restore_from_store", restore_then_stand_in_for_the_compile)
    manifest = step(rig, rig_paths, cache, store)
    uri = store.uri(llama_build.key)
    assert outcome == {"restored": None, "build_folder_after_refusal": False}
    printed = capsys.readouterr().out
    assert f"warning: could not restore {uri} on the rig" in printed and "building instead" in printed
    assert "expected " + packed["sha256"] in printed
    assert (manifest.restored_from, manifest.uploaded_to) == (None, uri)
    metadata, body = stored(s3, store, llama_build.key)
    assert metadata == body  # the good archive replaced the tampered one
