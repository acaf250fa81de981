"""The fit's default settings as plain numbers.

:class:`kvcal.records.fit.FitSettings` declares its fields (bounds, descriptions) with these defaults, and
``kvcal fit`` and ``kvcal plot`` give them to their flags from here: a command's ``--help`` builds no
pydantic model for three numbers (issue 45's startup budget, docs/architecture.md).
"""

from __future__ import annotations

CONFIDENCE = 0.9
SEED = 0
N_RESAMPLES = 2000
