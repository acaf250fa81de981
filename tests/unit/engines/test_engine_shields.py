"""A plain pip install's broken packages are blocked in every interpreter an engine starts (issue 29)."""

from __future__ import annotations

import os
import subprocess
import sys

from kvcal.transports.base import Role
from kvcal.engines.vllm import VllmPair, VllmSettings

# What vLLM does on a cold model-info cache: the server's interpreter starts a fresh one
# (python -m vllm.model_executor.models.registry) whose transformers looks for torchvision.
LOOK = "import importlib.util; print(importlib.util.find_spec('torchvision'))"
SERVER = (f"import subprocess, sys; {LOOK}; sys.stdout.flush(); "
          f"subprocess.run([sys.executable, '-c', {LOOK!r}], check=True)")


def test_every_interpreter_the_engine_starts_sees_a_broken_torchvision_as_absent(tmp_path):
    site = tmp_path / "site"
    (site / "torchvision").mkdir(parents=True)
    # as the CUDA build does beside the CPU torch
    (site / "torchvision" / "__init__.py").write_text('raise RuntimeError("operator torchvision::nms does not exist")\n')
    # a distribution's own start-up hook, which kvcal's boot folder comes before: it must still run
    (site / "sitecustomize.py").write_text("print('distribution hook')\n")
    pair = VllmPair(VllmSettings(device="cpu", cache_dir=tmp_path / "cache", run_dir=tmp_path / "run"))
    env = {**os.environ, **pair.plan.env(Role.CONSUMER)}
    env.pop("KVCAL_BLOCKED_IMPORTS", None)
    env["PYTHONPATH"] += os.pathsep + str(site)
    done = subprocess.run([sys.executable, "-c", SERVER], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == ["distribution hook", "None", "distribution hook", "None"]
    assert "torchvision does not load beside this torch" in done.stderr  # said once, by the first interpreter
    assert done.stderr.count("does not load") == 1


def test_the_engine_command_shows_the_boot_folder_first_on_the_path(tmp_path):
    pair = VllmPair(VllmSettings(device="cpu", cache_dir=tmp_path / "cache", run_dir=tmp_path / "run"))
    path = pair.plan.env(Role.PRODUCER)["PYTHONPATH"].split(os.pathsep)
    assert path[0].endswith(os.path.join("kvcal", "engines", "boot"))
    assert all(f"PYTHONPATH={path[0]}" in command for command in pair.plan.commands())
