"""Every write to stdout checked, through the INSTALLED ``kvcal`` script (issue 55, item 6).

- a reader that leaves part-way (``| head -c 65536``): the command ends like a closed reader, exit 141,
  and claims nothing ("wrote -"); before, the short write went unnoticed and it exited 0;
- text that cannot be encoded (a lone surrogate read from a JSON file, an ASCII stdout) is written
  escaped, never an internal error (exit 70);
- ``--plot -`` wherever an output takes ``-`` (fleet refused it); two claims on stdout are refused.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet-workload.yaml"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
PIPE_BYTES = 4096  # the pipe's capacity, set small: what the reader leaves behind is far more than it holds


def _kvcal(*args: str | Path, cwd: Path, env: dict | None = None, text: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], cwd=cwd, capture_output=True, text=text, timeout=300,
                          stdin=subprocess.DEVNULL, env=env)


@pytest.fixture(scope="module")
def ws(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stdout")
    assert _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,512,1024,2048,4096", "--reps", "3",
                  "--output-dir", "runs", "--name", "r", cwd=root).returncode == 0
    assert _kvcal("fit", "runs/r", "--resamples", "100", cwd=root).returncode == 0
    return root


def _reader_leaves_after(args: list[str], cwd: Path, keep: int = PIPE_BYTES) -> tuple[int, bytes, str]:
    """Run kvcal into a pipe whose reader takes ``keep`` bytes and leaves: (exit code, bytes read, stderr)."""
    read, write = os.pipe()
    fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    proc = subprocess.Popen([str(SCRIPT), *args], cwd=cwd, stdout=write, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    os.close(write)
    got = b""
    while len(got) < keep:
        chunk = os.read(read, keep - len(got))
        if not chunk:
            break
        got += chunk
    os.close(read)  # the reader leaves with the rest unread, as `head -c` does
    _, err = proc.communicate(timeout=300)
    return proc.returncode, got, err.decode()


LONG_OUTPUTS = [["report", "runs/r", "-o", "-"], ["fit", "runs/r", "--resamples", "100", "-o", "-"],
                ["plot", "runs/r", "-o", "-"], ["compare", "runs/r", "runs/r", "--plot", "-"],
                ["history", "runs/r", "-o", "-"]]


@pytest.mark.parametrize("args", LONG_OUTPUTS, ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_a_reader_that_leaves_part_way_ends_the_command_with_141_and_nothing_claimed(ws, args):
    """Before, `report -o - | head -c 65536` exited 0 and said "wrote -": the short write went unnoticed."""
    whole = _kvcal(*args, cwd=ws, text=False)
    assert whole.returncode == 0 and len(whole.stdout) > 2 * PIPE_BYTES + 1024, (len(whole.stdout), whole.stderr)
    code, got, err = _reader_leaves_after(args, ws)
    assert code == 141, err
    assert got == whole.stdout[:PIPE_BYTES] or args[0] in ("fit", "report")  # a fresh fit or page stamps its time
    assert "wrote" not in err and "error" not in err and "Traceback" not in err


def _with_a_lone_surrogate(ws: Path) -> Path:
    """The run's fit.json with a warning holding a lone surrogate (a JSON \\ud800 escape), beside a copy of it."""
    folder = ws / "surrogate"
    folder.mkdir(exist_ok=True)
    fit = json.loads((ws / "runs" / "r" / "fit.json").read_text())
    fit["warnings"] = [*fit["warnings"], "bad \ud800 text"]
    fit["setup"]["model"] = "mo\udcffdel"  # shown in plots' titles, pages, the fleet's JSON
    (folder / "fit.json").write_text(json.dumps(fit))  # ensure_ascii: the file holds the escape, as a user's may
    return folder / "fit.json"


@pytest.mark.parametrize("target", ["-", "page.html"])
def test_a_lone_surrogate_in_a_fit_is_written_escaped_not_an_internal_error(ws, target):
    """Before, `kvcal report` of such a fit.json was exit 70 (UnicodeEncodeError), to stdout and to a file."""
    fit = _with_a_lone_surrogate(ws)
    done = _kvcal("report", fit, "-o", target, cwd=ws, text=False)
    assert done.returncode == 0, done.stderr
    page = done.stdout if target == "-" else (ws / target).read_bytes()
    assert b"bad \\ud800 text" in page
    page.decode("utf-8")  # whole, valid UTF-8


@pytest.mark.parametrize("args", [
    ["plot", "{fit}", "-o", "plot.png"],
    ["fleet", "{fit}", "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "256", "--seeds", "1",
     "--duration", "40", "--jobs", "1", "--json"],
    ["compare", "{fit}", "runs/r/fit.json", "--force", "--markdown", "-"],
    ["emit-config", "{fit}", "--format", "json", "-o", "emit.json"],
], ids=lambda a: a[0])
def test_a_lone_surrogate_read_from_json_is_escaped_where_it_enters(ws, args):
    """Before, a plot's title was exit 70 in matplotlib and fleet --json exit 70 in pydantic's serializer."""
    fit = _with_a_lone_surrogate(ws)
    done = _kvcal(*[a.replace("{fit}", str(fit)) for a in args], cwd=ws, text=False)
    assert done.returncode == 0, done.stderr
    assert b"internal error" not in done.stderr
    if args[0] in ("fleet", "compare"):  # the text escaped, in the output: fleet warns of it, compare names the model
        assert b"\\\\ud800" in done.stdout or b"mo\\udcffdel" in done.stdout


def test_text_an_ascii_stdout_cannot_hold_is_escaped(ws):
    """Before, `compare` into an ASCII stdout was exit 70 on its table's dash."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = _kvcal("compare", _with_a_lone_surrogate(ws), "runs/r/fit.json", "--force", cwd=ws, env=env, text=False)
    assert done.returncode == 0, done.stderr
    assert b"OK: break-even moved" in done.stdout and b"internal error" not in done.stderr
    done.stdout.decode("ascii")


def test_fleet_writes_its_plot_to_stdout(ws):
    """Before, `fleet --plot -` was refused ("the format is chosen by the extension") though the README lists it."""
    args = ["fleet", "runs/r/fit.json", "--workload", str(EXAMPLE), "--pods", "2", "--thresholds", "256",
            "--seeds", "1", "--duration", "40", "--jobs", "1", "--plot", "-"]
    done = _kvcal(*args, cwd=ws, text=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(b"\x89PNG") and b"recommended threshold" in done.stderr
    assert not (ws / "-").exists()


@pytest.mark.parametrize("args, says", [
    (["fit", "runs/r", "--resamples", "100", "--json", "-o", "-"], "--json and --output - both ask for standard output"),
    (["fleet", "runs/r/fit.json", "--workload", str(EXAMPLE), "--json", "--plot", "-"],
     "--json and --plot - both ask for standard output"),
])
def test_two_documents_for_stdout_are_refused(ws, args, says):
    """Before, `fit --json -o -` printed fit.json twice, one after the other: no longer one JSON document."""
    done = _kvcal(*args, cwd=ws)
    assert done.returncode == 2 and says in done.stderr and not done.stdout, done.stderr
