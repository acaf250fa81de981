"""The base of every on-disk record (a module of its own so the records' parts share it without a cycle)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """Base for on-disk records: strict keys, frozen after construction."""

    model_config = ConfigDict(extra="forbid", frozen=True)
