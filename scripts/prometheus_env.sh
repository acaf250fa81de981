#!/usr/bin/env bash
# Install Debian's prometheus package (the real server tests/integration/test_observe_prometheus.py starts on
# loopback) when it is missing. Needs root and apt; without them the test skips and says why.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "kvcal: prometheus not installed and cannot install it here (needs root and apt-get); its tests skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
echo "kvcal: installed $(prometheus --version 2>&1 | head -1)" >&2
