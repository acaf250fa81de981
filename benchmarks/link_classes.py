"""Two link classes for real (tests/netlinks.py): loopback and a tc-limited veth between two namespaces.

Starts the four engines once (the tiny model, nixl-pd, UCX over TCP), then per rate runs one
``kvcal sweep --pairs`` over both pairs (the veth pair's class named by its rate) and ``kvcal fit``,
and prints per class the pull's per-token cost against KV bytes per token over the rate, the
break-evens, the session cost and its proof, and the common threshold for a 50/50 mix.
Root only; run under the engine lock:

    flock /work/engine.lock env PYTHONPATH=. .venv/bin/python benchmarks/link_classes.py --rates 1gbit,100mbit
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from netlinks import NetLinks, set_rate  # noqa: E402

BITS = {"mbit": 1e6, "gbit": 1e9}


def kvcal(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvcal.cli.app", *args], capture_output=True, text=True)


def rate_bps(rate: str) -> float:
    for unit, scale in BITS.items():
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * scale
    raise SystemExit(f"rate {rate}: write it as Nmbit or Ngbit")


def campaign(links: NetLinks, out: Path, rate: str, lengths: str, reps: int) -> dict:
    set_rate(rate)
    pairs = out / f"pairs-{rate}.yaml"
    pairs.write_text(links.pairs_yaml({"loop": "loopback", "veth": f"veth-{rate}"}))
    swept = kvcal("sweep", "--pairs", str(pairs), "--output-dir", str(out), "--name", rate, "--prefix-lengths", lengths,
                  "--reps", str(reps), "--seed", "1")
    if swept.returncode:
        raise SystemExit(f"sweep at {rate} failed: {swept.stderr[-3000:]}")
    fitted = kvcal("fit", str(out / rate), "--json")
    if fitted.returncode:
        raise SystemExit(f"fit at {rate} failed: {fitted.stderr[-3000:]}")
    return json.loads(fitted.stdout)


def report(fit: dict, rate: str) -> None:
    kv_per_token = fit["setup"]["kv_bytes_per_token"]
    expected_us = kv_per_token * 8 / rate_bps(rate) * 1e6
    print(f"# rate {rate}: KV {kv_per_token} B/token -> {expected_us:.1f} us/token over the link")
    for name, cls in fit["classes"].items():
        session = cls["fit"]["session_cost"] or {}
        print(f"{name}\tpull {cls['pull_fixed_ms']:.1f} ms + {cls['pull_us_per_token']:.2f} us/token"
              f"\tbreak-even {cls['break_even_tokens']} {cls['break_even_ci']}"
              f"\tsession {cls['session_cost_ms']} ms {cls['session_cost_ci']} proofs {session.get('pulls_by_proof')}")
        if name.startswith("veth"):
            print(f"  per-token vs bytes/rate: {cls['pull_us_per_token'] / expected_us - 1:+.1%}")
    diff = fit["class_difference"]
    print(f"classes differ: {diff and diff['differ']} (p={diff and diff['p_value']:.3g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,100mbit")
    parser.add_argument("--lengths", default="512,1024,2048,4096")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="kvcal-links-"))
    rates = args.rates.split(",")
    links = NetLinks(out / "engines")
    try:
        links.start(rates[0])
        for index, rate in enumerate(rates):
            if index:  # attached pairs kvcal pulled on are warm: new consumers make the next campaign's cold samples real
                links.restart_consumers()
            fit = campaign(links, out, rate, args.lengths, args.reps)
            report(fit, rate)
            mix = kvcal("emit-config", str(out / rate), "--format", "json")
            print(f"common threshold (mix by pairs): {mix.stdout and json.loads(mix.stdout)['minCachedTokenDelta']}"
                  f"\n{mix.stderr.strip()}")
    finally:
        links.close()
    print(f"# runs in {out}")


if __name__ == "__main__":
    main()
