"""The fault suite through the installed script: an attach-mode sweep against loopback fake engines that misbehave.

Each ends the run with one line naming the engine (exit 4), stops on SIGINT or SIGTERM while a
stream never ends, refuses attached engines that disagree, and never records a block size that
contradicts the engines (tests/unit/engines/test_engine_faults.py holds the in-process faults).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fake_engine import FakeEngine
from kvcal.records.run import ProbeRecord

CONFIG = Path(__file__).parents[1] / "fixtures" / "hf_configs" / "llama-3.1-8b.json"
SCRIPT = Path(os.environ.get("KVCAL_CLI") or Path(sys.executable).with_name("kvcal"))


def _attach_setup(tmp_path: Path, probe_timeout_s: int) -> tuple[Path, Path]:
    """A model folder holding a config.json (the fakes' ``root``) and a campaign file with ``probe_timeout_s``."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(CONFIG, model / "config.json")
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(f"probe_timeout_s: {probe_timeout_s}\n")
    return model, campaign


def _attach_sweep(tmp_path: Path, campaign: Path, producer: FakeEngine, consumer: FakeEngine, *more: str) -> list[str]:
    """The installed script's attach-mode sweep against the two fakes, into ``tmp_path/runs/r``."""
    return [str(SCRIPT), "sweep", "--config", str(campaign), "--producer-url", producer.url, "--consumer-url",
            consumer.url, *more, "--output-dir", str(tmp_path / "runs"), "--name", "r"]


def _wait_for(condition, timeout_s: float) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout_s`` passes (False): a bound on a wait, not a timing check."""
    ends_at = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= ends_at:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("fault", ["endless-stream", "byte-a-second"])
def test_attach_sweep_against_an_engine_that_never_finishes_ends_cleanly(tmp_path, fault):
    """The contract's run, with probe_timeout_s 1 (the contract's 5 takes 15 s a case: docs/engines.md)."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=1)
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", fault, root=model) as consumer:
        done = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--max-attempts", "2",
                                            "--prefix-lengths", "64,128"),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode not in (0, 70), done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "Traceback" not in done.stderr and f"consumer at {consumer.url}" in last and "deadline" in last
    probes = tmp_path / "runs" / "r" / "probes.jsonl"
    records = [ProbeRecord.model_validate_json(line) for line in probes.read_text().splitlines()] if probes.exists() else []
    assert not [r for r in records if r.valid and (r.bytes_moved or 0) > 1e15]


STREAM_WAIT_S = 120  # kvcal's start-up and the pair's warm-up on a loaded machine; a hang fails here instead of never


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_stops_a_sweep_waiting_on_an_endless_stream(tmp_path, signum):
    """The probe deadline is 10 minutes: the run ends because of the signal, long before it."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=600)
    stderr = tmp_path / "stderr.txt"
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", "endless-stream", root=model) as consumer:
        with open(stderr, "w") as sink:
            # SIGINT at its default in kvcal whatever this process inherited: a shell without job control starts
            # background jobs with SIGINT ignored, and kvcal (as every program) leaves an ignored SIGINT ignored.
            proc = subprocess.Popen(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64"),
                                    stdout=subprocess.DEVNULL, stderr=sink, stdin=subprocess.DEVNULL,
                                    preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            # The consumer's stream has begun: kvcal is blocked reading it (or it ended, which fails below).
            began = _wait_for(lambda: consumer.streams > 0 or proc.poll() is not None, STREAM_WAIT_S)
            if not began or proc.poll() is not None:
                pytest.fail(f"kvcal never began the consumer's stream within {STREAM_WAIT_S} s "
                            f"(exit {proc.poll()}): {stderr.read_text()[-2000:]}")
            proc.send_signal(signum)
            code = proc.wait(timeout=120)
        finally:
            proc.kill()
            proc.wait()
    assert code not in (0, 70) and code != -signum  # kvcal's own handler ended it, cleanly


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
@pytest.mark.parametrize("producer_kw, consumer_kw, named", [
    ({"block_size": 64}, {"block_size": 16}, "block size 64 against 16"),
    ({"cache_dtype": "fp8"}, {"cache_dtype": "auto"}, "KV cache dtype fp8 against auto"),
    ({"root": "other-model"}, {}, "model other-model against "),
])
def test_attached_engines_that_disagree_are_refused_naming_both(tmp_path, producer_kw, consumer_kw, named):
    """Before, a producer with block size 64 and a consumer with 16 ran to exit 0 (only the consumer's page was read)."""
    model, campaign = _attach_setup(tmp_path, probe_timeout_s=2)
    with FakeEngine("producer", **{"root": model, **producer_kw}) as producer, \
            FakeEngine("consumer", **{"root": model, **consumer_kw}) as consumer:
        done = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64"),
                              capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 2, done.stderr
    assert producer.url in last and consumer.url in last and named in last
    assert not (tmp_path / "runs" / "r" / "probes.jsonl").exists()


@pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
def test_run_json_never_holds_a_block_size_that_contradicts_the_engines(tmp_path):
    from kvcal.records.manifest import RunManifest

    model, campaign = _attach_setup(tmp_path, probe_timeout_s=2)
    with FakeEngine("producer", root=model) as producer, FakeEngine("consumer", root=model) as consumer:
        given = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--block-size", "64"),
                               capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert given.returncode == 2 and "--block-size 64 contradicts the engines" in given.stderr, given.stderr
        left_out = subprocess.run(_attach_sweep(tmp_path, campaign, producer, consumer, "--prefix-lengths", "64",
                                                "--reps", "1"),
                                  capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert left_out.returncode not in (2, 70), left_out.stderr  # the fakes' 64 B/token may fail the byte gate (5)
    manifest = RunManifest.model_validate_json((tmp_path / "runs" / "r" / "run.json").read_text())
    assert manifest.settings.engine.block_size == manifest.setup.block_size == 16
