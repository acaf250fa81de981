"""Start times read as instants: one rule for a run folder's ``started_at`` and a CSV's, ISO 8601 or epoch.

Compared as text, ``2026-01-01T09:00:00+09:00`` sorts after ``2026-01-01T01:00:00+00:00``
though both are one instant: every comparison of start times goes through
:func:`instant`. ISO 8601 and epoch seconds are held to the same window (1970 to
2100), so one instant is accepted or refused whichever way it is written.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

MIN_EPOCH_S, MAX_EPOCH_S = 0.0, 4.1e9  # 1970 to the year 2100: no kvcal probe ran outside it
_EPOCH = re.compile(
    r"[0-9]+(\.[0-9]*)?|\.[0-9]+"
)  # plain digits: no sign, exponent or '_' (float() takes 1_765_000001)


def instant(text: str) -> float:
    """``text`` as epoch seconds: ISO 8601 (no zone: UTC) or plain seconds; ValueError says why not."""
    text = str(text).strip()
    if _EPOCH.fullmatch(text):
        seconds = float(text)
    else:
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(f"'{text}' is neither ISO 8601 nor epoch seconds") from None
        if stamp.tzinfo is None:
            stamp = stamp.replace(tzinfo=timezone.utc)
        try:
            seconds = stamp.timestamp()
        except (OverflowError, OSError, ValueError):  # year 1 minus an offset: before any datetime
            raise ValueError(f"'{text}' lies outside 1970-2100") from None
    if not MIN_EPOCH_S <= seconds <= MAX_EPOCH_S:
        raise ValueError(f"'{text}' lies outside 1970-2100 (epoch seconds {MIN_EPOCH_S:.0f} to {MAX_EPOCH_S:.3g})")
    return seconds
