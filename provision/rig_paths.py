"""Where things live on a rig: everything under the NVMe work folder, which is wiped on stop."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_WORK = "/opt/dlami/nvme"


@dataclass(frozen=True)
class RigPaths:
    """Where things live on the rig, all under the NVMe work folder (wiped on stop)."""

    work: str = DEFAULT_WORK

    @property
    def root(self) -> str:
        return f"{self.work.rstrip('/')}/rigbench"

    @property
    def bin(self) -> str:
        return f"{self.root}/bin"

    @property
    def cache(self) -> str:
        return f"{self.root}/cache"

    @property
    def models(self) -> str:
        return f"{self.root}/models"

    @property
    def known_digests(self) -> str:
        return f"{self.models}/known_digests.json"

    @property
    def serve(self) -> str:
        return f"{self.root}/serve"

    @property
    def results(self) -> str:
        return f"{self.root}/results"

    @property
    def runs(self) -> str:
        return f"{self.results}/runs"

    @property
    def spot_marker(self) -> str:
        """Where the spot watcher (infra's user data) writes the two-minute notice: the rig's sweep watches it
        (``--interruption-marker``), whatever the work folder is."""
        return f"{self.root}/spot-interruption.json"

    @property
    def build_manifest(self) -> str:
        return f"{self.root}/build_manifest.json"

    def helper(self, name: str) -> str:
        return f"{self.bin}/{name}"
