"""Where a command may write: never over one of its own inputs or a run's records, never onto a folder.

Checked before any work is done, so a refused output costs nothing and damages nothing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from kvcal.errors import InputError

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
    if target.name in records and (folder / "run.json").is_file() or folder.name == "logs" and (folder.parent / "run.json").is_file():
        raise InputError(f"{flag} {path} is a record of the run in {folder}; write the output elsewhere")


def exclusive_backup(target: Path) -> Path:
    """Copy ``target`` to the first free ``NAME.bak``, ``NAME.bak.1``, ...; returns the backup.

    Each name is created with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a name that exists in any
    form, a dangling symbolic link included, is skipped, so the backup is never written
    through a link or over another file, even if one appears meanwhile.
    """
    import shutil

    target = Path(target)
    for n in range(1000):
        candidate = target.with_name(target.name + (".bak" if n == 0 else f".bak.{n}"))
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out, open(target, "rb") as src:
            shutil.copyfileobj(src, out)
        shutil.copystat(target, candidate, follow_symlinks=False)
        return candidate
    raise InputError(f"{target}: 1000 backups already exist beside it; clean them up")
