"""The source and terms ``core.hub_download`` records beside a hub file's digest: what the hub's model info
says, never more; a stand-in hub on 127.0.0.1 answers it."""

from __future__ import annotations

import hashlib
import io
import json
import os
from pathlib import Path

import pytest

from core import hub_download
from core.hub_download import hub_provenance, hub_terms, recorded_provenance

PAYLOAD = os.urandom(50_000)
DIGEST = hashlib.sha256(PAYLOAD).hexdigest()
COMMIT = "fedcba9876543210fedcba9876543210fedcba98"
REPO, FILE = "acme/model-gguf", "quant/model.gguf"


def info(**fields: object) -> dict:
    return {"id": REPO, "sha": COMMIT, **fields}


@pytest.mark.parametrize(("answer", "terms"), [
    (info(cardData={"license": "gemma"}, tags=["license:gemma"]), "gemma"),
    (info(cardData={"license": "other", "license_name": "llama3", "license_link": "LICENSE"}), "llama3"),
    (info(cardData={"license": ["mit", "apache-2.0"]}), "mit, apache-2.0"),
    (info(cardData={}, tags=["gguf", "license:apache-2.0"]), "apache-2.0"),
    (info(cardData=None, tags=["gguf"]), None),
    (info(), None),
])
def test_the_terms_are_the_licence_the_hub_names_or_none(answer: dict, terms: str | None) -> None:
    assert hub_terms(answer) == terms


def test_the_source_names_the_commit_and_a_listing_must_agree_with_the_bytes() -> None:
    say: list[str] = []
    listed = [{"rfilename": FILE, "lfs": {"sha256": DIGEST, "size": len(PAYLOAD)}}]
    expected = {"source": f"hf:{REPO}@{COMMIT}/{FILE}", "terms": "mit"}
    assert hub_provenance(info(cardData={"license": "mit"}, siblings=listed), REPO, FILE, DIGEST,
                          say.append) == expected
    assert hub_provenance(info(cardData={"license": "mit"}, siblings=[{"rfilename": FILE}]), REPO, FILE, DIGEST,
                          say.append) == expected  # listed without its digest: nothing to check it against
    assert hub_provenance(info(cardData={"license": "mit"}), REPO, FILE, DIGEST, say.append) == expected
    assert say == []
    other = [{"rfilename": FILE, "lfs": {"sha256": "0" * 64}}]
    assert hub_provenance(info(siblings=other), REPO, FILE, DIGEST, say.append) is None
    assert hub_provenance(info(siblings=[{"rfilename": "README.md"}]), REPO, FILE, DIGEST, say.append) is None
    assert hub_provenance({"id": REPO, "cardData": {"license": "mit"}}, REPO, FILE, DIGEST, say.append) is None
    assert [line.split(": ", 1)[1] for line in say] == [
        f"lists {FILE} with sha256 {'0' * 64}, the bytes here have sha256 {DIGEST}; no source or terms recorded",
        f"lists {FILE} with no such file, the bytes here have sha256 {DIGEST}; no source or terms recorded",
        "the hub's model info names no commit; no source or terms recorded",
    ]


def test_recorded_provenance_belongs_to_the_bytes_it_was_recorded_with() -> None:
    digests = {"model.gguf": {"sha256": DIGEST, "source": f"hf:{REPO}@{COMMIT}/{FILE}", "terms": None},
               "old.gguf": {"sha256": DIGEST, "repo": REPO}}
    assert recorded_provenance(digests, "model.gguf", DIGEST) == {"source": f"hf:{REPO}@{COMMIT}/{FILE}",
                                                                  "terms": None}
    assert recorded_provenance(digests, "model.gguf", "0" * 64) == {}
    assert recorded_provenance(digests, "old.gguf", DIGEST) == {}
    assert recorded_provenance(digests, "missing.gguf", DIGEST) == {}


def test_the_script_asks_the_endpoint_it_is_given_with_the_token(fake_hub, monkeypatch, tmp_path: Path,
                                                                 capsys) -> None:
    """As on a rig: HF_ENDPOINT is not in its environment, the token comes on stdin and goes to the hub only."""
    endpoint = os.environ["HF_ENDPOINT"]
    monkeypatch.delenv("HF_ENDPOINT")
    path = fake_hub.add(REPO, FILE, PAYLOAD)
    answer = info(cardData={"license": "apache-2.0"}, siblings=[{"rfilename": FILE, "lfs": {"sha256": DIGEST}}])
    monkeypatch.setattr(fake_hub, "model_info", lambda repo: answer if repo == REPO else None)
    monkeypatch.setattr("sys.stdin", io.StringIO("hf_secret\n"))
    digests = tmp_path / "known_digests.json"
    code = hub_download.main(["--url", endpoint + path, "--dest", str(tmp_path / "model.gguf"), "--digests",
                              str(digests), "--repo", REPO, "--file", FILE, "--endpoint", endpoint, "--token-stdin"])
    assert code == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["source"] == f"hf:{REPO}@{COMMIT}/{FILE}" and outcome["terms"] == "apache-2.0"
    entry = json.loads(digests.read_text())["model.gguf"]
    assert (entry["sha256"], entry["source"], entry["terms"]) == (DIGEST, outcome["source"], "apache-2.0")
    lookup = fake_hub.info_requests[-1]
    assert lookup["path"] == f"/api/models/{REPO}?blobs=true" and lookup["authorization"] == "Bearer hf_secret"
