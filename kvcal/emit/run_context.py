"""What emit needs to know about the run behind a fit, read in one place.

A fit carries its run's setup as a typed :class:`~kvcal.records.RunSetup`
(``FitResult.setup``, copied from run.json). Every emit format reads it through
:func:`run_context`; anything not recorded is ``None`` and callers say what they used
instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kvcal.fit_record import FitResult


@dataclass(frozen=True)
class RunContext:
    """The run facts emit uses; ``None`` where the fit does not record one."""

    transport: str | None = None
    model: str | None = None
    python_hash_seed: str | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None  # the consumer's served context limit: the work-range labels' MAX
    kv_transfer_config: Mapping[str, Any] | None = None  # the consumer's: the engine that pulls


def run_context(fit: FitResult) -> RunContext:
    setup = fit.setup
    seed = setup.python_hash_seed
    return RunContext(
        transport=setup.transport,
        model=setup.model,
        python_hash_seed=str(seed) if seed is not None else None,
        max_num_batched_tokens=setup.max_num_batched_tokens,
        max_model_len=setup.max_model_len,
        kv_transfer_config=dict((setup.kv_transfer_config or {}).get("consumer") or {}) or None,
    )
