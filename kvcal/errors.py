"""One exception root for kvcal; the CLI maps each subclass to an exit code at a single boundary."""

from __future__ import annotations


def one_line(text: str, limit: int = 300) -> str:
    """Text from outside (what an engine sent) flattened to one line and cut at ``limit`` characters, for a message."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


class KvcalError(Exception):
    """Base of every error kvcal reports to a user as one line."""

    exit_code = 2


class InputError(KvcalError):
    """A file, flag or value the user gave is missing, malformed or out of range."""

    exit_code = 2


class EngineError(KvcalError):
    """An engine failed to start, died, or answered in a way kvcal cannot use."""

    exit_code = 4


class GateError(KvcalError):
    """A probe gate failed persistently: the measurement cannot be trusted."""

    exit_code = 5


class HardwareError(KvcalError):
    """The requested engine or transport needs hardware this host lacks (e.g. a GPU)."""

    exit_code = 6


class RegressionDetected(KvcalError):
    """kvcal compare found a significant regression (exit 1 by contract)."""

    exit_code = 1


class NotRecommended(KvcalError):
    """P2P pull never wins on this setup: no threshold is emitted (exit 3 by contract)."""

    exit_code = 3


class NoThreshold(KvcalError):
    """The fit cannot support a threshold (interval open above, legs tie, disturbed host): exit 3, nothing on stdout."""

    exit_code = 3
