"""A model's header facts (synthetic label, decode bytes) come from one read of its GGUF header, remembered while
the file and the code that reads it are the same: the same facts as a fresh read, without reading it again."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from llamacpp import model_facts as facts_module
from llamacpp.decode_bytes import gguf_decode_bytes
from llamacpp.model_facts import model_facts
from llamacpp.synthetic_models import synthetic_label


@pytest.fixture
def reads(monkeypatch, tmp_path: Path) -> list[Path]:
    """Every header read model_facts makes, with the cache in this test's folder."""
    monkeypatch.setenv("RIGBENCH_CACHE", str(tmp_path / "cache"))
    made: list[Path] = []
    real = facts_module.gguf_reader
    monkeypatch.setattr(facts_module, "gguf_reader", lambda path: made.append(path) or real(path))
    return made


def test_the_header_is_read_once_and_says_what_a_fresh_read_says(tiny_model: Path, reads, monkeypatch) -> None:
    first = model_facts(tiny_model)
    assert first.label == synthetic_label(tiny_model) and first.synthetic
    assert first.decode_bytes == gguf_decode_bytes(tiny_model)
    assert model_facts(tiny_model) == first and len(reads) == 1, "the second sweep of a file reads no header"
    assert model_facts(tiny_model, decode_bytes=False).decode_bytes is None and len(reads) == 1
    monkeypatch.setattr(facts_module, "reader_version", lambda: "changed code")
    assert model_facts(tiny_model) == first and len(reads) == 2, "new reading code reads the file again"


def test_a_rewritten_file_is_read_again_and_a_file_that_is_no_gguf_has_no_header_facts(
        tiny_model: Path, reads, tmp_path: Path) -> None:
    model = tmp_path / "model.gguf"
    model.write_bytes(tiny_model.read_bytes())
    assert model_facts(model).synthetic
    model.write_bytes(b"not a gguf file")
    os.utime(model, ns=(1, 2))
    rewritten = model_facts(model)
    assert (rewritten.synthetic, rewritten.label, rewritten.decode_bytes) == (False, None, None)
    assert len(reads) == 2
