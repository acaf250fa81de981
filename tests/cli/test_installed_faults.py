"""Faults of the file system and of the files themselves, through the INSTALLED ``kvcal`` script.

- A full disk (a small tmpfs, mounted as root; skipped with the reason elsewhere): every
  file that existed before a failed write is byte-identical, and no partial new file remains.
- Run folders with crafted numbers: every command that reads them exits 2 with the line
  and the reason, never 70.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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
