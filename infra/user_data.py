"""The cloud-init user data of a rig: one bash script rendered from the templates beside this file.

The script logic lives in real ``.sh`` files (``templates/``) so it can be linted with ``bash -n``
and run against fakes in tests; this module only fills in the stack's settings and embeds the
two helper scripts (spot watcher, TTL guard) that the set-up script installs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from core.errors import InfraError

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
SETTINGS_PLACEHOLDER = "# @@RIGBENCH_SETTINGS@@"
HELPER_PLACEHOLDERS = {
    "# @@RIGBENCH_SPOT_WATCHER@@": ("spot_watcher.sh", "RIGBENCH_SPOT_WATCHER_EOF"),
    "# @@RIGBENCH_TTL_GUARD@@": ("ttl_guard.sh", "RIGBENCH_TTL_GUARD_EOF"),
}
# EC2 refuses user data above 16 KB (before base64).
USER_DATA_LIMIT_BYTES = 16 * 1024
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_./:-]+$")


@dataclass(frozen=True)
class UserDataSettings:
    """The stack settings the set-up script needs."""

    nvme_path: str
    owner_user: str
    ttl_hours: int
    market: str
    expect_dlami_nvme: bool = True

    def as_shell(self) -> dict[str, str]:
        return {
            "RIGBENCH_NVME_PATH": self.nvme_path,
            "RIGBENCH_OWNER_USER": self.owner_user,
            "RIGBENCH_TTL_HOURS": str(self.ttl_hours),
            "RIGBENCH_MARKET": self.market,
            "RIGBENCH_EXPECT_DLAMI_NVME": "1" if self.expect_dlami_nvme else "0",
            # The DLAMI mounts its volume before user data runs; elsewhere do not wait long for a mount
            # that will never come.
            "RIGBENCH_NVME_WAIT_SECONDS": "300" if self.expect_dlami_nvme else "10",
        }


def template_text(name: str) -> str:
    return (TEMPLATE_DIR / name).read_text(encoding="utf-8")


def render_user_data(settings: UserDataSettings) -> str:
    """The full user-data script for ``settings``."""
    script = template_text("user_data.sh")
    lines = []
    for key, value in settings.as_shell().items():
        if not _SAFE_VALUE.match(value):
            raise InfraError(
                f"user data setting {key}={value!r} has characters a shell would read; expected [A-Za-z0-9_./:-]"
            )
        lines.append(f': "${{{key}:={value}}}"')
    script = _replace_once(script, SETTINGS_PLACEHOLDER, "# settings from the stack config\n" + "\n".join(lines))
    for placeholder, (file_name, delimiter) in HELPER_PLACEHOLDERS.items():
        helper = template_text(file_name).rstrip("\n")
        if delimiter in helper:
            raise InfraError(f"{file_name} contains its own heredoc delimiter {delimiter}; rename one of them")
        script = _replace_once(script, placeholder, helper)
    size = len(script.encode())
    if size > USER_DATA_LIMIT_BYTES:
        raise InfraError(
            f"user data is {size} bytes; EC2 accepts at most {USER_DATA_LIMIT_BYTES}. Shorten the templates."
        )
    return script


def _replace_once(text: str, placeholder: str, replacement: str) -> str:
    if text.count(placeholder) != 1:
        raise InfraError(f"template placeholder {placeholder!r} found {text.count(placeholder)} times; expected once")
    return text.replace(placeholder, replacement)
