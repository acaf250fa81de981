"""The engines' dtype: kvcal's choice for its tiny model by the host's bf16 support, and KV bytes that follow it.

The host's CPU flags are injected (``cpu_flags`` in the launch plan), so these hold on any machine: the project's
AMD EPYC hosts have AVX2 only, an AVX-512/AMX host has native bf16.
"""

from __future__ import annotations

import json
import logging

import pytest

from fake_engine import FakeEngine
from kvcal.engines import vllm_launch
from kvcal.engines.dtype import choose_dtype, cpu_flags, kv_dtype_of
from kvcal.engines.tinymodel import ensure_tiny_model
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings

AVX2 = frozenset("fpu sse2 avx fma avx2 bmi2 sha_ni vaes".split())  # the project's AMD EPYC, as /proc/cpuinfo has it
AVX512 = AVX2 | {"avx512f", "avx512bw", "avx512_vnni"}  # no BF16 (Skylake, Ice Lake)
SAPPHIRE = AVX512 | {"avx512_bf16", "amx_bf16", "amx_tile", "amx_int8"}
ZEN4 = AVX512 | {"avx512_bf16"}


@pytest.mark.parametrize("flags, dtype, isa", [
    (SAPPHIRE, "bfloat16", "amx_bf16, avx512_bf16"),
    (ZEN4, "bfloat16", "avx512_bf16"),
    (frozenset({"fp", "asimd", "bf16"}), "bfloat16", "bf16"),  # Arm's Features line
    (AVX2, "float32", "AVX2"),
    (AVX512, "float32", "AVX-512 without BF16"),
])
def test_the_tiny_model_on_cpu_runs_in_bf16_only_where_the_cpu_has_it(flags, dtype, isa):
    choice = choose_dtype([], tiny_model=True, device="cpu", flags=flags)
    assert (choice.dtype, choice.passed, choice.args()) == (dtype, True, ["--dtype", dtype])
    assert isa in choice.reason
    if dtype == "float32":
        assert choice.reason == f"the host has no native bf16 ({isa}): the tiny model runs in float32"


@pytest.mark.parametrize("args, dtype", [
    (["--dtype", "bfloat16"], "bfloat16"), (["--dtype=half"], "half"), (["--enforce-eager", "--dtype", "auto"], "auto"),
])
@pytest.mark.parametrize("flags", [AVX2, SAPPHIRE])
def test_a_users_dtype_is_kept_as_given(args, dtype, flags):
    choice = choose_dtype(args, tiny_model=True, device="cpu", flags=flags)
    assert (choice.dtype, choice.passed, choice.args(), choice.reason) == (
        dtype, False, [], "given in the engine arguments")


@pytest.mark.parametrize("tiny, device, flags", [
    (False, "cpu", AVX2),  # the user's model: vLLM's auto
    (True, "cuda", AVX2),  # GPU engines: unchanged
    (True, "cpu", None),  # flags unreadable (not Linux): unchanged
])
def test_nothing_is_chosen_off_the_tiny_model_on_a_readable_cpu(tiny, device, flags):
    choice = choose_dtype([], tiny_model=tiny, device=device, flags=flags)
    assert (choice.dtype, choice.passed, choice.args()) == (None, False, [])


def test_cpu_flags_come_from_the_first_flags_or_features_line(tmp_path):
    x86 = tmp_path / "x86"
    x86.write_text("processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx2 sha_ni\n\nflags\t\t: other\n")
    arm = tmp_path / "arm"
    arm.write_text("processor\t: 0\nFeatures\t: fp asimd bf16\nCPU implementer\t: 0x41\n")
    assert cpu_flags(x86) == {"fpu", "avx2", "sha_ni"}
    assert cpu_flags(arm) == {"fp", "asimd", "bf16"}
    assert cpu_flags(tmp_path / "missing") is None


@pytest.mark.parametrize("args, kv", [
    ([], None),
    (["--dtype", "float32"], "float32"),
    (["--dtype=bfloat16"], "bfloat16"),
    (["--kv-cache-dtype", "fp8", "--dtype", "float32"], "fp8"),  # the cache dtype wins
    (["--kv-cache-dtype", "auto", "--dtype", "float32"], "float32"),  # auto: the model dtype, which --dtype set
    (["--dtype", "auto"], None),
    (["--kv-cache-dtype=fp8_e5m2"], "fp8_e5m2"),
])
def test_the_kv_dtype_follows_the_cache_dtype_then_the_dtype(args, kv):
    assert kv_dtype_of(args) == kv


def _pair(tmp_path, monkeypatch, flags, *args: str, **settings) -> VllmPair:
    monkeypatch.setattr(vllm_launch, "cpu_flags", lambda: flags)
    return VllmPair(VllmSettings(device="cpu", producer_cpus="0", consumer_cpus="1", cache_dir=tmp_path,
                                 run_dir=tmp_path / "run", engine_args=list(args), **settings))


@pytest.mark.parametrize("flags, args, kv_bytes, kv_dtype", [
    (AVX2, [], 4096, "float32"),  # kvcal's choice: float32 KV, 4 KiB a token
    (SAPPHIRE, [], 2048, "bfloat16"),
    (AVX2, ["--dtype", "bfloat16"], 2048, "bfloat16"),  # the user's dtype
    (SAPPHIRE, ["--dtype=float32"], 4096, "float32"),
    (AVX2, ["--kv-cache-dtype", "fp8"], 1024, "fp8"),  # float32 compute, fp8 KV
    (SAPPHIRE, ["--kv-cache-dtype", "fp8_e5m2"], 1024, "fp8_e5m2"),
    (AVX2, ["--kv-cache-dtype", "int8_per_token_head"], None, "int8_per_token_head"),  # no size known: unchecked
])
def test_kv_bytes_per_token_follow_the_dtype_the_engines_run(tmp_path, monkeypatch, flags, args, kv_bytes, kv_dtype):
    pair = _pair(tmp_path, monkeypatch, flags, *args)
    assert pair.kv_bytes_per_token == kv_bytes
    setup = pair.setup()
    assert (setup.kv_bytes_per_token, setup.kv_dtype) == (kv_bytes, kv_dtype)


def test_the_choice_is_in_the_commands_the_setup_and_said_once(tmp_path, monkeypatch, caplog):
    pair = _pair(tmp_path, monkeypatch, AVX2)
    with caplog.at_level(logging.WARNING, logger="kvcal.engines.vllm_launch"):
        commands = pair.dry_run_commands() + pair.dry_run_commands()
        setup = pair.setup()
    assert all(command.endswith("--dtype float32") for command in commands)
    assert (setup.dtype, setup.dtype_reason) == (
        "float32", "the host has no native bf16 (AVX2): the tiny model runs in float32")
    said = [r.getMessage() for r in caplog.records if "native bf16" in r.getMessage()]
    assert said == ["the host has no native bf16 (AVX2): the tiny model runs in float32 "
                    "(--engine-arg=--dtype=bfloat16 keeps bf16)"]
    assert json.loads(setup.model_dump_json())["dtype"] == "float32"  # what run.json and fit.json carry


def test_a_users_dtype_and_model_launch_as_given(tmp_path, monkeypatch, caplog):
    with caplog.at_level(logging.WARNING):
        mine = _pair(tmp_path, monkeypatch, AVX2, "--dtype", "bfloat16")
        folder = ensure_tiny_model(tmp_path / "models")
        theirs = _pair(tmp_path, monkeypatch, AVX2, model=str(folder))
        commands = mine.dry_run_commands() + theirs.dry_run_commands()
    assert [c.count("--dtype") for c in commands] == [1, 1, 0, 0]  # the user's once; none for the user's model
    assert (mine.setup().dtype, mine.setup().dtype_reason) == ("bfloat16", "given in the engine arguments")
    assert (theirs.setup().dtype, theirs.kv_bytes_per_token) == (None, 2048)
    assert not [r for r in caplog.records if "native bf16" in r.getMessage()]


@pytest.mark.parametrize("cache_dtype, kv_bytes", [("auto", 2048), ("fp8", 1024)])
def test_attached_engines_kv_follows_the_cache_dtype_they_report(tmp_path, cache_dtype, kv_bytes):
    root = ensure_tiny_model(tmp_path / "models")
    with FakeEngine("producer", root=root, cache_dtype=cache_dtype) as producer, \
            FakeEngine("consumer", root=root, cache_dtype=cache_dtype) as consumer:
        pair = VllmPair(VllmSettings(producer_url=producer.url, consumer_url=consumer.url, cache_dir=tmp_path,
                                     startup_timeout_s=10.0))
        pair.start()
        try:
            assert pair.kv_bytes_per_token == kv_bytes
            assert pair.setup().kv_dtype == (None if cache_dtype == "auto" else cache_dtype)
            assert pair.setup().dtype is None  # an attached engine's --dtype is not visible
        finally:
            pair.stop()
