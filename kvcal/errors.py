"""One exception root for kvcal; the CLI maps each subclass to an exit code at a single boundary."""

from __future__ import annotations

from kvcal.terminal_text import flattened


def one_line(text: str, limit: int = 300) -> str:
    """Text from outside (what an engine or a server sent) on one line, control characters escaped
    (:mod:`kvcal.terminal_text`), cut at ``limit`` characters, for a message."""
    return flattened(text, limit)


class KvcalError(Exception):
    """Base of every error kvcal reports to a user as one line.

    A subclass states its exit code in its header, ``class GateError(KvcalError, exit_code=5)``,
    so the codes read as one table down the class lines; one that states none keeps its parent's.
    """

    exit_code = 2

    def __init_subclass__(cls, *, exit_code: int | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if exit_code is not None:
            cls.exit_code = exit_code


class InputError(KvcalError, exit_code=2):
    """A file, flag or value the user gave is missing, malformed or out of range."""


class EngineError(KvcalError, exit_code=4):
    """An engine failed to start, died, or answered in a way kvcal cannot use."""


class GateError(KvcalError, exit_code=5):
    """A probe gate failed persistently: the measurement cannot be trusted."""


class HardwareError(KvcalError, exit_code=6):
    """The requested engine or transport needs hardware this host lacks (e.g. a GPU)."""


class RegressionDetected(KvcalError, exit_code=1):
    """kvcal compare found a significant regression (exit 1 by contract)."""


class NotRecommended(KvcalError, exit_code=3):
    """P2P pull never wins on this setup: no threshold is emitted (exit 3 by contract)."""


class NoThreshold(KvcalError, exit_code=3):
    """The fit cannot support a threshold (interval open above, legs tie, disturbed host): exit 3, nothing on stdout."""
