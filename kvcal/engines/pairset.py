"""Several engine pairs swept as one campaign (``kvcal sweep --pairs FILE``).

A :class:`PairSet` is an :class:`EnginePair` whose :meth:`measure` is served by the member
the sweep last :meth:`select`-ed: the probe loop, its gates, the record and the run folder
stay the one-pair ones, and each probe names its pair. The members must agree on what the
plan and the proofs read (block size, KV bytes per token); the model limit and vocabulary
are the smallest any member has, so every planned prompt fits every pair.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kvcal.engines.base import EnginePair, LegMeasurement
from kvcal.errors import InputError
from kvcal.records.run import Leg, PairFacts, RunSetup


class PairSet(EnginePair):
    """Named pairs, each of one link class, behind one pair interface."""

    def __init__(self, pairs: dict[str, EnginePair], classes: dict[str, str]) -> None:
        if not pairs:
            raise InputError("a campaign over pairs needs at least one pair")
        self._pairs, self.classes = dict(pairs), dict(classes)
        self.name = next(iter(pairs.values())).name
        self._current: EnginePair | None = None
        self._stack: contextlib.ExitStack | None = None

    @property
    def block_size(self) -> int:
        return self._agreed("block_size")

    @property
    def kv_bytes_per_token(self) -> int | None:
        return self._agreed("kv_bytes_per_token")

    @property
    def max_model_len(self) -> int:
        return min(p.max_model_len for p in self._pairs.values())

    @property
    def vocab_size(self) -> int:
        return min(p.vocab_size for p in self._pairs.values())

    def _agreed(self, what: str) -> Any:
        values = {name: getattr(p, what) for name, p in self._pairs.items()}
        if len(set(values.values())) > 1:
            shown = ", ".join(f"{name}: {value}" for name, value in values.items())
            raise InputError(f"the pairs of one campaign must share their {what.replace('_', ' ')} ({shown})")
        return next(iter(values.values()))

    def members(self) -> dict[str | None, EnginePair]:
        named: dict[str | None, EnginePair] = {}
        named.update(self._pairs)
        return named

    def select(self, name: str | None) -> None:
        if name not in self._pairs:
            raise InputError(f"the plan names pair {name!r}, which the campaign's pairs do not hold")
        self._current = self._pairs[name]

    def start(self) -> None:
        stack = contextlib.ExitStack()
        try:
            for pair in self._pairs.values():
                stack.enter_context(pair)
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def stop(self) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            stack.close()

    def warm_up(self, token_ids: list[int]) -> None:
        for pair in self._pairs.values():
            pair.warm_up(token_ids)

    def measure(self, leg: Leg, token_ids: list[int]) -> LegMeasurement:
        if self._current is None:
            raise InputError("a campaign over pairs measures only after a pair is selected")
        return self._current.measure(leg, token_ids)

    def describe(self) -> dict[str, Any]:
        return {"pairs": {name: {"class": self.classes[name], **p.describe()} for name, p in self._pairs.items()}}

    def setup(self) -> RunSetup:
        """The first pair's setup: the pairs serve one model over one transport (their links differ)."""
        return next(iter(self._pairs.values())).setup()

    def facts(self) -> PairFacts:
        return next(iter(self._pairs.values())).facts()

    def dry_run_commands(self) -> list[str]:
        return [command for p in self._pairs.values() for command in p.dry_run_commands()]
