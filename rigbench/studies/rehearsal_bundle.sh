#!/usr/bin/env bash
# An OpenSSH server for a machine that has none and reaches no package registry: the rehearsal
# (`rigbench study rehearsal`) drives the real provision steps over SSH against 127.0.0.1, and the
# GPU machine it runs on has no sshd. Run here (Debian, with apt): the .deb files of
# openssh-server, openssh-sftp-server and every shared library the unpacked sshd links, except
# glibc (libc6), go to DEST, and each is unpacked with `dpkg -x` into DEST/tree. The tree then runs
# with LD_LIBRARY_PATH pointing at its lib folders (rigbench/studies/rehearsal/sshd.py does that);
# nothing is installed. Why every library and not only those a bare Ubuntu lacks: the tree's
# libraries come first on the path, so sshd gets the versions it was built with, and a newer glibc
# (2.39 on Ubuntu 24.04) runs binaries built for an older one (Debian 12's 2.36).
#
# curl and patch come along, with their libraries: a rig's steps use both (the build cache's transfers,
# the first-token request, the profile's patches), and a bare image may lack them; the GPU machine's
# set-up (real_gemma_device.sh) runs them from the tree, with its libraries, where it has none.
#
# Usage: rigbench/studies/rehearsal_bundle.sh DEST
# A DEST that already holds tree/usr/sbin/sshd is left as it is.
set -euo pipefail
dest=${1:?usage: rehearsal_bundle.sh DEST}
mkdir -p "$dest/debs"
dest=$(cd "$dest" && pwd)
if [ -x "$dest/tree/usr/sbin/sshd" ]; then
    echo "rehearsal bundle: $dest/tree already holds sshd"
    exit 0
fi

apt=(apt-get -q)
if [ "$(id -u)" = 0 ]; then
    apt+=(-o APT::Sandbox::User=root)  # as root, fetch as root: the _apt user may not write to DEST
fi

download() {  # apt-get download into debs/; refresh the package lists once if the mirror lacks a file
    (cd "$dest/debs" && "${apt[@]}" download "$@" >/dev/null) && return 0
    echo "rehearsal bundle: apt-get download failed; running apt-get update and trying again" >&2
    "${apt[@]}" update >/dev/null
    (cd "$dest/debs" && "${apt[@]}" download "$@" >/dev/null)
}

unpack() {
    for deb in "$dest"/debs/*.deb; do dpkg -x "$deb" "$dest/tree.partial"; done
}

rm -rf "$dest/tree.partial"
download openssh-server openssh-sftp-server curl patch
unpack
# The libraries the unpacked programs load, as this machine resolves them, by the package that holds them.
libraries=$(for program in usr/sbin/sshd usr/bin/curl usr/bin/patch; do
    ldd "$dest/tree.partial/$program" | awk '$2 == "=>" && $3 ~ /^\// {print $3}'
done | sort -u)
packages=$(for library in $libraries; do
    dpkg -S "$(readlink -f "$library")" 2>/dev/null || dpkg -S "$library"
done | cut -d: -f1 | sort -u | grep -vx 'libc6')
# shellcheck disable=SC2086  # one word per package
download $packages
unpack
mv "$dest/tree.partial" "$dest/tree"
count=$(find "$dest/debs" -name '*.deb' | wc -l)
size=$(du -sh "$dest/debs" | cut -f1)
echo "rehearsal bundle: $count debs ($size) unpacked into $dest/tree"
