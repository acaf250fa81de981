"""The engines' own account of a probe (kvcal.engines.engine_costs): transfer time on the pulling engine, prefill time
on the computing one, read from /metrics snapshots or an older record's metrics_delta; unknown is None, never 0."""

from __future__ import annotations

import pytest

from kvcal.engines.engine_costs import from_metrics_delta, from_snapshots
from kvcal.engines.metrics import parse_metrics
from kvcal.transports import get_transport
from kvcal.transports.base import Role

NIXL = get_transport("nixl-pd")
P2P = get_transport("p2p-tier")


def _page(xfer_s: float = 0.0, xfers: int = 0, nixl_bytes: float = 0.0, external: int = 0, prefill_s: float = 0.0,
          computed: int = 0, requests: int = 0, nixl: bool = True) -> str:
    lines = ["# TYPE vllm:request_prefill_time_seconds histogram",
             f'vllm:request_prefill_time_seconds_sum{{engine="0",model_name="m"}} {prefill_s}',
             f'vllm:request_prefill_time_seconds_count{{engine="0",model_name="m"}} {requests}',
             "# TYPE vllm:request_prefill_kv_computed_tokens histogram",
             f'vllm:request_prefill_kv_computed_tokens_sum{{engine="0",model_name="m"}} {computed}',
             f'vllm:request_prefill_kv_computed_tokens_count{{engine="0",model_name="m"}} {requests}',
             "# TYPE vllm:prompt_tokens_by_source counter",
             f'vllm:prompt_tokens_by_source_total{{engine="0",model_name="m",source="external_kv_transfer"}} {external}']
    if nixl:
        lines += ["# TYPE vllm:nixl_xfer_time_seconds histogram",
                  f'vllm:nixl_xfer_time_seconds_sum{{engine="0",model_name="m"}} {xfer_s}',
                  f'vllm:nixl_xfer_time_seconds_count{{engine="0",model_name="m"}} {xfers}',
                  "# TYPE vllm:nixl_bytes_transferred histogram",
                  f'vllm:nixl_bytes_transferred_sum{{engine="0",model_name="m"}} {nixl_bytes}']
    return "\n".join(lines) + "\n"


def test_a_nixl_pull_reads_the_consumers_transfer_time_bytes_and_tokens():
    before = {Role.CONSUMER: parse_metrics(_page(xfer_s=1.0, xfers=3, nixl_bytes=1e6, external=500, prefill_s=2.0,
                                                 computed=900, requests=4))}
    after = {Role.CONSUMER: parse_metrics(_page(xfer_s=1.0042, xfers=4, nixl_bytes=1e6 + 8_388_608, external=4596,
                                                prefill_s=2.006, computed=4996, requests=5))}
    side = from_snapshots(before, after, NIXL)
    assert side is not None
    assert side.pull_time_s == pytest.approx(0.0042) and side.pull_transfers == 1 and side.pulled_tokens == 4096
    assert side.pull_bytes == 8_388_608
    # vLLM counts a pulled prompt's tokens as computed: recorded raw, the fit reads prefill on recompute probes only
    assert side.prefill_time_s == pytest.approx(0.006) and side.prefill_tokens == 4096 and side.prefill_requests == 1


def test_a_recompute_probe_on_an_engine_that_exposes_nixl_says_it_pulled_nothing():
    before = {Role.CONSUMER: parse_metrics(_page())}
    after = {Role.CONSUMER: parse_metrics(_page(prefill_s=0.03, computed=1024, requests=1))}
    side = from_snapshots(before, after, NIXL)
    assert side.pull_time_s == 0.0 and side.pulled_tokens == 0  # exposed and unchanged: a true zero
    assert side.prefill_tokens == 1024


def test_what_an_engine_does_not_export_is_none_never_zero():
    before = {Role.CONSUMER: parse_metrics(_page(nixl=False))}
    after = {Role.CONSUMER: parse_metrics(_page(nixl=False, prefill_s=0.03, computed=1024, requests=1))}
    side = from_snapshots(before, after, NIXL)
    assert side.pull_time_s is None and side.pull_transfers is None and side.pull_bytes is None
    assert from_snapshots({Role.CONSUMER: parse_metrics("")}, {Role.CONSUMER: parse_metrics("")}, NIXL) is None


def test_a_counter_that_went_down_or_is_not_a_number_is_not_believed():
    before = {Role.CONSUMER: parse_metrics(_page(xfer_s=5.0, prefill_s=1.0))}
    after = {Role.CONSUMER: parse_metrics(_page(xfer_s=1.0, prefill_s=float("nan")))}
    side = from_snapshots(before, after, NIXL)
    assert side.pull_time_s is None and side.prefill_time_s is None


def test_the_p2p_tier_reads_its_own_read_time_on_the_p2p_tier_label():
    text = ('# TYPE vllm:kv_offload_tiering_read_time_total counter\n'
            'vllm:kv_offload_tiering_read_time_total{tier="0:primary"} 7\n'
            'vllm:kv_offload_tiering_read_time_total{tier="2:p2p"} %s\n'
            '# TYPE vllm:prompt_tokens_cached_by_source_total counter\n'
            'vllm:prompt_tokens_cached_by_source_total{source="p2p"} %s\n')
    side = from_snapshots({Role.CONSUMER: parse_metrics(text % (1.0, 100))},
                          {Role.CONSUMER: parse_metrics(text % (1.25, 2148))}, P2P)
    assert side.pull_time_s == pytest.approx(0.25) and side.pulled_tokens == 2048


def test_an_older_records_metrics_delta_gives_the_same_figures():
    delta = {"consumer/vllm:nixl_xfer_time_seconds_sum": 0.0088, "consumer/vllm:nixl_xfer_time_seconds_count": 1.0,
             'consumer/vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}': 8128.0,
             "consumer/vllm:request_prefill_time_seconds_sum": 0.0101,
             "consumer/vllm:request_prefill_kv_computed_tokens_sum": 8128.0,
             "producer/vllm:request_prefill_time_seconds_sum": 9.0}
    side = from_metrics_delta(delta, NIXL)
    assert side.pull_time_s == pytest.approx(0.0088) and side.pulled_tokens == 8128
    assert side.prefill_time_s == pytest.approx(0.0101)  # the consumer's, not the producer's
    assert side.pull_bytes is None  # not in the delta: unknown
    assert from_metrics_delta({}, NIXL) is None
