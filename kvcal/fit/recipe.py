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
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-]\d\d:?\d\d)?\s+")


def check_verdict(path: object, text: str) -> str | None:
    """Raise InputError on a failure line; return the NO CROSSOVER line when present, else None."""
    no_crossover = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _STAMP.sub("", raw, count=1).strip()
        for marker in FAILURE_MARKERS:
            if line.startswith(marker):
                raise InputError(f"{path} line {number}: the recipe reported a failed run, not a measurement: {line} "
                                 "(fix what it names and rerun the calibration Job)")
        if line.startswith(NO_CROSSOVER):
            no_crossover = line
    return no_crossover
