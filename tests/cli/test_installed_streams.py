"""The INSTALLED ``kvcal`` script when its output cannot go where the shell sent it, or goes to stdout by name.

- stdout closed (``>&-``): a command that prints exits 2 with one line; never 0 with the output lost.
- a reader that leaves early (``| head -1``): every command ends quietly with 141, never 1 (compare's code).
- ``-`` (and ``/dev/stdout``) as an output: the data on stdout, the command's report on stderr, no file '-'.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
CLOSED = "kvcal: error: the output could not be written: standard output is closed"
K8S = ["k8s-job", "--image", "img", "--model", "m", "--producer-url", "http://p:8200", "--consumer-url", "http://c:8200"]


def _kvcal(*args: str | Path, cwd: Path | None = None, **kw) -> subprocess.CompletedProcess:
    if "stdout" not in kw:
        kw.setdefault("capture_output", True)
    return subprocess.run([str(SCRIPT), *map(str, args)], cwd=cwd, timeout=300, stdin=subprocess.DEVNULL, **kw)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    """A small simulated run with its fit.json."""
    root = tmp_path_factory.mktemp("streams")
    sweep = _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "3", "--output-dir",
                   "runs", "--name", "r", cwd=root)
    assert sweep.returncode == 0, sweep.stderr
    fit = _kvcal("fit", "runs/r", "--resamples", "100", cwd=root)
    assert fit.returncode == 0, fit.stderr
    return root


COMMANDS = [["profiles", "list"], ["export", "runs/r", "-o", "-"], ["emit-config", "runs/r/fit.json", "--format", "json"],
            ["fit", "runs/r", "--json", "--resamples", "100", "-o", "runs/f.json"], ["--help"], K8S]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_closed_stdout_is_exit_2_with_one_line(ws, args):
    """Before, `export -o - >&-` said "wrote 102 probes to stdout" and exited 0."""
    cmd = " ".join(f"'{a}'" for a in [SCRIPT, *args])
    done = subprocess.run(f"{cmd} >&-", shell=True, cwd=ws, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == CLOSED and "Traceback" not in done.stderr


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_a_reader_that_left_ends_every_command_quietly_with_141(ws, args):
    """Before, export, fit --json, profiles list and --help exited 1 (compare's "regression") into `| head -1`."""
    read, write = os.pipe()
    os.close(read)  # the reader has left before the first write: the same as `| head -1` once it had its line
    try:
        done = _kvcal(*args, cwd=ws, stdout=write, stderr=subprocess.PIPE, text=True)
    finally:
        os.close(write)
    assert done.returncode == 141, done.stderr
    assert "error" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_under_stdout_is_a_one_line_error():
    with open("/dev/full", "w") as full:
        done = subprocess.run([str(SCRIPT), "profiles", "list"], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == ["kvcal: error: the output could not be written: No space left on device"]


def test_export_to_dash_writes_the_table_to_stdout_and_no_file(ws):
    done = _kvcal("export", "runs/r", "-o", "-", cwd=ws, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "prefix_tokens,leg,ttft_ms,rep,bytes_moved,started_at" and len(lines) == 1 + 18
    assert done.stderr.strip() == "kvcal: wrote 18 probes to stdout"
    assert not (ws / "-").exists()


@pytest.mark.parametrize("target", ["-", "/dev/stdout"])
def test_a_fit_to_stdout_is_the_fit_json_alone_with_the_report_on_stderr(ws, target):
    """Before, `-o -` was refused and `-o /dev/stdout` into a pipe said "No such file or directory"."""
    done = _kvcal("fit", "runs/r", "--resamples", "100", "-o", target, cwd=ws, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["schema"].startswith("kvcal.fit/") and "break-even" in done.stderr
    assert not (ws / "-").exists()


@pytest.mark.parametrize("args, magic", [(["plot", "runs/r/fit.json", "-o", "-"], b"\x89PNG"),
                                         ([*K8S, "-o", "-"], b"# kvcal k8s-job"),
                                         (["compare", "runs/r", "runs/r", "--markdown", "-"], b"")])
def test_dash_is_stdout_for_every_output(ws, args, magic):
    done = _kvcal(*args, cwd=ws)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(magic) and done.stdout and not (ws / "-").exists()
