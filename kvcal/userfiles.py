"""Reading files a user names: one place that turns every way a path can be wrong into one line.

``read_bytes``/``read_text`` open with ``O_NONBLOCK`` and check the opened file with
``fstat``: a FIFO or device is refused instead of blocking forever, a directory is
called a directory (not "no such file"), an unreadable file says so, and text that is
not UTF-8 is named as such. Every failure is an :class:`~kvcal.errors.InputError`
naming the file (``what`` says which input it was, e.g. ``--values values.yaml``).

``load_json`` is how a JSON file a user gives becomes Python values: JSON may escape a lone
surrogate (``"\\ud800"``), which no UTF-8 output can hold, so a report, a plot or a JSON
dump of it would fail far from the file; each is escaped where it enters, as its text.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from kvcal.errors import InputError

KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
MAX_BYTES = 512 * 1024 * 1024  # no kvcal input comes near; a bigger one is a wrong file
MAX_LINE = 1024 * 1024  # a line a stream reader holds at once (router log lines are a few hundred bytes)


def describe(path: Path) -> str | None:
    """What is wrong with ``path`` as an input file, or None when it is a readable regular file so far."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "dangling symbolic link" if os.path.islink(path) else "no such file"
    except NotADirectoryError:
        return "no such file (a part of the path is a file, not a folder)"
    except OSError as err:
        return err.strerror or str(err)
    if not stat.S_ISREG(mode):
        return f"is {KINDS.get(stat.S_IFMT(mode), 'not a regular file')}, expected a file"
    return None


@contextlib.contextmanager
def _opened(path: Path, label: str) -> Iterator[BinaryIO]:
    """The file opened for reading once it is known to be a regular file of at most MAX_BYTES."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        problem = describe(path) if err.errno in (errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ELOOP) else None
        raise InputError(f"{label}: {problem or err.strerror or err}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(
                f"{label}: is {KINDS.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, expected a file"
            )
        if info.st_size > MAX_BYTES:
            raise InputError(f"{label}: {info.st_size:,} bytes is far too large for a kvcal input")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as handle:
            yield handle
    except OSError as err:
        raise InputError(f"{label}: cannot read ({err.strerror or err})") from None
    finally:
        os.close(fd)


def read_bytes(path: str | Path, what: str | None = None) -> bytes:
    """The whole file, or an InputError naming it."""
    path = Path(path)
    with _opened(path, what or str(path)) as handle:
        return handle.read()


def read_lines(path: str | Path, what: str | None = None) -> Iterator[tuple[int, str]]:
    """The file's UTF-8 lines, numbered from 1, read as they are needed (memory: one line, at most MAX_LINE
    bytes), or an InputError naming the file and line."""
    path = Path(path)
    label = what or str(path)
    with _opened(path, label) as handle:
        for number, raw in enumerate(iter(lambda: handle.readline(MAX_LINE + 1), b""), start=1):
            if len(raw) > MAX_LINE:
                raise InputError(f"{label} line {number}: longer than {MAX_LINE:,} bytes (is this the right file?)")
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as err:
                kind = "not a text file (binary data)" if b"\0" in raw else "not UTF-8 text"
                raise InputError(f"{label} line {number}: {kind} (byte {err.start} cannot be decoded)") from None


def read_text(path: str | Path, what: str | None = None, *, bom: bool = False) -> str:
    """The file as UTF-8 text (``bom``: drop a leading byte-order mark), or an InputError naming it."""
    data = read_bytes(path, what)
    try:
        return data.decode("utf-8-sig" if bom else "utf-8")
    except UnicodeDecodeError as err:
        kind = "not a text file (binary data)" if b"\0" in data[:4096] else "not UTF-8 text"
        raise InputError(f"{what or path}: {kind} (byte {err.start} cannot be decoded)") from None


def check_input(path: str | Path, what: str | None = None, *, folder_ok: bool = False) -> Path:
    """``path`` exists and is a regular file (or, with ``folder_ok``, a folder)."""
    path = Path(path)
    if folder_ok and path.is_dir():
        return path
    problem = describe(path)
    if problem is not None:
        raise InputError(f"{what or path}: {problem}")
    return path


STDIN = "-"  # as an input path: standard input, read once
_stdin_copy: list[Path] = []


def stdin_copy() -> Path:
    """Standard input, read once, as a file: every loader then reads it like any other (and may peek and reread).

    The copy lies in a private temporary folder, removed at exit. A second ``-`` in one
    command is refused: standard input can be read once.
    """
    if _stdin_copy:
        raise InputError("- names standard input twice; it can be read once: give a file for the other")
    import atexit
    import shutil
    import sys
    import tempfile

    stream = sys.stdin.buffer if sys.stdin is not None else None
    data = stream.read(MAX_BYTES + 1) if stream is not None else b""
    if len(data) > MAX_BYTES:
        raise InputError(f"standard input: more than {MAX_BYTES:,} bytes is far too large for a kvcal input")
    folder = Path(tempfile.mkdtemp(prefix="kvcal-stdin-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    copy = folder / "stdin"
    copy.write_bytes(data)
    _stdin_copy.append(copy)
    return copy


def is_stdin_copy(path: str | Path) -> bool:
    """Whether ``path`` is the copy of standard input: nothing may be written beside it (it is removed at exit)."""
    return bool(_stdin_copy) and Path(path).parent == _stdin_copy[0].parent


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")  # the only way a JSON text holds one (\ud800-\udfff)


def load_json(text: str) -> Any:
    """``json.loads(text)``, every string holding a lone surrogate escaped (``\\ud800`` as those six characters).

    Raises what ``json.loads`` raises. A text without a surrogate escape is returned as parsed, unwalked.
    """
    data = json.loads(text)
    if not _SURROGATE.search(text):
        return data
    if not isinstance(data, (dict, list)):
        return _encodable(data) if isinstance(data, str) else data
    stack: list[Any] = [data]
    while stack:  # a loop, not recursion: as deep as json.loads went, and no deeper
        node = stack.pop()
        items = list(node.items()) if isinstance(node, dict) else list(enumerate(node))
        if isinstance(node, dict):
            node.clear()
        for key, value in items:
            value = _encodable(value) if isinstance(value, str) else value
            if isinstance(value, (dict, list)):
                stack.append(value)
            node[_encodable(key) if isinstance(key, str) else key] = value
    return data


def _encodable(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text
