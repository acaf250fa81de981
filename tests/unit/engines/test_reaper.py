"""The watchdog kills guarded process groups when its owner dies, even by SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil


def _wait_gone(pid: int, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_sigkilled_owner_leaves_no_server_behind(tmp_path):
    pid_file = tmp_path / "server.pid"
    owner = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from kvcal.engines.reaper import shared_reaper
        server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        shared_reaper().watch(server.pid)
        open({str(pid_file)!r}, "w").write(str(server.pid))
        time.sleep(600)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", owner])
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "owner never started its server"
        time.sleep(0.1)
    server_pid = int(pid_file.read_text())
    assert psutil.pid_exists(server_pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_gone(server_pid), "the server outlived its SIGKILLed owner"


def test_forgotten_groups_are_left_alone():
    from kvcal.engines.reaper import Reaper

    keeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        reaper = Reaper()
        reaper.watch(keeper.pid)
        reaper.forget(keeper.pid)
        reaper.close()
        assert keeper.poll() is None
    finally:
        keeper.kill()
        keeper.wait()
