#!/usr/bin/env bash
# The README's pip route as a new user meets it: a fresh venv, a fresh HOME (no pip, kvcal or
# vLLM cache: vLLM's model-info cache cold), `pip install -e '.[cpu]'` and nothing else, then the
# installed `kvcal sweep --prefix-lengths 1024 --reps 1` on the real CPU pair, from outside the
# tree. Passes when it exits 0 with every probe valid. Catches a repair that reaches only the
# server process (issue 29: vLLM inspects the model in a fresh interpreter on a cold cache).
# The torch CPU wheel: pip finds it through PIP_FIND_LINKS / PIP_INDEX_URL in the environment
# (kept: they do not live in HOME), else from PyTorch's CPU index (KVCAL_TORCH_INDEX).
# Launches real engines: runs under `flock /tmp/kvcal-engines.lock`. Prints its phases' times.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcal-piproute.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/home" "$work/cwd"
export HOME="$work/home"
unset XDG_CACHE_HOME KVCAL_CACHE_DIR VLLM_CACHE_ROOT TORCHINDUCTOR_CACHE_DIR PYTHONPATH VIRTUAL_ENV PIP_CACHE_DIR
if [ -z "${PIP_FIND_LINKS:-}${PIP_INDEX_URL:-}${PIP_EXTRA_INDEX_URL:-}" ]; then
  export PIP_EXTRA_INDEX_URL=${KVCAL_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}
fi
started=$SECONDS
"$python" -m venv "$work/venv"
# -v: pip shows the build backend's warnings (setuptools' deprecations) only when verbose
if ! "$work/venv/bin/python" -m pip install -v --disable-pip-version-check -e "$repo[cpu]" >"$work/pip.log" 2>&1; then
  tail -40 "$work/pip.log" >&2
  echo "pip route: FAILED: pip install -e '.[cpu]' failed" >&2
  exit 1
fi
installed=$SECONDS
echo "pip route: install $((installed - started)) s" >&2
if grep -E "DeprecationWarning|^DEPRECATION:" "$work/pip.log" >&2; then
  echo "pip route: FAILED: the install printed the deprecation warnings above" >&2
  exit 1
fi
cd "$work/cwd"
flock /tmp/kvcal-engines.lock "$work/venv/bin/kvcal" sweep --prefix-lengths 1024 --reps 1 --name pip-route \
  --output-dir "$work/cwd/results"
swept=$SECONDS
echo "pip route: sweep $((swept - installed)) s (cold caches)" >&2
"$work/venv/bin/python" - "$work/cwd/results/pip-route/probes.jsonl" <<'PY'
import json, sys
probes = [json.loads(line) for line in open(sys.argv[1])]
bad = [p for p in probes if not p["valid"]]
legs = sorted({p["leg"] for p in probes if p["valid"]})
print(f"pip route: {len(probes)} probes, {len(bad)} invalid, legs {legs}", file=sys.stderr)
sys.exit(1 if bad or legs != ["pull", "recompute"] else 0)
PY
echo "pip route: passed in $((SECONDS - started)) s" >&2
