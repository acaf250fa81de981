"""One sweep per run folder: the folder is made atomically and held by a lock while a sweep runs.

``claim_run_folder`` makes a new run folder with ``mkdir`` (which fails if anything
already has that name, so two sweeps cannot both start the same run) and then takes an
exclusive ``flock`` on ``RUN/.lock``, writing its pid there. A second sweep or
``--resume`` on the folder finds the lock taken and refuses, naming that pid. The lock
is released when the sweep ends, and by the kernel when its process dies (even by
SIGKILL), so a crash never leaves a folder locked; the file stays as a harmless marker.

A start-up killed before it wrote run.json leaves only ``.lock`` and ``logs/``: a new
sweep of that name takes the folder over (the engine logs stay; engines append to them),
and ``--resume`` says to do that, since there is no plan to resume.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import Iterator
from pathlib import Path

from kvcal.errors import InputError

log = logging.getLogger(__name__)

LOCK_NAME = ".lock"
STARTUP_LEFTOVERS = {LOCK_NAME, "logs"}  # what a sweep makes before run.json


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", errors="replace").strip()
    except OSError:
        return "unknown"
    return text if text.isdigit() else "unknown"


def _make_folder(path: Path) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise InputError(f"--output-dir {path.parent}: a file is in the way; give a folder") from None
    except OSError as err:
        raise InputError(f"--output-dir {path.parent}: cannot create it ({err.strerror or err})") from None
    try:
        os.mkdir(path)
    except FileExistsError:
        if not unfinished_startup(path):
            raise InputError(
                f"run folder {path} already exists; add --resume to continue it or choose another --name"
            ) from None
        log.warning(
            "run folder %s holds %s: a start-up that never wrote run.json; starting this sweep in it "
            "(its engine logs are kept)",
            path,
            " and ".join(sorted(os.listdir(path))) or "nothing",
        )
    except NotADirectoryError:
        raise InputError(f"--output-dir {path.parent}: a file is in the way of the run folder") from None
    except OSError as err:
        raise InputError(f"{err.filename or path}: cannot create the run folder ({err.strerror or err})") from None


@contextlib.contextmanager
def claim_run_folder(path: Path, *, new: bool) -> Iterator[Path]:
    """Hold ``path`` for one sweep: create it first when ``new``; refuse when another sweep holds it."""
    path = Path(path)
    if new:
        _make_folder(path)
    elif not path.is_dir():
        raise InputError(f"no run to resume at {path}")
    lock_path = path / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as err:
        raise InputError(f"{lock_path}: cannot open the run's lock file ({err.strerror or err})") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise InputError(
                f"run folder {path} is in use by another kvcal sweep (pid {_holder(fd)}); "
                "wait for it to finish or stop it, then --resume"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        try:
            yield path
        except BaseException:
            if new:
                _remove_if_unused(path)
            raise
    finally:
        os.close(fd)  # releases the flock


def _remove_if_unused(path: Path) -> None:
    """A new folder the sweep refused before writing anything: gone, so the same --name works next time.

    Only the lock and an empty logs/ count as nothing; an engine's logs or any record stay.
    """
    try:
        entries = {p.name: p for p in path.iterdir()}
        if set(entries) - {LOCK_NAME, "logs"} or ("logs" in entries and any(entries["logs"].iterdir())):
            return
        if "logs" in entries:
            entries["logs"].rmdir()
        (path / LOCK_NAME).unlink(missing_ok=True)
        path.rmdir()
    except OSError:
        pass  # a leftover folder is an inconvenience, not a loss


def holder_pid(path: Path) -> int | None:
    """The pid of the sweep holding ``path``, or None when no sweep holds it."""
    lock_path = Path(path) / LOCK_NAME
    try:
        fd = os.open(lock_path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            text = _holder(fd)
            return int(text) if text.isdigit() else None
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def unfinished_startup(path: Path) -> bool:
    """``path`` is what a sweep killed during start-up leaves: no run.json, only the lock and logs, no sweep alive."""
    try:
        names = set(os.listdir(path))
    except OSError:
        return False
    return names <= STARTUP_LEFTOVERS and holder_pid(path) is None


def no_run_to_resume(path: Path) -> str:
    """What ``--resume`` says of a folder without run.json."""
    if unfinished_startup(path):
        return (
            f"{path} holds no run.json: its start-up never finished, so there is no plan to resume; "
            "run the same sweep without --resume to start it in that folder (its engine logs are kept)"
        )
    return f"no run to resume at {path} (no run.json)"


def live_sweep(path: Path, planned: int, done: int) -> str | None:
    """A note when a sweep still holds ``path`` (``done`` of its ``planned`` probes are in), else None."""
    pid = holder_pid(path)
    if pid is None:
        return None
    return (
        f"the sweep of {path} is still running (pid {pid}): {done} of the {planned} planned probes are in; "
        "this fit is of those only: fit again when it ends"
    )
