"""Where a command may write, and how: whole files or nothing, one writer at a time.

``check_output`` runs before any work is done, so a refused output costs nothing and damages nothing: never over one
of the command's own inputs or a run's records, never onto a folder. ``write_file``/``replacing`` are the one way
kvcal writes a file: to a temporary file in the same folder, fsynced, renamed over the old one, so a full disk or a
crash leaves the old file as it was and no partial file behind. ``writer_lock`` serialises writers of one folder (an
in-place Helm patch reads, patches and writes under it, so a second patch waits and builds on the first instead of
undoing it).

``checked_stdout`` is the one way anything reaches standard output (the CLI installs it over ``sys.stdout`` at
start): every byte is written or the write fails. Python's own stdout drops the rest of a short write (a pipe whose
reader left part-way returns a short count, and both the text layer and ``-u``'s raw layer ignore it), so a report
cut off at 64 KiB ended 0 and claimed "wrote -"; here the rest is written again, which meets the closed reader as
EPIPE (exit 141 at the CLI's boundary). Text that cannot be encoded (a lone surrogate read from a JSON file, an
ASCII locale) is written escaped (``\\udcff``), as in files: ``write_file`` encodes the same way.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import io
import os
import select
import shutil
import stat
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, TextIO

from kvcal.errors import InputError


def _warn(message: str, *args: object) -> None:  # logging imported at the first warning: no --help writes one
    import logging

    logging.getLogger(__name__).warning(message, *args)


STDOUT = "-"  # as an output path: standard output
ENCODING_ERRORS = "backslashreplace"  # text that cannot be encoded is written escaped, never refused
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
    if _is_stdout_file(path):  # `-`, /dev/stdout: the report moves to stderr (kvcal/cli/output.py)
        claim_stdout(f"{flag} -")
        return
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


PLOT_FORMATS = (".png", ".svg")  # a plot's format is its extension; stdout, a device or a FIFO get PNG


def check_plot_name(path: str | Path, what: str) -> None:
    """Refuse a plot path whose extension names no format (``-`` and ``/dev/stdout`` are PNG on stdout)."""
    if Path(path).suffix.lower() not in PLOT_FORMATS and not written_through(path):
        raise InputError(f"{what}: the plot format is chosen by the extension; use .png or .svg")


def is_stdout(path: str | Path | None) -> bool:
    """``-``: the output goes to standard output (``./-`` names a file called '-')."""
    return path is not None and str(path) == STDOUT


_STDOUT_OWNER: list[str] = []  # the flag whose output goes to stdout in this process, if any


def claim_stdout(what: str) -> None:
    """``what`` (``--plot -``, or ``--json``) writes its data to stdout; a second claimant is refused.

    One command's data on stdout is one document: a plot and a JSON after it would be neither.
    """
    if _STDOUT_OWNER and _STDOUT_OWNER[0] != what:
        raise InputError(f"{_STDOUT_OWNER[0]} and {what} both ask for standard output; send one of them to a file")
    _STDOUT_OWNER[:] = [what]


def unclaim_stdout() -> None:
    """A new command starts with stdout unclaimed (the CLI calls this first: tests run many commands in one process)."""
    _STDOUT_OWNER.clear()


def stdout_claimed() -> bool:
    """Whether an output of this command goes to stdout: its report then goes to stderr, not into the data."""
    return bool(_STDOUT_OWNER)


def _refuse_inputs_and_records(
    target: Path, path: Path, flag: str, inputs: Iterable[Path | None], records: tuple[str, ...]
) -> None:
    for given in inputs:
        if given is None:
            continue
        given = Path(given)
        if _same(target, given) or (given.is_dir() and _inside(target, given) and target.name in records):
            raise InputError(f"{flag} {path} is an input of this command; write the output elsewhere")
    folder = target.parent
    if (target.name in records and (folder / "run.json").is_file()) or (
        folder.name == "logs" and (folder.parent / "run.json").is_file()
    ):
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
        handle.write(data.encode("utf-8", ENCODING_ERRORS) if isinstance(data, str) else data)
    return Path(path)


@contextlib.contextmanager
def replacing(path: str | Path, what: str) -> Iterator[BinaryIO]:
    """A binary handle whose content replaces ``path`` when the block ends without an error.

    The content goes to a hidden temporary file beside the target (same file system, so
    the rename is atomic), is fsynced, takes the old file's permissions and is renamed
    over it; the folder is fsynced after. Any failure removes the temporary file and
    leaves the old one untouched; an OSError becomes an InputError naming ``what``.
    A symbolic link is followed: the file it points to is replaced, the link stays.
    ``-``, standard output under any name (``/dev/stdout``) and whatever is not a regular
    file (a device, a FIFO) are written through, never replaced (see :func:`_written_through`).
    """
    if written_through(path):
        with _written_through(path, what) as handle:
            yield handle
        return
    target = Path(os.path.realpath(path))
    existed = target.exists()
    _make_folder(target.parent, what)
    tmp = target.with_name(f".{target.name}.{os.urandom(4).hex()}.tmp")
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
        with contextlib.suppress(OSError):  # a read-only file system refuses even the unlink of a missing file
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
    if written_through(path):
        yield  # written through, never replaced: there is no file of kvcal's to guard
        return
    folder = Path(os.path.realpath(path)).parent
    _make_folder(folder, what)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:  # an unreadable folder: the write itself will say what is wrong
        yield
        return
    try:
        deadline = time.monotonic() + wait_s
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:  # a wait of up to a minute says why it is quiet
                    waiting = True
                    _warn("%s: another kvcal is writing in %s; waiting up to %.0f s for it", what, folder, wait_s)
                if time.monotonic() > deadline:
                    raise InputError(
                        f"{what}: another kvcal has been writing in {folder} for {wait_s:.0f} s; "
                        "try again when it has finished"
                    ) from None
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


def written_through(path: str | Path) -> bool:
    """Whether a write to ``path`` goes into it as it is (stdout, a device, a FIFO) rather than replacing a file."""
    return _is_stdout_file(path) or _is_special(path)


def _is_stdout_file(path: str | Path) -> bool:
    """``-``, or a name of the file standard output is open on (``/dev/stdout``, ``/proc/self/fd/1``)."""
    if is_stdout(path):
        return True
    try:
        mine, given = os.fstat(sys.stdout.fileno()), os.stat(path)
    except (OSError, ValueError, AttributeError):  # no such path, or stdout closed or not a real file
        return False
    return (mine.st_dev, mine.st_ino) == (given.st_dev, given.st_ino)


def _is_special(path: str | Path) -> bool:
    """Whether ``path`` (links followed) exists and is not a regular file: a device, a FIFO, a socket."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)


@contextlib.contextmanager
def _written_through(path: str | Path, what: str) -> Iterator[BinaryIO]:
    """Write into standard output, a device or a FIFO as it is: renaming a file over it would destroy it.

    A failed write to stdout reaches the CLI's boundary as it is (a reader that left is
    exit 141, a full disk exit 2); one to a device or FIFO is an InputError naming ``what``.
    A FIFO without a reader is waited for, as a shell's ``>`` does, with a line saying so.
    """
    if _is_stdout_file(path):
        sys.stdout.flush()  # what was printed before comes first
        yield sys.stdout.buffer
        sys.stdout.buffer.flush()
        return
    try:
        fd = _open_special(path, what)
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
    except OSError as err:
        raise InputError(f"{what}: cannot write it ({err.strerror or err})") from None


def _open_special(path: str | Path, what: str) -> int:
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(path, flags | os.O_NONBLOCK)
    except OSError as err:
        if err.errno != errno.ENXIO or not stat.S_ISFIFO(os.stat(path).st_mode):
            raise
        _warn("%s is a FIFO with no reader yet; waiting for one", what)
        return os.open(path, flags)
    os.set_blocking(fd, True)
    return fd


class WholeWrites(io.RawIOBase):
    """A file descriptor written whole: a short write is continued until every byte is out or the write fails.

    A reader that left part-way makes the continuation fail with EPIPE (BrokenPipeError); a
    non-blocking descriptor (a parent that set O_NONBLOCK on a shared pipe) waits until it
    is writable instead of failing with EAGAIN.
    """

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd = fd

    def fileno(self) -> int:
        return self._fd

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            try:
                written = os.write(self._fd, view[done:])
            except BlockingIOError:
                select.select([], [self._fd], [])
                continue
            if written == 0:  # no progress and no error: nothing will take the rest
                raise BrokenPipeError(errno.EPIPE, "standard output took no more")
            done += written
        return done


def checked_stdout(stream: TextIO | io.TextIOBase) -> TextIO | io.TextIOBase:
    """``stream`` (standard output) again as a text stream over :class:`WholeWrites`, or as it is when it is not fd 1.

    Its encoding, line buffering and buffering (``-u``/PYTHONUNBUFFERED: none) are kept;
    text that cannot be encoded is escaped. A stream that is not fd 1 (a test's capture,
    a closed stdout's stand-in) or is already checked is returned unchanged.
    """
    try:
        if stream.fileno() != 1 or isinstance(getattr(stream, "buffer", None), (WholeWrites, _CheckedBuffer)):
            return stream
    except (OSError, ValueError, AttributeError):
        return stream
    stream.flush()
    raw = WholeWrites(1)
    unbuffered = isinstance(getattr(stream, "buffer", None), io.RawIOBase)
    binary: BinaryIO = raw if unbuffered else _CheckedBuffer(raw)  # type: ignore[assignment]  # raw, as -u has
    return io.TextIOWrapper(
        binary,
        encoding=getattr(stream, "encoding", None) or "utf-8",
        errors=ENCODING_ERRORS,
        line_buffering=bool(getattr(stream, "line_buffering", False)),
        write_through=unbuffered,
    )


class _CheckedBuffer(io.BufferedWriter):
    """The buffered layer over :class:`WholeWrites` (a class of its own so that a second install can tell it)."""
