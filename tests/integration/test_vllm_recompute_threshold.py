"""vLLM's own pull-or-recompute threshold deciding on the real CPU pair, set from what kvcal emits.

``kvcal emit-config`` (the installed script) on the CPU baseline fit prints a
``--kv-transfer-config`` whose ``kv_recompute_threshold`` is the fitted threshold T; the pair
is launched with that extra config plus ``bidirectional_kv_xfer: true`` on both engines (the
path vLLM applies the threshold on today needs it; kvcal's fragment does not set it).

Turn 1 is the usual handoff: the producer prefills the prompt (16 blocks) with
``do_remote_decode``, the consumer pulls it and decodes G tokens, and returns
``kv_transfer_params`` offering its blocks (``do_remote_decode`` with ``remote_block_ids``
and ``remote_num_tokens``). Turn 2 (turn 1, what was generated, a few new tokens) goes to the
producer with those params: it holds turn 1's prompt in its own prefix cache, so the
decoder offers ``remote_num_tokens`` - 1,024 tokens beyond it. The proof is the producer's
NIXL bytes (it posts the READ): 0 when that count is T - 1, whole blocks x block size x KV
bytes per token when it is T. Bytes and token counts only, never times. Run under the
engine lock: ``flock /work/engine.lock .venv/bin/python -m pytest tests/integration/test_vllm_recompute_threshold.py``.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import Field

pytest.importorskip("vllm")

from kvcal.engines.metrics import Snapshot, poll_until, total  # noqa: E402
from kvcal.engines.vllm import VllmPair  # noqa: E402
from kvcal.engines.vllm_launch import VllmSettings  # noqa: E402
from kvcal.transports.base import Role  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]
BASELINE = ROOT / "results" / "baselines" / "cpu-tiny"
KVCAL = str(Path(sys.executable).with_name("kvcal"))
TURN1_TOKENS = 1024  # 16 blocks of 64: what the producer keeps in its own prefix cache
NEW_TOKENS = 32  # the user's next words in turn 2
NIXL_BYTES = "vllm:nixl_bytes_transferred_sum"
TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
DONE = "vllm:request_success_total"
_rng = random.Random(11)


class BidirectionalSettings(VllmSettings):
    """The launch settings with a NixlConnector extra config of the test's own (kvcal's sweep sets none)."""

    extra_config: dict[str, Any] = Field(default_factory=dict)

    @property
    def transport_options(self) -> dict[str, Any]:
        return {"kv_connector_extra_config": self.extra_config}


@pytest.fixture(scope="module")
def emitted() -> dict[str, Any]:
    """The kv_connector_extra_config of kvcal's --format vllm fragment for the CPU baseline (a nixl-pd fit)."""
    done = subprocess.run([KVCAL, "emit-config", str(BASELINE), "--format", "vllm"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    args = yaml.safe_load(done.stdout)["args"]
    return json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory, emitted):
    settings = BidirectionalSettings(run_dir=tmp_path_factory.mktemp("vllm-bidirectional"),
                                     extra_config={**emitted, "bidirectional_kv_xfer": True})
    with VllmPair(settings) as vllm_pair:
        yield vllm_pair


def _complete(pair: VllmPair, role: Role, prompt: list[int], params: dict[str, Any], max_tokens: int) -> dict:
    """One completion of exactly ``max_tokens`` tokens, with the generated token ids and the kv_transfer_params."""
    client = pair._client(role)
    body = {"model": client.served_model(), "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0, "return_token_ids": True, "kv_transfer_params": params}
    answer = httpx.post(f"{client.base_url}/v1/completions", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _counted(pair: VllmPair, role: Role, before: Snapshot) -> Snapshot:
    """``role``'s counters once its finished-request counter shows one more (its transfer stats come with it)."""
    snap, settled = poll_until(pair._client(role).metrics, lambda s: total(s, DONE) > total(before, DONE),
                               timeout_s=60)
    assert settled, f"{role.value} never counted the request"
    return snap


def _rise(before: Snapshot, after: Snapshot, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def _two_turns(pair: VllmPair, remote_beyond_cache: int) -> tuple[dict, dict[str, float]]:
    """Turn 1 (the handoff; the decoder generates so that it offers ``remote_beyond_cache`` tokens beyond turn 1's
    prompt), then turn 2 to the producer: the decoder's params, and what the producer's counters rose by."""
    vocab = pair.vocab_size
    prompt = [_rng.randrange(100, vocab - 100) for _ in range(TURN1_TOKENS)]
    held = pair._client(Role.PRODUCER).complete(prompt, pair.transport.hold_params("turn-1"))
    assert held.kv_transfer_params and held.kv_transfer_params.get("remote_block_ids"), held.body
    # The decoder's blocks hold the prompt and every generated token but the last (never computed).
    turn1 = _complete(pair, Role.CONSUMER, prompt, held.kv_transfer_params, remote_beyond_cache + 1)
    offered = turn1["kv_transfer_params"]
    generated = turn1["choices"][0]["token_ids"]
    turn2 = prompt + generated + [_rng.randrange(100, vocab - 100) for _ in range(NEW_TOKENS)]
    before = pair._client(Role.PRODUCER).metrics()
    _complete(pair, Role.PRODUCER, turn2, offered, 1)
    after = _counted(pair, Role.PRODUCER, before)
    return offered, {
        "bytes": _rise(before, after, NIXL_BYTES),
        "external": _rise(before, after, TOKENS_BY_SOURCE, source="external_kv_transfer"),
        "own_cache": _rise(before, after, TOKENS_BY_SOURCE, source="local_cache_hit"),
    }


def test_the_fragment_carries_the_fitted_threshold(emitted):
    fit = json.loads((BASELINE / "fit.json").read_text())
    assert emitted["kv_recompute_threshold"] % fit["setup"]["block_size"] == 0
    assert emitted["kv_recompute_threshold"] != 64  # vLLM's default: the tests below would prove nothing


def test_below_the_threshold_the_prefill_instance_recomputes(pair, emitted):
    threshold = emitted["kv_recompute_threshold"]
    offered, rose = _two_turns(pair, threshold - 1)
    assert offered["do_remote_decode"] and offered["remote_block_ids"]
    assert offered["remote_num_tokens"] - TURN1_TOKENS == threshold - 1 and rose["own_cache"] == TURN1_TOKENS
    assert rose["bytes"] == 0 and rose["external"] == 0


def test_at_the_threshold_it_pulls_whole_blocks(pair, emitted):
    threshold = emitted["kv_recompute_threshold"]
    offered, rose = _two_turns(pair, threshold)
    assert offered["remote_num_tokens"] - TURN1_TOKENS == threshold and rose["own_cache"] == TURN1_TOKENS
    blocks = math.ceil(threshold / pair.block_size)
    assert rose["bytes"] == blocks * pair.block_size * pair.kv_bytes_per_token
    assert rose["external"] == threshold
