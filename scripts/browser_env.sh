#!/usr/bin/env bash
# Headless Chromium for tests/browser (the `kvcal report` pages opened in a real browser).
# Debian's `chromium` package, installed when missing and this runs as root with apt-get; otherwise it
# says so and the browser tests skip with the same reason. Idempotent: nothing to do once it is there.
set -euo pipefail
for browser in chromium chromium-browser google-chrome; do
  if command -v "$browser" >/dev/null 2>&1; then
    exit 0
  fi
done
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "kvcal: no Chromium and not root with apt-get: tests/browser will skip (apt-get install -y chromium)" >&2
  exit 0
fi
echo "kvcal: installing Debian's chromium for tests/browser" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
