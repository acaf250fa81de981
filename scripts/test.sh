#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: lint and types, then pytest's tiers in the
# order of their folders (browser, cli, conformance, integration, unit; each test is marked with
# its tier, tests/conftest.py), then the corpus against the newest dependency versions pyproject
# allows (scripts/newest_deps.sh; KVCAL_NEWEST_DEPS=0 skips it), and the README's pip route with
# cold caches on the real pair (scripts/pip_route.sh; KVCAL_PIP_ROUTE=0 skips it).
# KVCAL_TIERS picks tiers by name, e.g. KVCAL_TIERS="unit cli" bash scripts/test.sh: the pytest
# tiers become -m "unit or cli", the two jobs after pytest are tiers too (newest-deps, pip-route),
# and only the selected tiers' environments are set up. Unset (CI, .ci/run): every tier.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
raw=${KVCAL_TIERS:-}
tiers=" ${raw//,/ } "
known=" browser cli conformance integration unit newest-deps pip-route "
for tier in $tiers; do
  [[ $known == *" $tier "* ]] || { echo "KVCAL_TIERS: unknown tier '$tier' (tiers:$known)" >&2; exit 2; }
done
wants() { [ -z "${tiers// /}" ] || [[ $tiers == *" $1 "* ]]; }
bash scripts/setup.sh
# inference-perf's own venv (cached in ~/.cache/kvcal) for the unit test that runs it; without it that test skips
if wants unit; then bash scripts/inference_perf_env.sh >/dev/null || true; fi
# headless Chromium for the report pages' browser tests (tests/browser); without it they skip, saying why
if wants browser; then bash scripts/browser_env.sh || true; fi
# Debian's prometheus for kvcal observe's real-server tests (integration); without root or apt they skip
if wants integration; then bash scripts/prometheus_env.sh || true; fi
# Lint and types over kvcal/ (pyproject.toml [tool.ruff], [tool.mypy]): fast, and first, so a slip fails in seconds
.venv/bin/ruff format --check --quiet
.venv/bin/ruff check --quiet
.venv/bin/mypy
selected=()
for tier in browser cli conformance integration unit; do
  if [ -n "${tiers// /}" ] && wants "$tier"; then selected+=("$tier"); fi
done
if [ -n "${tiers// /}" ] && [ ${#selected[@]} -eq 0 ]; then
  :  # only the jobs after pytest were asked for
elif [ ${#selected[@]} -gt 0 ]; then
  expression=$(printf ' or %s' "${selected[@]}")
  .venv/bin/python -m pytest -m "${expression# or }" "$@"
else
  .venv/bin/python -m pytest "$@"
fi
if wants newest-deps && [ "${KVCAL_NEWEST_DEPS:-1}" != 0 ]; then
  bash scripts/newest_deps.sh -q
fi
if wants pip-route && [ "${KVCAL_PIP_ROUTE:-1}" != 0 ]; then
  bash scripts/pip_route.sh
fi
