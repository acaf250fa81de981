#!/usr/bin/env bash
# Make (once) and print the path of the conformance environment: a venv holding the vllm==0.33.0
# wheel's Python code (its compiled .so files left out), vLLM's import-time dependencies that
# need no GPU, and the CPU torch 2.13.0. The conformance tests (pytest -m conformance) run
# vLLM's own parser, config classes, offloading constructors and Prometheus loggers in this
# interpreter, with VLLM_TARGET_DEVICE=cpu, against what kvcal prints (docs/engines.md).
#
# The environment lives outside the git tree, under KVCAL_CONFORMANCE_HOME (default
# ~/.cache/kvcal), named by a hash of the pins below, so a changed pin builds a new one (and
# removes the old ones) and an unchanged one is reused; a lock keeps two test runs from
# building it at once. A cold build downloads the vLLM wheel (about 340 MB) and the
# dependencies from PyPI (about 2.5 minutes here); torch comes from the local wheel store when
# there is one.
# Usage: bash scripts/conformance_env.sh     (prints the env's python on stdout)
set -euo pipefail
python=${PYTHON:-python3}
vllm_version=0.33.0
torch_version=2.13.0
# vLLM 0.33.0's requirements (its wheel's Requires-Dist) less what needs a GPU or serves only a
# running engine: the GPU kernels (flashinfer, cutlass, tilelang, quack, deep-gemm, ...), torch's
# media builds (torchvision, torchaudio, torchcodec, PyNvVideoCodec, opencv), the JIT compilers
# (numba, ninja), compressed-tensors and the OTLP exporter; torch is pinned to the CPU 2.13.0 in the same resolve so that no
# dependency can pull a CUDA torch (vLLM itself pins 2.14.0, which these parts do not need).
deps=(
  "torch==$torch_version" regex cachetools psutil sentencepiece numpy "requests>=2.33.0" tqdm blake3
  py-cpuinfo "transformers>=5.16.1,<5.21.0" "huggingface_hub>=1.31.0" "tokenizers>=0.23.2"
  "safetensors>=0.6.2" "protobuf>=5.29.6" "fastapi[standard]>=0.133.0,<0.137.0" "starlette>=1.0.1"
  "aiohttp>=3.14.4" "openai>=2.25.0" "pydantic>=2.12.0" "orjson>=3.11.6" "prometheus_client>=0.18.0"
  "pillow>=13.0.0" "prometheus-fastapi-instrumentator>=8.0.0" "tiktoken>=0.6.0" typing_extensions
  filelock partial-json-parser "jsonschema>=4.23.0" "pyzmq>=25.0.0" msgspec pyyaml einops
  cloudpickle watchfiles python-json-logger pybase64 cbor2 ijson setproctitle "anthropic>=0.71.0"
  "model-hosting-container-standards>=0.1.14,<1.0.0" "opentelemetry-sdk>=1.27.0"
  "opentelemetry-api>=1.27.0" "opentelemetry-semantic-conventions-ai>=0.4.1"
  "mistral_common>=1.11.6" "depyf==0.20.0" "lark==1.2.2" "oss-harmony>=0.0.11" "mcp>=2.2.0,<3.0.0"
  "xgrammar==0.2.8" "llguidance>=1.7.0,<1.8.0" "outlines_core==0.2.14" "lm-format-enforcer==0.11.3"
)
home=${KVCAL_CONFORMANCE_HOME:-$HOME/.cache/kvcal}
pins=$(printf '%s\n' "vllm==$vllm_version" "${deps[@]}" | sha1sum | cut -c1-12)
env_dir="$home/conformance-vllm-$vllm_version-$pins"
mkdir -p "$home"
exec 9>"$home/.conformance-env.lock"
flock 9
if [ -f "$env_dir/.ready" ]; then
  echo "$env_dir/bin/python"
  exit 0
fi
rm -rf "$env_dir"
start=$(date +%s)
"$python" -m venv "$env_dir"
pip() { "$env_dir/bin/python" -m pip --disable-pip-version-check -q "$@"; }
pip install "${deps[@]}" >&2
wheel_dir=$(mktemp -d "${TMPDIR:-/tmp}/kvcal-vllm-wheel.XXXXXX")
trap 'rm -rf "$wheel_dir"' EXIT
pip download --no-deps -d "$wheel_dir" "vllm==$vllm_version" >&2
site=$("$env_dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
# The Python sources and the dist-info (vLLM reads its own version from it); no compiled part.
"$env_dir/bin/python" - "$wheel_dir"/vllm-"$vllm_version"-*.whl "$site" <<'PY'
import sys, zipfile
wheel, site = sys.argv[1], sys.argv[2]
with zipfile.ZipFile(wheel) as archive:
    kept = [n for n in archive.namelist() if not n.endswith(".so") and ".so." not in n]
    archive.extractall(site, members=kept)
PY
"$env_dir/bin/python" -c 'import torch, sys; assert "+cpu" in torch.__version__ or not torch.cuda.is_available(), torch.__version__' >&2
touch "$env_dir/.ready"
for old in "$home"/conformance-vllm-*; do  # environments of older pins
  [ "$old" = "$env_dir" ] || rm -rf "$old"
done
echo "kvcal: conformance environment (vllm $vllm_version, torch $torch_version CPU) built in $(( $(date +%s) - start )) s at $env_dir" >&2
echo "$env_dir/bin/python"
