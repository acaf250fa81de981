"""The ``kvcal`` entry point: builds the Typer app and maps KvcalError to exit codes.

Each command lives in its own module with a ``register(app)`` function; this module
only wires them together and owns the single error boundary.
"""

from __future__ import annotations

import sys

import typer

from kvcal import __version__
from kvcal.cli import commands
from kvcal.cli.output import error_line
from kvcal.errors import KvcalError

app = typer.Typer(
    name="kvcal",
    help="Measure when pulling KV cache from a peer beats recomputing the prefix, and emit the threshold.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvcal {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log library detail to stderr."),
) -> None:
    import logging

    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")


for module in commands.ALL:
    module.register(app)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; every KvcalError becomes one line on stderr and its exit code."""
    try:
        result = app(args=argv, standalone_mode=False)
    except KvcalError as err:
        error_line(str(err))
        return err.exit_code
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        error_line("aborted")
        return 130
    except KeyboardInterrupt:
        error_line("interrupted")
        return 130
    except Exception as err:  # click usage errors and the like
        import click

        if isinstance(err, click.exceptions.ClickException):
            err.show()
            return err.exit_code
        raise
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
