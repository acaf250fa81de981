"""The ``kvcal`` entry point: builds the Typer app and owns the single error boundary.

Each command lives in its own module with a ``register(app)`` function; this module
only wires them together and maps every exception to one line and an exit code:

* usage errors (unknown flag, bad value, missing argument) -> typer's usage message, exit 2;
* :class:`~kvcal.errors.KvcalError` -> its message, its ``exit_code``;
* an ``OSError`` that names a file the command was given -> an input error, exit 2;
* anything else -> ``internal error: ...``, exit 70 (``KVCAL_DEBUG=1`` prints the traceback).

Why the click exception class is looked up through typer: recent typer releases carry
their own copy of click (``typer._click``) and no longer install ``click``; older ones
use ``click``. The class typer raises is whatever ``typer.BadParameter`` derives from.

The command modules import only typer and light kvcal modules at the top: numpy,
pandas, scipy and matplotlib are imported where a command runs, so ``--help`` stays
fast (benchmarks/cli_startup.py; tests/unit/cli/test_cli_boundary.py checks it). The
top-level help imports no command module at all: it is rendered from
:data:`kvcal.cli.commands.INDEX` (see there). An invocation that may print a help loads typer's renderer
without what no help uses, the garbage collector paused (kvcal/cli/rich_help.py). ``app``: the whole app, built once.
"""

from __future__ import annotations

import errno
import functools
import inspect
import io
import math
import os
import sys
import warnings
from typing import TYPE_CHECKING, cast

import rich.console
import typer

from kvcal import __version__
from kvcal.cli import commands
from kvcal.cli.output import configure_logging, error_line, library_warning
from kvcal.cli.rich_help import HelpFlagGroup, help_path, resume_collector
from kvcal.errors import InputError, KvcalError
from kvcal.files.writing import checked_stdout, unclaim_stdout

if TYPE_CHECKING:
    import click

EXIT_INTERNAL = 70  # EX_SOFTWARE in sysexits.h
DEBUG_ENV = "KVCAL_DEBUG"
# A write to stdout or stderr that failed: a full disk or a dead terminal, not a bug of kvcal.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS, errno.EFBIG, errno.EBADF}

ROOT_FLAGS = {"-h", "--help", "--version", "-v", "--verbose"}
HELP_FLAGS = {"-h", "--help"}
_LOGGING = {"verbose": False}  # the root's --verbose: a help loads no logging (kvcal/cli/output.py, about 3 ms)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvcal {__version__}")
        raise typer.Exit()


def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log library detail to stderr."),
) -> None:
    _LOGGING["verbose"] = verbose  # configured where a command runs (_pipe_checked), not for a help


def _listed_only() -> None:
    """Never runs: an invocation that names a command gets the whole app."""


def build_app(*, index_only: bool = False, only: str | None = None) -> typer.Typer:
    """The kvcal app: every command registered, ``only`` that one, or (``index_only``) stand-ins that only list them."""
    built = typer.Typer(
        name="kvcal",
        help="Measure when pulling KV cache from a peer beats recomputing the prefix, and emit the threshold.",
        no_args_is_help=True,
        cls=HelpFlagGroup,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    built.callback()(_root)
    if index_only:
        for name, summary in commands.INDEX:
            built.command(name, help=summary)(_listed_only)
        return built
    for module in commands.load(commands.MODULES if only is None else (commands.MODULE_OF[only],)):
        module.register(built)
    _apply_shared_checks(built)
    return built


@functools.cache
def full_app() -> typer.Typer:
    return build_app()


def __getattr__(name: str):
    if name == "app":  # ``from kvcal.cli.app import app``: the whole app, built once
        return full_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _app_for(args: list[str]) -> typer.Typer:
    """The index for the command list, one command's app when one is named (its imports alone), else the whole app."""
    if lists_commands_only(args):
        return build_app(index_only=True)
    named = commands.named_command(args)
    return build_app(only=named) if named is not None else full_app()


def may_print_help(args: list[str]) -> bool:
    """True when typer may render a help or a usage error: a help flag, nothing at all, or a bare command."""
    return not args or not HELP_FLAGS.isdisjoint(args) or (len(args) == 1 and not args[0].startswith("-"))


def lists_commands_only(args: list[str]) -> bool:
    """True when ``args`` name no command: the top-level help, the version, or nothing at all."""
    return all(arg in ROOT_FLAGS for arg in args)


def _click_exception_class() -> type[click.ClickException]:
    """The ClickException class of the click that typer actually uses (vendored or not)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cast("type[click.ClickException]", cls)
    return cast(
        "type[click.ClickException]", typer.BadParameter
    )  # pragma: no cover - every typer release derives from it


ClickException = _click_exception_class()


def _flag_name(parameter: inspect.Parameter) -> str:
    decls = getattr(parameter.default, "param_decls", None) or ()
    longs = [d for d in decls if d.startswith("--")]
    return longs[0] if longs else "--" + parameter.name.replace("_", "-")


class ReaderLeft(Exception):
    """The reader of stdout left (``kvcal ... | head -1``): the command ends quietly with 141.

    Not an OSError on purpose: typer turns a broken pipe into exit 1, which is compare's
    "regression" code; this passes through it to :func:`main`.
    """


def _reader_left(*_: object) -> None:
    raise ReaderLeft


def _pipe_checked(callback):
    """Wrap a command so that a write to a reader that left reaches :func:`main` as :class:`ReaderLeft`."""

    @functools.wraps(callback)
    def checked(*args, **kwargs):
        resume_collector()  # a command runs after all: no longer a help (kvcal/cli/rich_help.py)
        configure_logging(_LOGGING["verbose"])
        try:
            return callback(*args, **kwargs)
        except BrokenPipeError:
            raise ReaderLeft from None

    return checked


OUTPUT_PARAMETERS = {"output", "markdown", "plot", "output_dir", "dashboard", "propose_fit"}  # written: `-` is stdout


def _stdin_for_dash(callback):
    """Wrap a command so that ``-`` for a file it reads is standard input (read once, kvcal/files/reading.py)."""
    inputs = [
        p.name
        for p in inspect.signature(callback).parameters.values()
        if "Path" in str(p.annotation) and p.name not in OUTPUT_PARAMETERS
    ]
    if not inputs:
        return callback

    @functools.wraps(callback)
    def checked(*args, **kwargs):
        from kvcal.files.reading import STDIN, stdin_copy

        for name in inputs:
            value = kwargs.get(name)
            if isinstance(value, (list, tuple)):
                kwargs[name] = type(value)(stdin_copy() if str(v) == STDIN else v for v in value)
            elif value is not None and str(value) == STDIN:
                kwargs[name] = stdin_copy()
        return callback(*args, **kwargs)

    return checked


def _refuse_non_finite(callback):
    """Wrap a command so that nan or inf in any float flag is an input error naming the flag.

    Done here, on the functions, rather than in click types, because typer's parameter
    machinery differs between releases while the signatures it reads do not.
    """
    floats = [
        p
        for p in inspect.signature(callback).parameters.values()
        if p.annotation in (float, "float", "Optional[float]", "float | None")
    ]
    if not floats:
        return callback

    @functools.wraps(callback)
    def checked(*args, **kwargs):
        for parameter in floats:
            value = kwargs.get(parameter.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise InputError(f"{_flag_name(parameter)} must be a finite number, got {value}")
        return callback(*args, **kwargs)

    return checked


def reflow_prose(epilog: str | None) -> str | None:
    """An epilog's prose paragraphs on one line each, so the help wraps them at the terminal's width.

    Typer keeps single line breaks in an epilog, so prose broken at 88 columns came out
    ragged in an 80-column terminal. Paragraphs with an indented line (the examples)
    keep their breaks.
    """
    if not epilog:
        return epilog
    paragraphs = epilog.split("\n\n")
    return "\n\n".join(
        p if any(line.startswith(" ") for line in p.splitlines()) else " ".join(p.split("\n")) for p in paragraphs
    )


def _apply_shared_checks(typer_app: typer.Typer) -> None:
    for info in typer_app.registered_commands:
        info.callback = _pipe_checked(_stdin_for_dash(_refuse_non_finite(info.callback)))
        info.epilog = reflow_prose(info.epilog)
    for group in typer_app.registered_groups:
        group.cls = HelpFlagGroup
        if group.typer_instance is not None:
            _apply_shared_checks(group.typer_instance)


def not_utf8(args: list[str]) -> str | None:
    """Why an argument cannot be taken, when one holds bytes that are not UTF-8, else None.

    Every name and path kvcal is given may end up in a UTF-8 record (run.json, fit.json)
    or on the console; such bytes reach Python as lone surrogates, which neither can hold.
    """
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as err:
            try:  # the bytes as given, escaped: 'bad\xff'
                shown = arg.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            except UnicodeEncodeError:
                shown = arg.encode("utf-8", "backslashreplace").decode("ascii")
            return (
                f"argument '{shown}' is not UTF-8 text (character {err.start + 1}): kvcal records names and "
                "paths in UTF-8 files; use a UTF-8 name"
            )
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every error becomes a short report on stderr and an exit code, never a traceback."""
    args = sys.argv[1:] if argv is None else list(argv)
    unclaim_stdout()
    _guard_streams()
    if (problem := not_utf8(args)) is not None:
        error_line(problem)
        return 2
    try:
        with help_path(may_print_help(args)):  # typer's renderer, lighter, and no collector (kvcal/cli/rich_help.py)
            result = _app_for(args)(args=args, standalone_mode=False, prog_name="kvcal")
        sys.stdout.flush()  # here, not at exit: a write that fails now is reported like any other
    except KvcalError as err:
        error_line(str(err))
        return err.exit_code
    except ClickException as err:  # usage errors: typer's usage line plus the error
        err.show()
        return err.exit_code
    except (typer.Exit, SystemExit) as done:
        code = getattr(done, "exit_code", getattr(done, "code", 0))
        return code if isinstance(code, int) else 1
    except typer.Abort:
        error_line("aborted")
        return 130
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except (BrokenPipeError, ReaderLeft):
        # `kvcal ... | head`: the reader left; nothing more to say to it.
        _silence_stdout()
        return 141
    except OSError as err:
        if err.filename is None and err.errno in WRITE_ERRNOS:
            error_line(f"the output could not be written: {err.strerror or err}")
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - kept open: what is pending would fail again at exit
            return 2
        if err.filename is None:
            return _internal(err)
        # A file or folder the user named could not be opened, read or written.
        where = err.filename if err.filename2 is None else f"{err.filename} -> {err.filename2}"
        error_line(f"{where}: {err.strerror or err}")
        return 2
    except Exception as err:
        return _internal(err)
    return result if isinstance(result, int) else 0


def _internal(err: BaseException) -> int:
    if os.environ.get(DEBUG_ENV, "") not in ("", "0"):
        import traceback

        traceback.print_exception(type(err), err, err.__traceback__, file=sys.stderr)
    detail = str(err) or type(err).__name__
    error_line(
        f"internal error: {type(err).__name__}: {detail} (a bug in kvcal; rerun with {DEBUG_ENV}=1 "
        "for the traceback and report it)"
    )
    return EXIT_INTERNAL


class _ClosedOutput(io.RawIOBase):
    """Standard output that the shell closed (``kvcal ... >&-``): a command that prints fails with EBADF.

    Dropping the output would end the command with 0 and nothing delivered; an error at
    the first write ends it with 2 and one line (the boundary's WRITE_ERRNOS). Unbuffered,
    so nothing is left pending to fail again at exit.
    """

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


class _ClosedText(io.TextIOBase):
    buffer = _ClosedOutput()
    encoding = "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text) -> int:
        return self.buffer.write(text)


def _guard_streams() -> None:
    """Closed standard streams: fds 0-2 held on /dev/null, so that a file kvcal opens never lands on them;
    stdout refuses writes (see :class:`_ClosedOutput`), stderr drops them (there is nowhere left to say anything).
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            held = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
            if held != fd:
                os.dup2(held, fd)
                os.close(held)
    if sys.stdout is None:
        sys.stdout = _ClosedText()
    sys.stdout = checked_stdout(sys.stdout)  # every byte written or an error, text escaped (kvcal/files/writing.py)
    if sys.stderr is None:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - stderr for the life of the process
    warnings.showwarning = library_warning  # a library's warning quotes what it was given: one safe line
    # Rich ends a command whose reader left with exit 1 (compare's "regression"); typer's help prints through rich.
    rich.console.Console.on_broken_pipe = _reader_left  # type: ignore[method-assign,assignment]  # rich's hook
    # An umask that takes the owner's own bits would leave run folders and files their owner cannot open.
    mask = os.umask(0o022)
    os.umask(mask & ~0o700)
    if mask & 0o700:
        print(
            f"kvcal: warning: umask {mask:04o} would make what kvcal writes unusable to you; "
            f"writing with umask {mask & ~0o700:04o}",
            file=sys.stderr,
        )


def _silence_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
