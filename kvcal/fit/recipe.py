"""The llm-d calibration recipe's own verdict lines, read before its table is fitted.

The recipe ends a failed run with one of three lines, then exits 1 and prints no
threshold (see /work/shared/reference/llm-d-upstream.md):

* ``CONTROL CONTAMINATED: ...`` a no-pull control moved bytes;
* ``RUN DISCARDED: ...``;
* ``NO PULL EVER FIRED: ...``.

A log carrying any of them is not a measurement: ``kvcal fit`` refuses it with the
recipe's own line (exit 2). ``NO CROSSOVER in the tested range: ...`` is different:
the pulls fired and never won, a valid measurement whose answer is "do not pull", so the
fit's status is ``recompute-always-wins``.

The recipe counts a length only when its own pulls moved bytes (``pulled_MB > 0``); a
row with 0 MB timed recompute against recompute and is excluded as a non-pull (counted
in ``n_invalid_excluded``).
"""

from __future__ import annotations

import re

from kvcal.errors import InputError

FAILURE_MARKERS = ("CONTROL CONTAMINATED", "RUN DISCARDED", "NO PULL EVER FIRED")
NO_CROSSOVER = "NO CROSSOVER in the tested range"
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+")  # kubectl logs --timestamps


def unstamped(line: str) -> str:
    """The line without the RFC 3339 stamp ``kubectl logs --timestamps`` puts before it."""
    return _STAMP.sub("", line, count=1)


def check_verdict(path: object, text: str) -> str | None:
    """Raise InputError on a failure line; return the NO CROSSOVER line when present, else None."""
    no_crossover = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = unstamped(raw).strip()
        for marker in FAILURE_MARKERS:
            if marker in line:  # also behind a logger's prefix, e.g. "ERROR RUN DISCARDED: ..."
                raise InputError(
                    f"{path} line {number}: the recipe reported a failed run, not a measurement: "
                    f"{line[line.index(marker) :]} (fix what it names and rerun the calibration Job)"
                )
        if NO_CROSSOVER in line:
            no_crossover = line[line.index(NO_CROSSOVER) :]
    return no_crossover
