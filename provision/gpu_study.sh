#!/usr/bin/env bash
# One GPU study in one command (issue 7): build for this card, write Gemma 4-shaped synthetic
# models and drafters, quantize to Q4_0, measure llama-bench's ceiling, then run rigbench
# autotune (serving flags at 1 and 64 users) on the E2B model.
# Usage: provision/gpu_study.sh OUTDIR [PRESETS] [TRIAL...]
#   PRESETS: comma list of synthetic_gemma4 presets (default e2b,e4b; tiny-gemma4 for a CPU dry run)
#   TRIAL:   NAME=FLAGS for rigbench autotune (default: its built-in set)
# Env: RIGBENCH_CACHE (build/model cache), BACKEND (auto|cpu|cuda), MEASURE (s per step), USERS.
set -euo pipefail
out=${1:?usage: gpu_study.sh OUTDIR [PRESETS] [TRIAL...]}
presets=${2:-e2b,e4b}
shift $(( $# >= 2 ? 2 : $# ))
export RIGBENCH_CACHE=${RIGBENCH_CACHE:-$HOME/.cache/rigbench}
backend=${BACKEND:-auto}
mkdir -p "$out" "$RIGBENCH_CACHE/models"
models=$RIGBENCH_CACHE/models
log() { echo "[$(date -u +%H:%M:%S)] $*"; }

log build
python3 provision/llamacpp_build.py --backend "$backend" > "$out/build_manifest.json" 2> "$out/build.log"
bin=$(python3 -c "import json,sys; m=json.load(open(sys.argv[1])); print(m['binaries']['llama-server'].rsplit('/',1)[0])" "$out/build_manifest.json")
"$bin/llama-server" --list-devices > "$out/list_devices.txt" 2>&1 || true
python3 -c "import gguf" 2>/dev/null || export PYTHONPATH="$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['source_tree'])" "$out/build_manifest.json")/gguf-py:${PYTHONPATH:-}"

for preset in ${presets//,/ }; do
  if [ ! -s "$models/$preset-q4_0.gguf" ]; then
    log "write $preset"
    python3 provision/synthetic_gemma4.py --preset "$preset" --out "$models/$preset-f16.gguf" \
      --drafter "$models/$preset-assistant-f16.gguf" --favour "${FAVOUR:-0}" | tee -a "$out/models.txt"
    for name in "$preset" "$preset-assistant"; do
      log "quantize $name"
      "$bin/llama-quantize" "$models/$name-f16.gguf" "$models/$name-q4_0.gguf" Q4_0 > "$out/quantize-$name.log" 2>&1
      rm -f "$models/$name-f16.gguf"
    done
  fi
  ls -l "$models/$preset-q4_0.gguf" "$models/$preset-assistant-q4_0.gguf" | tee -a "$out/models.txt"
  log "llama-bench $preset"
  python3 - "$bin/llama-bench" "$models/$preset-q4_0.gguf" > "$out/bench-$preset.json" <<'PY' || echo '{"summary": {}}' > "$out/bench-$preset.json"
import json, sys
from provision.llama_bench import bench_args, run_llama_bench
from rigbench.profile import load_profile
report = run_llama_bench(sys.argv[1], sys.argv[2], bench_args(load_profile("gemma4-e2b")))
print(json.dumps(report, indent=1))
PY
  python3 -c "import json,sys; print(sys.argv[2], json.load(open(sys.argv[1]))['summary'])" "$out/bench-$preset.json" "$preset"
done

first=${presets%%,*}
tg=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['summary'].get('tg128', 0))" "$out/bench-$first.json")
trials=()
for t in "$@"; do trials+=(--trial "$t"); done
log "autotune $first (tg128 $tg)"
python3 -c "from rigbench.cli import main; main()" autotune -p gemma4-e2b --model "$models/$first-q4_0.gguf" --no-drafter \
  --users "${USERS:-1,64}" --warmup 2 --measure "${MEASURE:-60}" --bench-tg "$tg" --out "$out/autotune" \
  --processes "${PROCESSES:-1}" --backend "$backend" "${trials[@]}" 2>&1 | grep -v "━" | tail -20
log done
