"""GPU placement through the INSTALLED ``kvcal`` script on faked GPU hosts (issue 28, item 2).

An ``nvidia-smi`` stand-in first on PATH reports N GPUs; ``kvcal sweep --dry-run`` prints
each role's engine command, whose tensor x pipeline x data parallel sizes must fill
exactly the GPUs that role sees (its ``CUDA_VISIBLE_DEVICES``). On the old code every
engine ran at sizes 1 (no parallel flag), using one GPU of four.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kvcal.transports import transport_names

SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
SIZES = {"--tensor-parallel-size": "tp", "-tp": "tp", "--pipeline-parallel-size": "pp", "-pp": "pp",
         "--data-parallel-size": "dp", "-dp": "dp"}


def _host(tmp_path: Path, gpus: int) -> dict[str, str]:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    smi = fake / "nvidia-smi"
    smi.write_text("#!/bin/sh\n" + "echo 'NVIDIA H100 80GB HBM3'\n" * gpus)
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    return {**env, "PATH": f"{fake}{os.pathsep}{env.get('PATH', '')}"}


def _dry_run(tmp_path: Path, gpus: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), "sweep", "--dry-run", "--model", "M", "--max-model-len", "16384",
                           "--output-dir", str(tmp_path / "runs"), *args], env=_host(tmp_path, gpus), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def _engines(stdout: str) -> list[tuple[int, int]]:
    """(GPUs the role sees, tp x pp x dp of its engine) for each engine command printed."""
    found = []
    for line in stdout.splitlines():
        if line.startswith("#") or "kvcal.engines.serve" not in line:
            continue
        words = shlex.split(line)
        visible = next(w.split("=", 1)[1] for w in words if w.startswith("CUDA_VISIBLE_DEVICES="))
        sizes = {"tp": 1, "pp": 1, "dp": 1}
        for i, word in enumerate(words):
            name, _, value = word.partition("=")
            if name in SIZES:
                sizes[SIZES[name]] = int(value or words[i + 1])
        found.append((len(visible.split(",")), sizes["tp"] * sizes["pp"] * sizes["dp"]))
    return found


@pytest.mark.parametrize("transport", transport_names())
def test_on_eight_gpus_each_engine_fills_the_gpus_its_role_sees(tmp_path, transport):
    done = _dry_run(tmp_path, 8, "--transport", transport)
    assert done.returncode == 0, done.stderr
    assert _engines(done.stdout) == [(4, 4), (4, 4)]


@pytest.mark.parametrize("args, expected", [
    (["--share-gpu", "0.45,0.45"], [(8, 8), (8, 8)]),
    (["--producer-gpus", "0,1", "--consumer-gpus", "2,3,4,5"], [(2, 2), (4, 4)]),
    (["--engine-arg=-tp", "--engine-arg=2", "--engine-arg=--pipeline-parallel-size=2"], [(4, 4), (4, 4)]),
    (["--engine-arg=--data-parallel-size=2", "--engine-arg=--tensor-parallel-size=2"], [(4, 4), (4, 4)]),
])
def test_given_sizes_and_lists_are_honoured(tmp_path, args, expected):
    done = _dry_run(tmp_path, 8, *args)
    assert done.returncode == 0, done.stderr
    assert _engines(done.stdout) == expected


def test_sizes_that_miss_a_roles_gpus_are_refused_before_anything_starts(tmp_path):
    done = _dry_run(tmp_path, 8, "--engine-arg=--tensor-parallel-size=2")
    assert done.returncode == 2 and done.stdout == ""
    (line,) = done.stderr.strip().splitlines()
    assert "TP 2 x PP 1 x DP 1" in line and "producer sees 4" in line and "--producer-gpus/--consumer-gpus" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("gpus, expected", [(1, [(1, 1), (1, 1)]), (2, [(1, 1), (1, 1)])])
def test_small_hosts(tmp_path, gpus, expected):
    args = ["--share-gpu", "0.45,0.45"] if gpus == 1 else []
    done = _dry_run(tmp_path, gpus, *args)
    assert done.returncode == 0, done.stderr
    assert _engines(done.stdout) == expected
