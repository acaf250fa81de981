"""vLLM 0.33's own code judging what kvcal prints. Runs in the conformance environment, not kvcal's.

``scripts/conformance_env.sh`` makes that environment (the vllm==0.33.0 wheel's Python
code, its pure-Python dependencies, the CPU torch); the tests in this folder run this
file there with ``VLLM_TARGET_DEVICE=cpu`` and feed it JSON on stdin. It imports nothing
from kvcal: what it judges is only what kvcal printed.

- ``args``: a list of vLLM argument lists (what kvcal hands to ``vllm serve``). Each is
  parsed by the serve parser built as ``vllm/entrypoints/cli/main.py`` builds it,
  validated by the serve subcommand, turned into ``EngineArgs.from_cli_args``; its
  ``--kv-transfer-config`` / ``--kv-events-config`` come out as vLLM's config objects.
  An ``OffloadingConnector`` config then builds the real offloading spec (through vLLM's
  spec factory, with the parsed block size and parallel sizes) and each secondary tier
  through vLLM's tier factory; the P2P tier's NIXL and ZMQ transports, the only parts
  that need a NIC and the nixl library, are stand-ins that record what they are given.
  Every key of the extra config is watched: a key no code read is reported. A
  ``NixlConnector`` config builds vLLM's NIXL scheduler (``NixlPullConnectorScheduler``)
  and asks it, as the prefill instance of a second turn (the decoder's blocks offered,
  16 blocks cached locally), whether it pulls ``kv_recompute_threshold`` - 1 and
  ``kv_recompute_threshold`` remote tokens (``get_num_new_matched_tokens``).
- ``metrics``: /metrics pages written by vLLM's Prometheus logger (``PrometheusStatLogger``)
  for a config.json model, with counters driven through vLLM's own stats objects.

Usage: ``python vllm_judge.py args|metrics OUT.json < request.json``; the answer is one JSON
document in OUT.json (vLLM's loggers write to stdout).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any


class WatchedMapping(Mapping):
    """A read-only mapping that records every key read (``get``, ``[]``, ``in``)."""

    def __init__(self, data: dict[str, Any], read: set[str], prefix: str = "") -> None:
        self._data, self._read, self._prefix = data, read, prefix

    def __getitem__(self, key: str) -> Any:
        self._read.add(self._prefix + key)
        return self._data[key]

    def __contains__(self, key: object) -> bool:
        self._read.add(self._prefix + str(key))
        return key in self._data

    def get(self, key: str, default: Any = None) -> Any:
        self._read.add(self._prefix + key)
        return self._data.get(key, default)

    def __iter__(self):
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def copy(self) -> dict[str, Any]:
        return dict(self._data)


def serve_parser():
    """The `vllm` parser with every subcommand main.py registers, and the serve command object."""
    import vllm.entrypoints.cli.serve as serve
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    commands = {}
    for cmd in serve.cmd_init():
        cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
        commands[cmd.name] = cmd
    return parser, commands


def judge_args(argv: list[str], parser, commands) -> dict[str, Any]:
    from vllm.engine.arg_utils import EngineArgs

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(["serve", *argv])
        commands[args.subparser].validate(args)
        if getattr(args, "model_tag", None) is not None:  # as ServeSubcommand.cmd does
            args.model = args.model_tag
        engine = EngineArgs.from_cli_args(args)
    except SystemExit:
        return {"ok": False, "error": err.getvalue().strip().splitlines()[-1:] or ["argparse exit"]}
    except Exception as exc:  # noqa: BLE001 - every refusal is a finding to report
        return {"ok": False, "error": [f"{type(exc).__name__}: {exc}"]}
    out: dict[str, Any] = {
        "ok": True, "model": engine.model, "tensor_parallel_size": engine.tensor_parallel_size,
        "pipeline_parallel_size": engine.pipeline_parallel_size, "data_parallel_size": engine.data_parallel_size,
        "block_size": engine.block_size, "max_model_len": engine.max_model_len,
        "gpu_memory_utilization": engine.gpu_memory_utilization, "port": args.port, "host": args.host,
    }
    kv = engine.kv_transfer_config
    if kv is not None:
        out["kv_transfer_config"] = {"type": type(kv).__name__, "kv_connector": kv.kv_connector, "kv_role": kv.kv_role,
                                     "kv_buffer_device": kv.kv_buffer_device,
                                     "kv_connector_extra_config": kv.kv_connector_extra_config}
        if kv.kv_connector == "OffloadingConnector":
            out["offloading"] = judge_offloading(kv, engine)
        elif kv.kv_connector == "NixlConnector":
            out["nixl"] = judge_nixl(kv, engine.block_size or 16)
    events = engine.kv_events_config
    if events is not None:
        out["kv_events_config"] = {"type": type(events).__name__, "enable_kv_cache_events": events.enable_kv_cache_events,
                                   "publisher": events.publisher, "endpoint": events.endpoint, "topic": events.topic}
    return out


def offloading_config(extra: Mapping[str, Any], engine) -> Any:
    """vLLM's normalized offloading config for the parsed engine (what the connector builds from a VllmConfig)."""
    from vllm.v1.kv_offload.config import (OffloadingCacheConfig, OffloadingConfig, OffloadingGroupConfig,
                                           OffloadingModelConfig, OffloadingParallelConfig)

    tp, pp, dp = engine.tensor_parallel_size, engine.pipeline_parallel_size, engine.data_parallel_size
    block = engine.block_size or 16
    return OffloadingConfig(
        groups=(OffloadingGroupConfig(tokens_per_block=block, layer_names=("model.layers.0.self_attn",), group_id=0),),
        worker_kv_bytes_per_block=2 * 8 * 128 * 2 * block, enable_kv_cache_events=True, extra_config=extra,
        engine_id="kvcal-conformance", model=OffloadingModelConfig(name=str(engine.model), dtype="bfloat16"),
        cache=OffloadingCacheConfig(tokens_per_hash=block, blocks_per_chunk=1),
        parallel=OffloadingParallelConfig(rank=0, world_size=tp * pp, tp_size=tp, pp_size=pp, pcp_size=1, dcp_size=1,
                                          data_parallel_index=0, data_parallel_size=dp, data_parallel_rank_local=None,
                                          is_parallelism_agnostic=False))


def judge_offloading(kv, engine) -> dict[str, Any]:
    """Build the real spec and secondary tiers from the extra config; report what was read and what each tier bound."""
    import vllm.v1.kv_offload.tiering.p2p.manager as p2p_manager
    from vllm.v1.kv_offload.factory import OffloadingSpecFactory
    from vllm.v1.kv_offload.tiering.factory import SecondaryTierFactory

    extra = dict(kv.kv_connector_extra_config)
    read: set[str] = set()
    tiers = [dict(t) for t in extra.get("secondary_tiers") or []]
    watched = WatchedMapping({**extra, "secondary_tiers": tiers}, read)
    report: dict[str, Any] = {"tiers": []}
    try:
        spec = OffloadingSpecFactory.create_spec(offloading_config(watched, engine))
    except Exception as exc:  # noqa: BLE001
        return {"error": f"{type(exc).__name__}: {exc}", "unread": []}
    report["spec"] = type(spec).__name__
    report["offload_prompt_only"] = spec.offload_prompt_only
    report["self_describing_kv_events"] = spec.kv_events_config.self_describing_kv_events
    report["metric_names"] = sorted(type(spec).build_metric_definitions(extra))
    bound: list[dict[str, Any]] = []

    class Recorder:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            bound.append({"transport": type(self).__name__, "args": [a for a in args if isinstance(a, (str, int))],
                          "kwargs": {k: v for k, v in kwargs.items() if isinstance(v, (str, int, list))}})

    class NixlStandIn(Recorder):
        pass

    class ZmqStandIn(Recorder):
        pass

    real = (p2p_manager.NixlTransport, p2p_manager.ZmqTransport)
    p2p_manager.NixlTransport, p2p_manager.ZmqTransport = NixlStandIn, ZmqStandIn
    try:
        for i, tier_config in enumerate(tiers):
            tier_read: set[str] = set()
            cls = SecondaryTierFactory.get_tier_class(tier_config)
            named = set(_named_parameters(cls.__init__))
            entry: dict[str, Any] = {"type": tier_config.get("type"), "class": cls.__name__}
            try:
                tier = SecondaryTierFactory.create_secondary_tier(tier_config, memoryview(bytearray(4096)), spec)
                entry["local_id"] = getattr(tier, "_local_id", None)
            except Exception as exc:  # noqa: BLE001
                entry["error"] = f"{type(exc).__name__}: {exc}"
            tier_read |= {k for k in tier_config if k in named or k == "type"}
            entry["unread"] = sorted(set(tier_config) - tier_read)
            report["tiers"].append(entry)
            read.add(f"secondary_tiers[{i}]")
    finally:
        p2p_manager.NixlTransport, p2p_manager.ZmqTransport = real
    report["transports"] = bound
    # The scheduler-side connector reads these through the spec's attributes, set above from the mapping.
    report["unread"] = sorted(k for k in extra if k not in read)
    return report


def judge_nixl(kv, block_size: int) -> dict[str, Any]:
    """vLLM's NIXL scheduler built from the parsed config: the threshold it reads, the keys it leaves unread, and
    its answer (tokens to load, asynchronously?) for a turn-2 request offering T - 1 and T remote tokens."""
    import torch
    from vllm.config import CacheConfig, VllmConfig
    from vllm.distributed.kv_transfer.kv_connector.v1.nixl.pull_scheduler import NixlPullConnectorScheduler
    from vllm.sampling_params import SamplingParams
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.request import Request

    extra = dict(kv.kv_connector_extra_config)
    read: set[str] = set()
    report: dict[str, Any] = {"threshold": kv.get_from_extra_config("kv_recompute_threshold", 64)}
    kv.kv_connector_extra_config = WatchedMapping(extra, read)
    config = VllmConfig(kv_transfer_config=kv, cache_config=CacheConfig(block_size=block_size))
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=8, head_size=32, dtype=torch.bfloat16)
    groups = [KVCacheGroupSpec(["model.layers.0.self_attn"], spec)]
    scheduler = NixlPullConnectorScheduler(config, "kvcal-prefill", KVCacheConfig(100, [], groups))
    report["scheduler_threshold"] = scheduler.kv_recompute_threshold
    report["unread"] = sorted(set(extra) - read)
    cached = 16 * block_size  # turn 1's prompt, in the prefill instance's own prefix cache
    report["decisions"] = {}
    for remote in (report["threshold"] - 1, report["threshold"]):
        params = {"do_remote_prefill": False, "do_remote_decode": True, "remote_block_ids": [list(range(40))],
                  "remote_engine_id": "kvcal-decode", "remote_request_id": "turn-1", "remote_host": "10.1.2.4",
                  "remote_port": 5600, "tp_size": 1, "remote_num_tokens": cached + remote}
        prompt = list(range(cached + remote + 32))  # turn 1, what the decoder generated, the user's next words
        request = Request(f"turn-2-{remote}", prompt, SamplingParams(max_tokens=1, extra_args={"kv_transfer_params": params}),
                          None)
        report["decisions"][str(remote)] = list(scheduler.get_num_new_matched_tokens(request, cached))
    return report


def _named_parameters(function) -> list[str]:
    import inspect

    return [p.name for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def metrics_pages(request: dict[str, Any]) -> dict[str, list[str]]:
    """Per scenario, the pages of vLLM's Prometheus logger: before the first step and after each."""
    import prometheus_client
    from vllm.config.kv_transfer import KVTransferConfig
    from vllm.engine.arg_utils import EngineArgs
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import SchedulerStats

    pages: dict[str, list[str]] = {}
    # One VllmConfig (building it is most of the cost); each scenario's engine differs in its connector and block size.
    config = EngineArgs(model=request["model_dir"], skip_tokenizer_init=True, max_model_len=4096).create_engine_config()
    for name, scenario in request["scenarios"].items():
        for collector in list(prometheus_client.REGISTRY._collector_to_names):  # one engine per scenario
            prometheus_client.REGISTRY.unregister(collector)
        config.kv_transfer_config = KVTransferConfig(**scenario["kv_transfer_config"])
        config.cache_config.block_size = scenario["block_size"]
        config.cache_config.user_specified_block_size = True
        logger = PrometheusStatLogger(config, engine_indexes=[0])
        logger.log_engine_initialized()
        logger.record(SchedulerStats(), None, engine_idx=0)
        pages[name] = [prometheus_client.generate_latest().decode()]
        for step in scenario["steps"]:
            stats = SchedulerStats(num_running_reqs=step.get("running", 0), num_waiting_reqs=step.get("waiting", 0),
                                   kv_connector_stats=connector_stats(scenario, step, request["chunk_bytes"]))
            logger.record(stats, None, engine_idx=0)
            pages[name].append(prometheus_client.generate_latest().decode())
    return pages


def connector_stats(scenario: dict[str, Any], step: dict[str, Any], chunk_bytes: int) -> dict[str, Any] | None:
    """One step's counters driven through vLLM's stats objects, as the scheduler hands them on (``to_dict``)."""
    config = scenario["kv_transfer_config"]
    if config["kv_connector"] == "NixlConnector":
        from vllm.distributed.kv_transfer.kv_connector.v1.nixl.stats import NixlKVConnectorStats

        nixl = NixlKVConnectorStats()
        for moved in step.get("nixl_transfers", []):
            nixl.record_transfer(SimpleNamespace(xferDuration=1500, postDuration=100, totalBytes=moved, descCount=4))
        return nixl.to_dict()
    from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import OffloadingConnectorStats
    from vllm.v1.kv_offload.tiering.metrics import TieringMetricsTracker

    tiers = [t["type"] for t in config["kv_connector_extra_config"].get("secondary_tiers", [])]
    tracker = TieringMetricsTracker(tier_types=tiers, num_primary_chunks=1024, primary_chunk_size=chunk_bytes)
    for tier_idx, keys in step.get("promotions", []):  # a secondary-tier read into the CPU tier
        job = SimpleNamespace(transfer_job=SimpleNamespace(chunk_ids=list(range(keys)), keys=list(range(keys)),
                                                           is_promotion=True, submit_time=0.0), tier_idx=tier_idx)
        tracker.on_job_registered(job)
        tracker.on_job_finished(job, SimpleNamespace(success=True, successful_keys=None, transfer_time=0.002))
    stats = tracker.take_stats() or OffloadingConnectorStats()
    for moved in step.get("gpu_loads", []):  # CPU tier -> GPU, whatever filled the CPU tier
        stats.increase_counter("vllm:kv_offload_load_bytes", moved)
    return stats.to_dict()


def main() -> int:
    request = json.load(sys.stdin)
    if sys.argv[1] == "args":
        parser, commands = serve_parser()
        result: Any = [judge_args(argv, parser, commands) for argv in request]
    else:
        result = metrics_pages(request)
    with open(sys.argv[2], "w") as out:  # a file: vLLM's loggers write to stdout
        json.dump(result, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
