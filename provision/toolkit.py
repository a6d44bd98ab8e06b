"""Step ``toolkit``: the NVIDIA driver, its CUDA version and nvcc, installing the toolkit when missing.

Build tools (cmake, g++, ninja, ccache, patch, pip) are installed with apt-get when missing. The DLAMI base image
has nvcc; the PyTorch variant has a driver but no nvcc, which is why the
seed installs CUDA 13.1 from NVIDIA's apt repository (``cuda-keyring``). The toolkit must not
be newer than the CUDA version the driver supports, so the package is checked against
``nvidia-smi`` before anything is installed. A machine without an NVIDIA GPU is told so and
takes the CPU path (the build step then builds for the CPU).
"""

from __future__ import annotations

import re

from fabric import Connection
from pydantic import BaseModel

from core.errors import ProvisionError
from provision.connection import privileged, rig_step, run
from provision.defaults import CUDA_PACKAGE

DEFAULT_CUDA_PACKAGE = CUDA_PACKAGE
KEYRING_URL = "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{arch}/cuda-keyring_1.1-1_all.deb"
NVCC_CANDIDATES = ("nvcc", "/usr/local/cuda/bin/nvcc")
INSTALL_TIMEOUT_S = 1800
# (command, Debian package) the build step needs; the DLAMI has most of them.
# (the check that the tool is there, the Debian package that brings it). ccache: a rebuild with
# another patch or flag recompiles only what changed; patch: the profile's patches; pip: the build
# script asks the rig's python3 for pip's default package index
BUILD_TOOLS = (
    ("command -v cmake", "cmake"),
    ("command -v g++", "g++"),
    ("command -v ninja", "ninja-build"),
    ("command -v curl", "curl"),
    ("command -v ccache", "ccache"),
    ("command -v patch", "patch"),
    ("python3 -c 'import pip'", "python3-pip"),
)


class ToolkitReport(BaseModel):
    """What the rig has, for the build step and the run manifest."""

    gpu: str | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    compute_cap: str | None = None
    nvcc: str | None = None
    nvcc_cuda: str | None = None
    installed_now: bool = False
    message: str = ""


def package_cuda_version(package: str) -> tuple[int, int]:
    """``cuda-toolkit-13-1`` -> (13, 1)."""
    match = re.fullmatch(r"cuda-toolkit-(\d+)-(\d+)", package)
    if not match:
        raise ProvisionError(f"toolkit: package {package!r} is not of the form cuda-toolkit-MAJOR-MINOR")
    return int(match.group(1)), int(match.group(2))


def parse_version(text: str) -> tuple[int, int]:
    major, minor = text.split(".")[:2]
    return int(major), int(minor)


def check_package_fits_driver(package: str, driver_cuda: str) -> None:
    """Refuse a toolkit newer than the driver's CUDA: its binaries would not load."""
    if package_cuda_version(package) > parse_version(driver_cuda):
        wanted = "-".join(str(part) for part in parse_version(driver_cuda))
        raise ProvisionError(
            f"toolkit: {package} is newer than the driver supports (CUDA {driver_cuda}); "
            f"pass --cuda-package cuda-toolkit-{wanted} or update the driver"
        )


def keyring_url(os_release_id: str, version_id: str, machine: str) -> str:
    distro = f"{os_release_id}{version_id.replace('.', '')}"
    arch = {"x86_64": "x86_64", "aarch64": "sbsa"}.get(machine, machine)
    return KEYRING_URL.format(distro=distro, arch=arch)


def read_gpu(c: Connection) -> ToolkitReport:
    result = run(c, "nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader", warn=True)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if not result.ok or not lines:
        reason = "nvidia-smi not found" if result.exited == 127 else f"nvidia-smi failed (exit {result.exited})"
        return ToolkitReport(message=f"no NVIDIA GPU on this machine ({reason}): skipping the CUDA toolkit; "
                                     "the build step will build llama.cpp for the CPU")
    return parse_gpu(lines[0], run(c, "nvidia-smi", warn=True).stdout)


def parse_gpu(query_line: str, banner: str) -> ToolkitReport:
    """From ``nvidia-smi --query-gpu=name,driver_version,compute_cap`` and the banner's "CUDA Version"."""
    name, driver, cap = (part.strip() for part in query_line.split(","))
    match = re.search(r"CUDA Version:\s*([\d.]+)", banner)
    return ToolkitReport(gpu=name, driver=driver, compute_cap=cap, driver_cuda=match.group(1) if match else None)


def find_nvcc(c: Connection) -> tuple[str | None, str | None]:
    for candidate in NVCC_CANDIDATES:
        result = run(c, f"{candidate} --version", warn=True)
        if result.ok:
            match = re.search(r"release ([\d.]+)", result.stdout)
            path = run(c, f"command -v {candidate}", warn=True).stdout.strip() or candidate
            return path, match.group(1) if match else None
    return None, None


def install_toolkit(c: Connection, package: str) -> None:
    release = run(c, ". /etc/os-release && echo $ID $VERSION_ID && uname -m").stdout.split()
    url = keyring_url(release[0], release[1], release[2])
    print(f"[toolkit] installing {package} from {url.rsplit('/', 1)[0]}", flush=True)
    steps = [
        f"curl -fsSL -o /tmp/cuda-keyring.deb {url}",
        privileged(c, "dpkg -i /tmp/cuda-keyring.deb"),
        privileged(c, "apt-get update -q"),
        privileged(c, f"env DEBIAN_FRONTEND=noninteractive apt-get install -y -q {package}"),
    ]
    for command in steps:
        run(c, command, timeout=INSTALL_TIMEOUT_S, hide=False)


def ensure_build_tools(c: Connection) -> list[str]:
    """The build step's tools (``BUILD_TOOLS``); apt-get installs the missing ones."""
    missing = [package for check, package in BUILD_TOOLS if not run(c, check, warn=True).ok]
    if missing:
        print(f"[toolkit] installing build tools: {' '.join(missing)}", flush=True)
        run(c, privileged(c, "apt-get update -q"), timeout=INSTALL_TIMEOUT_S, hide=False)
        run(c, privileged(c, f"env DEBIAN_FRONTEND=noninteractive apt-get install -y -q {' '.join(missing)}"),
            timeout=INSTALL_TIMEOUT_S, hide=False)
    return missing


@rig_step("toolkit")
def toolkit(c: Connection, cuda_package: str = DEFAULT_CUDA_PACKAGE, require_gpu: bool = False) -> ToolkitReport:
    """Build tools; the GPU, driver and nvcc; install ``cuda_package`` when nvcc is missing. Idempotent."""
    ensure_build_tools(c)
    report = read_gpu(c)
    if report.gpu is None:
        if require_gpu:
            raise ProvisionError(f"toolkit: {report.message}; expected a GPU instance (check the instance type)")
        print(f"[toolkit] {report.message}", flush=True)
        return report
    report.nvcc, report.nvcc_cuda = find_nvcc(c)
    if report.nvcc is None:
        if report.driver_cuda:
            check_package_fits_driver(cuda_package, report.driver_cuda)
        install_toolkit(c, cuda_package)
        report.nvcc, report.nvcc_cuda = find_nvcc(c)
        if report.nvcc is None:
            raise ProvisionError(f"toolkit: {cuda_package} installed but nvcc is still missing under /usr/local/cuda")
        report.installed_now = True
    report.message = (f"{report.gpu} (sm_{report.compute_cap.replace('.', '') if report.compute_cap else '?'}), "
                      f"driver {report.driver} (CUDA {report.driver_cuda}), nvcc {report.nvcc_cuda} at {report.nvcc}")
    print(f"[toolkit] {report.message}", flush=True)
    return report
