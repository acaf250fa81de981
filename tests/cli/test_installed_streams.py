"""The INSTALLED ``kvcal`` script when its output cannot go where the shell sent it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def test_a_closed_stdout_is_no_traceback():
    # `kvcal profiles list >&-`: the import once crashed on sys.stdout being None
    done = subprocess.run(f"'{SCRIPT}' profiles list >&-", shell=True, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_under_stdout_is_a_one_line_error():
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(SCRIPT), "profiles", "list"], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["kvcal: error: the output could not be written: No space left on device"]


def test_export_to_dash_writes_the_table_to_stdout_and_no_file(tmp_path):
    sweep = subprocess.run([str(SCRIPT), "sweep", "--engine", "sim", "--prefix-lengths", "256,512", "--reps", "2",
                            "--output-dir", "runs", "--name", "r"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    done = subprocess.run([str(SCRIPT), "export", "runs/r", "-o", "-"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "prefix_tokens,leg,ttft_ms,rep,bytes_moved,started_at" and len(lines) == 1 + 8
    assert {line.split(",")[1] for line in lines[1:]} == {"recompute", "pull"}
    assert done.stderr.strip() == "kvcal: wrote 8 probes to stdout"
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("args", [["fit", "runs/r", "--output", "-"], ["plot", "runs/r", "-o", "-"]])
def test_a_dash_for_a_file_output_is_refused_not_made_into_a_file(args, tmp_path):
    sweep = subprocess.run([str(SCRIPT), "sweep", "--engine", "sim", "--prefix-lengths", "256,512", "--reps", "2",
                            "--output-dir", "runs", "--name", "r"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    done = subprocess.run([str(SCRIPT), *args], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "this output goes to a file, not stdout" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "-").exists()
