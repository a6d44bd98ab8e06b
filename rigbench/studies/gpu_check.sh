#!/usr/bin/env bash
# Check the CUDA path of the build script on a GPU machine, from a bare checkout:
# build the pinned llama.cpp for this card's arch, list devices, and measure llama-bench on
# a synthetic model. Usage: rigbench/studies/gpu_check.sh OUTDIR [PRESET]
# Needs python3 with numpy; gguf comes from the llama.cpp tree itself when not installed.
set -euo pipefail
out=${1:?usage: gpu_check.sh OUTDIR [PRESET]}
preset=${2:-probe-2b}
mkdir -p "$out"
out=$(cd "$out" && pwd)
sdist=${SDIST_DIR:+$(cd "$SDIST_DIR" && pwd)}
cd "$(dirname "$0")/../.."  # the repository root: python3 -c imports this checkout's packages
cache=$(python3 -c 'from core.cache import cache_root; print(cache_root().resolve())')
export RIGBENCH_CACHE=$cache
if [ -n "$sdist" ]; then mkdir -p "$RIGBENCH_CACHE/sources"; cp -n "$sdist"/*.tar.gz "$RIGBENCH_CACHE/sources/"; fi
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv | tee "$out/gpu.csv"
( time python3 llamacpp/build_script.py --backend auto --cache "$RIGBENCH_CACHE" ) > "$out/build_manifest.json" 2> "$out/build.stderr"
tail -3 "$out/build.stderr"
bin=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['binaries']['llama-server'].rsplit('/',1)[0])" "$out/build_manifest.json")
"$bin/llama-server" --list-devices 2>&1 | tee "$out/list_devices.txt"
tree=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['source_tree'])" "$out/build_manifest.json")
python3 -c "import gguf" 2>/dev/null || export PYTHONPATH="$tree/gguf-py:${PYTHONPATH:-}"
models=$RIGBENCH_CACHE/models; mkdir -p "$models"
python3 -c "
from llamacpp.synthetic_models import write_synthetic_model
write_synthetic_model('$models/$preset-f16.gguf', preset='$preset')"
"$bin/llama-quantize" "$models/$preset-f16.gguf" "$models/$preset-q4_0.gguf" Q4_0 > "$out/quantize.log" 2>&1
ls -l "$models/$preset-q4_0.gguf" | tee -a "$out/quantize.log"
"$bin/llama-bench" -m "$models/$preset-q4_0.gguf" -ngl 99 -fa 1 -p 512 -n 128 -o json > "$out/llama_bench.json"
python3 -c "
import json; rows = json.load(open('$out/llama_bench.json'))
for r in rows: print(r['n_prompt'], r['n_gen'], round(r['avg_ts'], 1), 'tok/s')"
