"""Faults of the file system and of the files themselves, through the INSTALLED ``kvcal`` script.

- A full disk (a small tmpfs, mounted as root; skipped with the reason elsewhere): every
  file that existed before a failed write is byte-identical, and no partial new file remains.
- Run folders with crafted numbers: every command that reads them exits 2 with the line
  and the reason, never 70.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
VALUES = Path(__file__).resolve().parents[1] / "fixtures" / "values" / "router-p2p.yaml"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")


def _kvcal(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=300,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A small simulated run with its fit.json, an export and a plot beside it."""
    folder = tmp_path_factory.mktemp("base")
    sweep = _kvcal("sweep", "--engine", "sim", "--output-dir", folder, "--name", "run", "--prefix-lengths",
                   "256,1024,4096", "--reps", "30")
    assert sweep.returncode == 0, sweep.stderr
    for args in (("fit", folder / "run", "--resamples", "100"), ("export", folder / "run", "-o", folder / "p.csv"),
                 ("plot", folder / "run" / "fit.json", "-o", folder / "p.png")):
        done = _kvcal(*args)
        assert done.returncode == 0, done.stderr
    return folder


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 1 MiB tmpfs, unmounted after the test."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs to fill needs root")
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(mount: Path) -> None:
    fd = os.open(mount / ".filler", os.O_WRONLY | os.O_CREAT)
    try:
        for chunk in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * chunk)
            except OSError:
                continue
    finally:
        os.close(fd)


def _snapshot(mount: Path) -> dict[str, bytes]:
    return {str(p.relative_to(mount)): p.read_bytes() if p.is_file() else b"<folder>"
            for p in sorted(mount.rglob("*")) if p.name != ".filler"}


def _case(name: str, base: Path, mount: Path) -> list[str | Path]:
    """Put the case's existing files on the small disk; return the command that must fail to write there.

    Each existing file is smaller than what replaces it: truncating it in place frees too
    little for the new text, which is how a full disk cut files before.
    """
    if name == "fit -o":
        (mount / "fit.json").write_text("{}\n")
        return ["fit", base / "run", "--resamples", "100", "-o", mount / "fit.json"]
    if name == "fit RUN":
        shutil.copytree(base / "run", mount / "run")
        (mount / "run" / "fit.json").write_text("{}\n")
        return ["fit", mount / "run", "--resamples", "100"]
    if name == "export -o":
        (mount / "p.csv").write_text("prefix_tokens,leg,ttft_ms,rep,bytes_moved\n256,pull,1.0,0,\n")
        return ["export", base / "run", "-o", mount / "p.csv"]
    if name == "plot -o":
        (mount / "p.png").write_bytes(b"an older image\n")
        return ["plot", base / "run" / "fit.json", "-o", mount / "p.png"]
    shutil.copy(VALUES, mount / "values.yaml")
    return ["emit-config", base / "run" / "fit.json", "--format", "helm", "--values", mount / "values.yaml", "--in-place"]


@pytest.mark.parametrize("name", ["fit -o", "fit RUN", "export -o", "plot -o", "helm --in-place"])
def test_a_full_disk_keeps_every_old_file_whole_and_leaves_no_partial_file(name, base, small_disk):
    command = _case(name, base, small_disk)
    before = _snapshot(small_disk)
    _fill(small_disk)
    done = _kvcal(*command)
    assert done.returncode == 2, done.stderr
    assert "No space left on device" in done.stderr and "internal error" not in done.stderr
    assert _snapshot(small_disk) == before


CRAFTED = {
    "ttft 1e308": ('"ttft_ms":', "1e308"),
    "ttft NaN": ('"ttft_ms":', "NaN"),
    "ttft Infinity": ('"ttft_ms":', "Infinity"),
    "400-digit bytes": ('"bytes_moved":', "9" * 400),
    "1e400 bytes": ('"bytes_moved":', "1e400"),
}


def _crafted(base: Path, folder: Path, key: str, value: str) -> Path:
    shutil.copytree(base / "run", folder)
    (folder / "fit.json").unlink()
    lines = (folder / "probes.jsonl").read_text().splitlines()
    head, _, rest = lines[1].partition(key)
    lines[1] = head + key + value + rest[rest.index(","):]
    (folder / "probes.jsonl").write_text("\n".join(lines) + "\n")
    return folder


@pytest.mark.parametrize("case", sorted(CRAFTED))
def test_crafted_numbers_in_a_run_folder_are_input_errors(case, base, tmp_path):
    run = _crafted(base, tmp_path / "run", *CRAFTED[case])
    commands = [["fit", run], ["emit-config", run], ["plot", run, "-o", tmp_path / "p.png"],
                ["history", base / "run", run], ["compare", base / "run", run]]
    for command in commands if case == "ttft 1e308" else commands[:2] if case == "400-digit bytes" else commands[:1]:
        done = _kvcal(*command)
        assert done.returncode == 2, (command, done.stderr)
        assert "probes.jsonl line 2" in done.stderr and "internal error" not in done.stderr, done.stderr
    assert not (run / "fit.json").exists() and not (tmp_path / "p.png").exists()


def test_a_repeated_key_in_a_probes_line_is_refused_naming_the_line(base, tmp_path):
    """Before, {"ttft_ms": 5, ..., "ttft_ms": 900} loaded with the last value."""
    run = tmp_path / "run"
    shutil.copytree(base / "run", run)
    lines = (run / "probes.jsonl").read_text().splitlines()
    lines[2] = lines[2][:-1] + ', "ttft_ms": 900.0}'
    (run / "probes.jsonl").write_text("\n".join(lines) + "\n")
    done = _kvcal("fit", run, "--resamples", "100")
    assert done.returncode == 2, done.stderr
    assert "probes.jsonl line 3" in done.stderr and "'ttft_ms' is given twice" in done.stderr


def _reader(fifo: Path, got: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(fifo, "rb") as handle:
            got.append(handle.read())
    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("command", ["fit", "export", "plot"])
def test_an_output_that_is_no_regular_file_is_written_through_never_replaced(command, base, tmp_path):
    """Before, `-o /dev/null` as root renamed a regular file over /dev/null (and over a FIFO, a link to a device)."""
    link, fifo = tmp_path / "null-link", tmp_path / "fifo"
    link.symlink_to("/dev/null")
    os.mkfifo(fifo)
    args = {"fit": ["fit", base / "run", "--resamples", "100", "-o"], "export": ["export", base / "run", "-o"],
            "plot": ["plot", base / "run" / "fit.json", "-o"]}[command]
    for target in ("/dev/null", link):
        done = _kvcal(*args, target)
        assert done.returncode == 0, done.stderr
    got: list[bytes] = []
    thread = _reader(fifo, got)
    done = _kvcal(*args, fifo)
    thread.join(60)
    assert done.returncode == 0, done.stderr
    assert got and got[0][:1] in (b"{", b"p", b"\x89")  # fit.json, the CSV header, a PNG
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    if os.path.exists("/dev/full"):
        full = _kvcal(*args, "/dev/full")
        assert full.returncode == 2 and "/dev/full" in full.stderr and "No space left" in full.stderr, full.stderr
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_read_only_file_system_names_the_users_path_not_the_hidden_temp_file(base, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root")
    mount = tmp_path / "ro"
    mount.mkdir()
    done = subprocess.run(f"mount --bind '{mount}' '{mount}' && mount -o remount,ro,bind '{mount}'", shell=True,
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount read-only here: {done.stderr.strip()}")
    try:
        failed = _kvcal("export", base / "run", "-o", mount / "p.csv")
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
    assert failed.returncode == 2, failed.stderr
    assert f"-o {mount / 'p.csv'}" in failed.stderr and ".tmp" not in failed.stderr, failed.stderr


def test_umask_0777_leaves_a_run_folder_its_owner_can_use(tmp_path):
    """Before, the run folder and its files came out mode 000 with exit 0."""
    done = subprocess.run(f"umask 0777; '{SCRIPT}' sweep --engine sim --output-dir '{tmp_path}' --name r "
                          "--prefix-lengths 256 --reps 2", shell=True, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "umask 0777" in done.stderr
    for path in (tmp_path / "r", tmp_path / "r" / "probes.jsonl", tmp_path / "r" / "run.json"):
        assert os.stat(path).st_mode & 0o600 == 0o600, oct(os.stat(path).st_mode)


def test_a_full_disk_during_a_sweep_names_the_append_that_failed(small_disk):
    """Before, the error named summary.csv, written after the failed append."""
    done = _kvcal("sweep", "--engine", "sim", "--output-dir", small_disk, "--name", "r", "--prefix-lengths",
                  "256,1024,4096", "--reps", "400")
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "probes.jsonl: cannot append probe" in last and "No space left on device" in last, last


def test_a_400_digit_threshold_is_an_input_error_before_any_simulation(base):
    """Before, the whole fleet simulation ran and ended in "internal error: OverflowError" (exit 70)."""
    workload = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet-workload.yaml"
    done = _kvcal("fleet", base / "run" / "fit.json", "--workload", workload, "--thresholds", "1" + "0" * 400)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().startswith("kvcal: error: --thresholds") and "fleet run" not in done.stderr
