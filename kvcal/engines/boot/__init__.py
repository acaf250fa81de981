"""A folder the engine environment puts first on ``PYTHONPATH``: its ``sitecustomize`` shields every interpreter.

vLLM starts more interpreters than the server: it inspects a model class in a fresh
``python -m vllm.model_executor.models.registry`` when its model-info cache is cold, and
the engine core is a spawned process. A repair applied inside the server process reaches
none of them; Python imports ``sitecustomize`` at every start from the first folder on
its path that holds one, so each of them runs :func:`kvcal.engines.shields.apply_inherited`
before any of its own code (kvcal.engines.vllm_launch sets the path).
"""

from pathlib import Path

BOOT_DIR = Path(__file__).resolve().parent
