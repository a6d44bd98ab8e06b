"""GSM8K's test split from the Hugging Face hub, as a question file (not committed: fetch it).

The split is one parquet file in the dataset repository; it is read with pyarrow and written
as JSONL of ``id``, ``question``, ``answer`` (the answers keep GSM8K's worked steps and
``#### N``). ``HF_ENDPOINT`` points at a mirror (or a test's local hub), as for the hub's own
tools; ``HF_TOKEN`` is sent when set. The parquet file's sha256 goes into the question file's
sidecar, so every eval of the set names the bytes it asked.
"""

from __future__ import annotations

import hashlib
import io
import os

import httpx
import pyarrow.parquet as parquet

from core.errors import UsageError
from core.rundir.quality import Question

DEFAULT_ENDPOINT = "https://huggingface.co"
DATASET = "openai/gsm8k"
SPLIT_FILE = "main/test-00000-of-00001.parquet"
REVISION = "main"


def split_url(endpoint: str | None = None, revision: str = REVISION) -> str:
    root = (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    return f"{root}/datasets/{DATASET}/resolve/{revision}/{SPLIT_FILE}"


def download_gsm8k(limit: int | None = None, endpoint: str | None = None) -> tuple[list[Question], str]:
    """The test split's questions (the first ``limit`` when given) and a line saying where they came from."""
    url = split_url(endpoint)
    headers = {"Authorization": f"Bearer {os.environ['HF_TOKEN']}"} if os.environ.get("HF_TOKEN") else {}
    try:
        response = httpx.get(url, headers=headers, follow_redirects=True, timeout=httpx.Timeout(30.0, read=300.0))
    except httpx.HTTPError as error:
        raise UsageError(
            f"gsm8k: cannot reach {url} ({type(error).__name__}: {error}); set HF_ENDPOINT to a hub you can reach"
        ) from None
    if response.status_code != 200:
        raise UsageError(
            f"gsm8k: {url} answered HTTP {response.status_code}; set HF_ENDPOINT (and HF_TOKEN) for your hub"
        )
    digest = hashlib.sha256(response.content).hexdigest()
    try:
        table = parquet.read_table(io.BytesIO(response.content))
    except Exception as error:  # pyarrow raises its own types for a file that is not parquet
        raise UsageError(f"gsm8k: {url} is not a parquet file ({error})") from None
    missing = {"question", "answer"} - set(table.column_names)
    if missing:
        raise UsageError(
            f"gsm8k: {url} has no column {', '.join(sorted(missing))} (it has {', '.join(table.column_names)})"
        )
    rows = table.select(["question", "answer"]).to_pylist()
    if limit is not None:
        rows = rows[:limit]
    questions = [
        Question(id=f"gsm8k-test-{index:04d}", question=row["question"], answer=row["answer"])
        for index, row in enumerate(rows)
    ]
    source = f"{DATASET} test split ({len(questions)} of {table.num_rows}), {url}, parquet sha256 {digest}"
    return questions, source
