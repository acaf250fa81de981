#!/usr/bin/env bash
# The suite's newest-dependencies job: install kvcal (not editable, no engine extras) with the
# newest versions pyproject.toml allows into a throwaway venv, then run the corpus of bad inputs
# through that venv's installed `kvcal` console script, from outside the source tree: one case
# of each class (KVCAL_CORPUS_SAMPLE=class); the main run already sends every case, and the other
# installed-script tests, through the pinned environment.
# What it catches: a dependency release inside our ranges that breaks the user boundary
# (as typer carrying its own click once did). Usage: bash scripts/newest_deps.sh [pytest args]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvcal-newest.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$python" -m venv "$work/venv"
pip() { "$work/venv/bin/python" -m pip --disable-pip-version-check -q "$@"; }
# A copy of the tree, so the build leaves nothing in the checkout.
mkdir "$work/src" && (cd "$repo" && git ls-files -z | xargs -0 cp --parents -t "$work/src" 2>/dev/null || cp -r "$repo/." "$work/src")
pip install --upgrade --upgrade-strategy eager "$work/src[test]"
"$work/venv/bin/python" -m pip list --format=freeze 2>/dev/null | grep -iE '^(typer|click|rich|pydantic|numpy|pandas|scipy|matplotlib|pyyaml|ruamel.yaml|httpx|msgspec)==' | tr '\n' ' ' >&2
echo >&2
cd "$work"
env -u PYTHONPATH KVCAL_CLI="$work/venv/bin/kvcal" KVCAL_CORPUS_SAMPLE=${KVCAL_CORPUS_SAMPLE:-class} "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir "$work/src" "$work/src/tests/cli/test_installed_cli.py" "$@"
