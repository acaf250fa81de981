"""Where a command may write, and how: whole files or nothing, one writer at a time.

``check_output`` runs before any work is done, so a refused output costs nothing and
damages nothing: never over one of the command's own inputs or a run's records, never
onto a folder. ``write_file``/``replacing`` are the one way kvcal writes a file: to a
temporary file in the same folder, fsynced, renamed over the old one, so a full disk or
a crash leaves the old file as it was and no partial file behind. ``writer_lock``
serialises writers of one folder (an in-place Helm patch reads, patches and writes
under it, so a second patch waits and builds on the first instead of undoing it).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from kvcal.errors import InputError

WRITER_WAIT_S = 60.0  # an in-place patch or a fit's write holds the lock for well under a second

# What `kvcal sweep` owns in a run folder; only `kvcal fit` writes beside them (fit.json).
RUN_RECORDS = ("run.json", "probes.jsonl", "summary.csv", ".lock")


def _same(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _inside(child: Path, folder: Path) -> bool:
    try:
        child.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


def check_output(path: Path | None, flag: str, inputs: Iterable[Path | None] = (), *, fit_json: bool = False) -> None:
    """Refuse an output that is a folder, lies under a file, is one of ``inputs`` or a run's own record.

    ``fit_json``: the command is ``kvcal fit``, the one writer of a run folder's fit.json.
    """
    if path is None:
        return
    if str(path) == "-":  # read as stdout by most tools; here it would make a file named '-'
        raise InputError(f"{flag} -: this output goes to a file, not stdout; give a file name (./- for one named '-')")
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{flag} {path} is a folder; give a file name")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise InputError(f"{flag} {path}: {parent} is a file, not a folder")
    if path.is_symlink() and not path.exists():
        raise InputError(f"{flag} {path} is a dangling symbolic link; remove it or write elsewhere")
    records = RUN_RECORDS if fit_json else (*RUN_RECORDS, "fit.json")
    inputs = tuple(inputs)
    # A link is judged by what it points to as well as by its name: writing through
    # out.json -> run/probes.jsonl would replace the run's probes.
    for target in dict.fromkeys((path, Path(os.path.realpath(path)))):
        _refuse_inputs_and_records(target, path, flag, inputs, records)


def _refuse_inputs_and_records(target: Path, path: Path, flag: str, inputs: Iterable[Path | None],
                               records: tuple[str, ...]) -> None:
    for given in inputs:
        if given is None:
            continue
        given = Path(given)
        if _same(target, given) or (given.is_dir() and _inside(target, given) and target.name in records):
            raise InputError(f"{flag} {path} is an input of this command; write the output elsewhere")
    folder = target.parent
    if (target.name in records and (folder / "run.json").is_file()) or (folder.name == "logs" and (folder.parent / "run.json").is_file()):
        raise InputError(f"{flag} {path} is a record of the run in {folder}; write the output elsewhere")


def exclusive_backup(target: Path) -> Path:
    """Copy ``target`` to the first free ``NAME.bak``, ``NAME.bak.1``, ...; returns the backup.

    Each name is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a name that exists in any
    form, a dangling symbolic link included, is skipped, so the backup is never written
    through a link or over another file, even if one appears meanwhile.
    """
    target = Path(target)
    for n in range(1000):
        candidate = target.with_name(target.name + (".bak" if n == 0 else f".bak.{n}"))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        try:
            with os.fdopen(fd, "wb") as out, open(target, "rb") as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            shutil.copystat(target, candidate, follow_symlinks=False)
        except BaseException:
            candidate.unlink(missing_ok=True)  # a partial backup (a full disk) is worse than none
            raise
        return candidate
    raise InputError(f"{target}: 1000 backups already exist beside it; clean them up")


def write_file(path: str | Path, data: str | bytes, what: str) -> Path:
    """Replace ``path`` with ``data`` (text is UTF-8) as a whole; see :func:`replacing`."""
    with replacing(path, what) as handle:
        handle.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def replacing(path: str | Path, what: str) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` when the block ends without an error.

    The content goes to a hidden temporary file beside the target (same file system, so
    the rename is atomic), is fsynced, takes the old file's permissions and is renamed
    over it; the folder is fsynced after. Any failure removes the temporary file and
    leaves the old one untouched; an OSError becomes an InputError naming ``what``.
    A symbolic link is followed: the file it points to is replaced, the link stays.
    """
    target = Path(os.path.realpath(path))
    existed = target.exists()
    _make_folder(target.parent, what)
    tmp = target.with_name(f".{target.name}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        if existed:
            shutil.copymode(target, tmp)
        os.replace(tmp, target)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if isinstance(err, OSError):
            kept = "the old file is unchanged" if existed else "nothing was written"
            raise InputError(f"{what}: cannot write it ({err.strerror or err}); {kept}") from None
        raise
    _fsync_folder(target.parent)


@contextlib.contextmanager
def writer_lock(path: str | Path, what: str, *, wait_s: float = WRITER_WAIT_S) -> Iterator[None]:
    """Hold the folder of ``path`` against other kvcal writers; wait up to ``wait_s``, then refuse.

    The lock is an ``flock`` on the folder itself: nothing is left behind, and the
    kernel releases it when the holder dies. Not re-entrant: take it once per write.
    """
    folder = Path(os.path.realpath(path)).parent
    _make_folder(folder, what)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # an unreadable folder: the write itself will say what is wrong
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise InputError(f"{what}: another kvcal has been writing in {folder} for {wait_s:.0f} s; "
                                     "try again when it has finished") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # releases the flock


def _make_folder(folder: Path, what: str) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"{what}: cannot create the folder {folder} ({err.strerror or err})") from None


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable; a file system that cannot fsync a folder loses nothing by skipping it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
