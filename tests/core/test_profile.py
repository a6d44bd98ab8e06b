"""Profile parsing and its errors: every problem names the file and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ProfileError
from core.profile import available_profiles, load_profile, merge_server_args

GOOD = """
description = "test"
[model]
repo = "org/repo"
file = "m.gguf"
sha256 = "unknown"
[server]
args = "-ngl 99 -c 8192 --parallel 4 -ot 'per_layer_token_embd\\\\.weight=CUDA0'"
[request]
max_tokens = 64
"""


def write(tmp_path: Path, text: str, name: str = "p.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bundled_profiles_load():
    assert {"tiny", "gemma4-e2b", "gemma4-e4b", "gemma4-e2b-many"} <= set(available_profiles())
    e2b = load_profile("gemma4-e2b")
    assert e2b.model.repo == "xbill9/gemma-4-E2B-it-qat-q4_0-exact-gguf"
    assert e2b.model.size_bytes == 3349516256
    assert e2b.model.sha256 == "unknown"
    assert e2b.drafter is not None and e2b.drafter.repo == "xbill9/gemma-4-E2B-it-qat-assistant-q4_0-exact-gguf"
    assert e2b.server.flag_value("-ot") == r"per_layer_token_embd\.weight=CUDA0"
    assert e2b.drafter.args == ["--spec-type", "draft-mtp", "-ngld", "all", "--spec-draft-n-max", "2",
                               "--spec-draft-backend-sampling"]
    assert "--spec-type" not in e2b.server_args("m.gguf", None)
    assert e2b.server_args("m.gguf", "d.gguf")[-len(e2b.drafter.args):] == e2b.drafter.args
    assert e2b.server.flag_value("-c", "--ctx-size") == "131072"
    assert load_profile("gemma4-e2b-many").server.parallel_slots == 64
    assert load_profile("tiny").model.synthetic is not None
    for name in ("gemma3-270m", "gemma3-270m-many"):
        gemma = load_profile(name)
        assert gemma.model.pypi == "gemma3-270m" and gemma.model.local_name == "gemma-3-270m-q4_k_m.gguf"
        assert gemma.server.args[gemma.server.args.index("--chat-template") - 1] == "--no-jinja"
    assert load_profile("gemma3-270m-many").llama_cpp.patches == ["server-lowest-free-slot"]


def test_the_4gpu_profiles_are_the_many_users_line_as_one_replica_per_gpu_or_one_split_server():
    """Both arms serve gemma3-270m-many's model, slots and context, so their tok/s compare with it and with
    each other; the replicas divide evenly over 4 GPUs, the split server is one process over all of them."""
    from core.replicas import plan_replicas

    many = load_profile("gemma3-270m-many")
    replicas, split = load_profile("gemma3-270m-4gpu-replicas"), load_profile("gemma3-270m-4gpu-split")
    for profile in (replicas, split):
        assert profile.model == many.model and profile.request == many.request
        assert profile.llama_cpp == many.llama_cpp
        assert (profile.server.parallel_slots, profile.server.flag_value("-c", "--ctx-size")) == (64, "65536")
    assert (replicas.server.replicas, replicas.server.replica_gpus, replicas.server.args) == (4, "each",
                                                                                              many.server.args)
    plans = plan_replicas(replicas.server.args, replicas.server.replicas, 8080, gpus=[0, 1, 2, 3],
                          placement=replicas.server.replica_gpus, cores=list(range(48)))
    assert [(p.gpu, p.slots, p.port) for p in plans] == [(0, 16, 8080), (1, 16, 8081), (2, 16, 8082), (3, 16, 8083)]
    assert all(p.environment["CUDA_VISIBLE_DEVICES"] == str(p.gpu) and "16384" in p.args for p in plans)
    assert split.server.replicas == 1 and split.server.flag_value("-sm", "--split-mode") == "layer"
    assert [a for a in split.server.args if a not in ("--split-mode", "layer")] == many.server.args


def test_good_profile_and_server_args(tmp_path):
    profile = load_profile(write(tmp_path, GOOD))
    assert profile.name == "p"
    assert profile.server.parallel_slots == 4
    assert profile.request.max_tokens == 64 and profile.request.cache_prompt is False
    args = profile.server_args("/m/model.gguf", "/m/draft.gguf", "127.0.0.1", 8080)
    assert args[:4] == ["-m", "/m/model.gguf", "-md", "/m/draft.gguf"]
    assert args[-4:] == ["--host", "127.0.0.1", "--port", "8080"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (GOOD + "\n[extra]\nx = 1\n", "extra: unknown key"),
        (GOOD.replace("max_tokens = 64", "max_tokens = 'many'"), "request.max_tokens"),
        (GOOD.replace("max_tokens = 64", "max_tokens = 64\nturbo = true"), "request.turbo: unknown key"),
        (GOOD.replace("-c 8192", "-c big"), "server.args: Value error, -c needs an integer, found 'big'"),
        (GOOD.replace("-c 8192", "-c '8192"), "server.args: Value error, cannot parse server line"),
        (GOOD.replace("-ngl 99", "-ngl 99 --port 9000"), "--port is set by rigbench"),
        (GOOD.replace('sha256 = "unknown"', 'sha256 = "abc"'), "model.sha256: Value error, expected 64 hex digits"),
        (GOOD.replace('file = "m.gguf"', ""), "model: Value error, give exactly one of repo and file (the hub)"),
        (GOOD.replace('file = "m.gguf"', 'file = "m.gguf"\npypi = "gemma3-270m"'), "give exactly one of repo"),
        (GOOD.replace("-ngl 99", "-ngl 99 --chat-template gemma"),
         "--chat-template gemma: with jinja on (llama-server's default) this is the template's whole text, so "
         "every prompt would be the word 'gemma'; add --no-jinja"),
        ("[model\nrepo=1", "not valid TOML"),
    ],
)
def test_bad_profiles_name_file_and_field(tmp_path, text, expected):
    path = write(tmp_path, text)
    with pytest.raises(ProfileError) as caught:
        load_profile(path)
    message = str(caught.value)
    assert str(path) in message
    assert expected in message


def test_unknown_profile_lists_bundled():
    with pytest.raises(ProfileError, match="unknown profile 'nope'; bundled profiles: .*tiny"):
        load_profile("nope")
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile("/nonexistent/x.toml")


def test_merge_server_args_replaces_whole_flags():
    base = ["-ngl", "99", "--parallel", "1", "-fa", "1", "--metrics", "--spec-draft-n-max", "2"]
    merged = merge_server_args(base, ["--parallel", "64", "-kvu", "--spec-draft-n-max", "3"])
    assert merged == ["-ngl", "99", "-fa", "1", "--metrics", "--parallel", "64", "-kvu", "--spec-draft-n-max", "3"]
    assert merge_server_args(["--temp", "-1", "-c", "4096"], ["-c", "8192"]) == ["--temp", "-1", "-c", "8192"]


def test_merge_server_args_refuses_reserved_and_bad_values():
    with pytest.raises(ProfileError, match="server argument overrides: args: .*--port is set by rigbench"):
        merge_server_args([], ["--port", "1"])
    with pytest.raises(ProfileError, match="--parallel needs an integer"):
        merge_server_args([], ["--parallel", "many"])
