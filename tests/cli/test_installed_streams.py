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
