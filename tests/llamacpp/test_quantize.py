"""llama-quantize run the one way every caller uses: a part file renamed only on success, its output kept."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from gguf import GGUFReader

from core.errors import LlamaCppError
from llamacpp.quantize import quantize_file
from llamacpp.synthetic_models import write_synthetic_model

# Stands in for llama-quantize: prints its arguments, then writes its output file (the second
# argument after the options) or fails after writing part of it, as the real one can.
FAKE_QUANTIZE = """#!/bin/sh
echo "args: $*"
echo "to stderr" >&2
[ "$1" = "--allow-requantize" ] && shift
if [ "$3" = "BROKEN" ]; then printf 'half' > "$2"; echo "main: failed to quantize model"; exit 1; fi
cp "$1" "$2"
"""


def fake_quantize(tmp_path: Path) -> Path:
    binary = tmp_path / "llama-quantize"
    binary.write_text(FAKE_QUANTIZE)
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_the_target_appears_only_when_llama_quantize_succeeded_and_its_output_is_logged(tmp_path: Path) -> None:
    binary, source = fake_quantize(tmp_path), tmp_path / "model-f16.gguf"
    source.write_bytes(b"GGUF weights")
    target, log = tmp_path / "model-q4_0.gguf", tmp_path / "quantize.log"
    seconds = quantize_file(binary, source, target, "Q4_0", allow_requantize=True, threads=2, log_path=log)
    assert target.read_bytes() == b"GGUF weights" and seconds >= 0
    text = log.read_text()
    assert "args: --allow-requantize" in text and text.rstrip().endswith("to stderr")  # stdout then stderr
    assert " Q4_0 2" in text and ".part " in text  # written under a part name, then renamed
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(
        ["llama-quantize", "model-f16.gguf", "model-q4_0.gguf", "quantize.log"])


def test_a_failure_leaves_no_file_a_later_run_would_take_as_done_and_says_what_llama_quantize_said(
        tmp_path: Path) -> None:
    binary, source = fake_quantize(tmp_path), tmp_path / "model-f16.gguf"
    source.write_bytes(b"GGUF weights")
    target = tmp_path / "model-q4_0.gguf"
    with pytest.raises(LlamaCppError, match="llama-quantize BROKEN of model-f16.gguf exited 1") as raised:
        quantize_file(binary, source, target, "BROKEN")
    assert "main: failed to quantize model" in str(raised.value)
    assert not target.exists() and not list(tmp_path.glob("*.part"))


@pytest.mark.integration
def test_the_pinned_llama_quantize_makes_a_q4_0_file(llama_build, tmp_path: Path) -> None:
    source, target = write_synthetic_model(tmp_path / "tiny-f32.gguf", preset="tiny"), tmp_path / "tiny-q4_0.gguf"
    quantize_file(llama_build.binary("llama-quantize"), source, target, "Q4_0", threads=2)
    types = {t.tensor_type.name for t in GGUFReader(str(target)).tensors}
    assert "Q4_0" in types and target.stat().st_size < source.stat().st_size
