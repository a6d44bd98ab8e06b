"""Copying a rig's folder home over SFTP while the rig may still be writing it (a real sshd on loopback)."""

from __future__ import annotations

import os
from pathlib import Path

from provision.sweep import copy_tree


class RemovedAfterListing:
    """The rig's SFTP, but ``gone`` is removed right after each listing: a sweep finishing between the
    fetch's listing and its copy."""

    def __init__(self, sftp, gone: Path) -> None:
        self.sftp, self.gone = sftp, gone

    def listdir_attr(self, path: str):
        listed = self.sftp.listdir_attr(path)
        self.gone.unlink(missing_ok=True)
        return listed

    def get(self, remote: str, local: str) -> None:
        self.sftp.get(remote, local)


def test_a_file_removed_after_the_listing_is_skipped_and_the_rest_lands_whole(rig, tmp_path: Path) -> None:
    remote = tmp_path / "rig-run"
    remote.mkdir()
    (remote / "manifest.json").write_text('{"status": "complete"}')
    (remote / "locust_failures.csv").write_text("Method,Name\n")
    home = tmp_path / "home"
    copied = copy_tree(RemovedAfterListing(rig.sftp(), remote / "locust_failures.csv"), str(remote), home)
    assert copied == 1
    assert sorted(path.name for path in home.iterdir()) == ["manifest.json"]  # no empty or partial file left


def test_a_file_rewritten_at_the_same_size_is_copied_again(rig, tmp_path: Path) -> None:
    remote = tmp_path / "rig-run"
    remote.mkdir()
    manifest = remote / "manifest.json"
    manifest.write_text('{"status": "running"}')
    os.utime(manifest, (1_000_000_000, 1_000_000_000))
    home = tmp_path / "home"
    assert copy_tree(rig.sftp(), str(remote), home) == 1
    assert copy_tree(rig.sftp(), str(remote), home) == 0  # unchanged: skipped
    manifest.write_text('{"status": "failed!"}')  # the same length, written later
    assert copy_tree(rig.sftp(), str(remote), home) == 1
    assert (home / "manifest.json").read_text() == '{"status": "failed!"}'
