#!/usr/bin/env bash
# The quality ladder on a lent GPU machine, from a bare checkout: check the real model's sha256,
# build the pinned llama.cpp for this card, and run the same ladder as on any other machine.
#   rigbench/studies/quality_gpu.sh OUT MODEL.gguf QUESTIONS.jsonl [rigbench study ladder options...]
# Needs python3 with what `rigbench study` imports (typer, pydantic, httpx, numpy, pandas, scipy,
# matplotlib, tabulate, psutil); the pinned sdist in $RIGBENCH_CACHE/sources (no package index is
# reachable there); gguf comes from the llama.cpp tree.
set -euo pipefail
out=${1:?usage: quality_gpu.sh OUT MODEL.gguf QUESTIONS.jsonl [options]}; model=$2; questions=$3; shift 3
mkdir -p "$out"; out=$(cd "$out" && pwd); questions=$(cd "$(dirname "$questions")" && pwd)/$(basename "$questions")
cd "$(dirname "$0")/../.."
export RIGBENCH_CACHE=${RIGBENCH_CACHE:-$HOME/.cache/rigbench}
name=$(python3 -c 'from llamacpp.real_model import SMOLLM2; print(SMOLLM2.filename)')
expected=$(python3 -c 'from llamacpp.real_model import SMOLLM2; print(SMOLLM2.sha256)')
found=$(sha256sum "$model" | cut -d' ' -f1)
echo "$(basename "$model"): sha256 $found (expected $expected)" | tee "$out/model_sha256.txt"
[ "$found" = "$expected" ] || { echo "sha256 differs: not the pinned model" >&2; exit 1; }
mkdir -p "$RIGBENCH_CACHE/models"; cp "$model" "$RIGBENCH_CACHE/models/$name"
python3 llamacpp/build_script.py --backend cuda --cache "$RIGBENCH_CACHE" > "$out/build_manifest.json"
tree=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['source_tree'])" "$out/build_manifest.json")
python3 -c "import gguf" 2>/dev/null || export PYTHONPATH="$tree/gguf-py:${PYTHONPATH:-}"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.csv"
python3 -m rigbench study ladder smollm2 --questions "$questions" --out "$out/ladder" --backend cuda "$@"
