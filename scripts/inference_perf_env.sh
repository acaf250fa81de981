#!/usr/bin/env bash
# Make (once, then cached) inference-perf's own venv for the tests that run the real tool
# against a loopback stand-in (tests/unit/fit/test_inference_perf_import.py). inference-perf needs
# Python >= 3.12, kvcal's venv may be older, so it gets a venv of its own, in kvcal's cache
# folder ($KVCAL_CACHE_DIR, default ~/.cache/kvcal), which outlives a fresh clone. Prints the venv's inference-perf path.
# Without Python 3.12 or a package index it says why and exits 3: the tests then skip, naming
# this script. Usage: bash scripts/inference_perf_env.sh [--cached-only]  (PYTHON312=/path/to/python3.12)
# --cached-only prints the path only if the venv is already made (the tests ask so), else exits 3.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.7.0
venv="${KVCAL_CACHE_DIR:-$HOME/.cache/kvcal}/inference-perf-$version"
stamp="$venv/.kvcal-ready"
if [ -f "$stamp" ]; then
  echo "$venv/bin/inference-perf"
  exit 0
fi
if [ "${1:-}" = --cached-only ]; then
  exit 3
fi
python=
# pyenv's shims answer for versions that are installed but not selected, so look behind them too.
for candidate in ${PYTHON312:-} python3.12 python3.13 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
  if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
if [ -z "$python" ]; then
  echo "inference-perf $version needs Python >= 3.12 and none was found (set PYTHON312); its tests will skip" >&2
  exit 3
fi
rm -rf "$venv"
"$python" -m venv "$venv"
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check "inference-perf==$version"; then
  rm -rf "$venv"
  echo "could not install inference-perf==$version from the package index; its tests will skip" >&2
  exit 3
fi
touch "$stamp"
echo "inference-perf $version ready in $venv" >&2
echo "$venv/bin/inference-perf"
