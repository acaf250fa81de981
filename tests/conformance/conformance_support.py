"""Helpers of the conformance tier (see conftest.py): the environment, the judge, a page server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from functools import lru_cache
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
JUDGE = Path(__file__).with_name("vllm_judge.py")
KVCAL = os.environ.get("KVCAL_CLI") or str(Path(sys.executable).with_name("kvcal"))
TINY_CONFIG = {  # a local config.json where vLLM needs a model config (no hub is reachable)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
    "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 1024,
    "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16", "tie_word_embeddings": False,
}


@lru_cache
def vllm_python() -> str:
    """The conformance environment's interpreter, built on first use (about two minutes cold)."""
    if os.environ.get("KVCAL_CONFORMANCE") == "0":
        pytest.skip("KVCAL_CONFORMANCE=0: the vLLM 0.33 conformance tier is off")
    if os.environ.get("KVCAL_CONFORMANCE_PYTHON"):  # an environment made elsewhere (same pins)
        return os.environ["KVCAL_CONFORMANCE_PYTHON"]
    done = subprocess.run(["bash", str(REPO / "scripts" / "conformance_env.sh")], capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        pytest.fail(f"scripts/conformance_env.sh failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def judge(mode: str, request: Any, tmp_path: Path) -> Any:
    """Run vllm_judge.py ``mode`` in the conformance environment on ``request``; its JSON answer."""
    answer = tmp_path / f"judge-{mode}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = vllm_python()
    # vLLM's model-info cache beside the environment: warm after the first run (a cold one costs a subprocess).
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CACHE_ROOT=str(Path(python).parents[1] / "vllm-cache"),
               VLLM_LOGGING_LEVEL="WARNING")
    done = subprocess.run([python, str(JUDGE), mode, str(answer)], input=json.dumps(request), capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, f"vllm_judge.py {mode} failed:\n{done.stderr[-4000:]}"
    return json.loads(answer.read_text())


class PageServer:
    """A loopback server that answers /metrics with the page set last and /v1/models with one model."""

    def __init__(self) -> None:
        self.page = ""
        self.models: dict[str, Any] = {"data": [{"id": "kvcal-model", "root": "/models/m", "max_model_len": 4096}]}
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                body = owner.page if self.path == "/metrics" else json.dumps(owner.models)
                data = body.encode()
                self.send_response(200 if self.path in ("/metrics", "/v1/models") else 404)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
