"""What ``kvcal fleet --help`` shows, held apart from the pydantic records it comes from (a fast ``--help``).

The bounds are declared here and re-exported by :mod:`kvcal.fleet.settings`. :data:`WORKLOAD_KEYS` is the text
:func:`kvcal.fleet.workload.keys_help` builds from the Workload record's fields, stored so that the help needs
neither pydantic nor yaml; tests/unit/fleet/test_fleet_help_facts.py regenerates it and fails on any difference,
printing the new literal to paste here.
"""

from __future__ import annotations

MAX_PODS = 4096
# --jobs: worker processes. Each costs memory (kvcal.fleet.size.BYTES_PER_WORKER) and more of them than cores
# gain nothing; 256 covers the largest machines a study runs on and bounds the workers' memory to about 2.5 GiB.
MAX_JOBS = 256
WORKER_MIB = 10  # what one worker adds to the study's memory (benchmarks/fleet_workers.py, rounded up)
DEFAULT_MAX_SIMULATED_REQUESTS = 10_000_000  # about 10 minutes on one core (kvcal.fleet.size.SECONDS_PER_REQUEST)

WORKLOAD_KEYS = (
    "Workload file keys (YAML; an unknown key is refused; docs/examples/fleet-workload.yaml is a complete"
    " example):\n"
    "\n"
    "  duration_s: Simulated seconds; --duration overrides it.\n"
    "  warmup_s: Seconds at the start left out of every figure (caches fill).\n"
    "  arrival: How sessions start (needed unless trace is given).\n"
    "  arrival.rate: New sessions per second (Poisson). --rate overrides it.\n"
    "  arrival.concurrency: Sessions kept active: a new one starts as one ends.\n"
    "  sessions: The sessions (needed unless trace is given).\n"
    "  sessions.system_prompts: Distinct system prompts; each session draws one uniformly.\n"
    "  sessions.system_prompt_tokens: Tokens of each system prompt (shared by its sessions).\n"
    "  sessions.turns: Turns per session.\n"
    "  sessions.input_tokens: New user tokens each turn.\n"
    "  sessions.output_tokens: Generated tokens each turn (they join the history).\n"
    "  sessions.think_time_s: Pause between a turn's end and the next turn.\n"
    "  trace: Replay these recorded requests instead.\n"
    "  trace.per_request: inference-perf per_request_lifecycle_metrics.json (start_time, "
    "info.input_tokens, output_token_times); a relative path is read from the workload file's folder.\n"
    "  trace.shared_prefix_tokens: Tokens at the start of every prompt that all requests share.\n"
    "  engine: Each engine's batching and caches.\n"
    "  engine.max_num_batched_tokens: Prefill token budget per step (vLLM's flag of that name).\n"
    "  engine.max_num_seqs: Requests running at once (prefill and decode).\n"
    "  engine.kv_capacity_tokens: KV tokens the accelerator holds: running requests reserve theirs (a "
    "request waits until it fits), the rest is prefix cache with LRU eviction.\n"
    "  engine.cpu_tier_tokens: KV tokens of the CPU tier (evicted blocks land there); 0: none.\n"
    "  engine.cpu_tier_load_us_per_token: Loading a CPU-tier hit; default: the pull's per-token cost.\n"
    "  engine.decode_step_ms: A step with no prefill; default: the recompute curve's intercept.\n"
    "  engine.pull_computes_on_source: nixl-pd's P/D handoff: the source prefills the uncached rest and "
    "the computing pod pulls the whole prompt; false: the P2P tier (pull the cached blocks, prefill the "
    "rest).\n"
    "  engine.shared_host_slowdown: How many times longer a step takes while every other engine is in a "
    "step too, for engines that share one host's cores and memory (a CPU pair: "
    "benchmarks/fleet_cpu_pair.py --probe measures it); in between it scales with the share of engines "
    "busy. 1: each engine has its own accelerator.\n"
    "  router: The router's scorer weights.\n"
    "  router.pick: score: the weighted scorers; rotate: turn k of every session on pod (k-1) mod pods, a"
    " balancer blind to the cache (the CPU pair's harness: nixl-pd moves KV one way). One of: "
    "score|rotate.\n"
    "  router.prefix_weight: Weight of the pod's cached share of the prompt (prefix-cache-scorer).\n"
    "  router.queue_weight: Weight of the pod's waiting queue, min-max scaled (queue-scorer).\n"
    "  router.kv_weight: Weight of the pod's free KV share, prompts in flight over kv_capacity_tokens "
    "(kv-cache-utilization-scorer).\n"
    "  link_classes: A fit with link classes: each class's share of the ordered pod pairs (summing to 1);"
    " default: its share of the campaign's pairs (kvcal.fleet.links).\n"
    "  slo: The TTFT objective that goodput counts.\n"
    "  slo.ttft_ms: A request meets the SLO when its TTFT is at most this; none: every completed one "
    "counts.\n"
    "  a distribution (turns, input_tokens, output_tokens, think_time_s): a number, or a mapping of dist:"
    " The family. One of: constant|uniform|exponential|lognormal; value: constant: the value; min: "
    "uniform: the lower end (inclusive); max: uniform: the upper end (inclusive); mean: exponential, "
    "lognormal: the mean; cv: lognormal: standard deviation over mean."
)
