"""The first pull on a fresh session, measured: a cold probe instead of a discarded warm-up.

A pull between a producer and a consumer that never talked pays a session set-up once
(NIXL's handshake and memory registration). The sweep measures it: after one discarded
recompute (the consumer's own first request: its one-time costs are not the session's),
the first pull of each pair is a probe like any other, its bytes proven by the same gate,
recorded with ``session: cold`` and kept out of the warm curves; the fit reports the
session cost as cold minus the warm curve at the same length (:mod:`kvcal.fit.session_cost`).

Only sessions kvcal created count as cold: the pairs it launched (or the simulated pair),
each time it starts them (a resumed run starts them again, so it measures new cold
samples), and ``--cold-sessions N`` restarts the consumer between N of them. An attached
pair is cold only when the run has no pull on it yet; otherwise its session may be open
and the old discarded warm-up runs instead.

A retried handshake: a cold attempt whose gate failed (no bytes, or the engine refused it)
is recorded invalid and retried with a new prompt; the session stays cold until a pull
proves its bytes. That proven pull is recorded cold with its attempt number above 0, and
the fit keeps it out of the session cost (the failed try may have done part of the set-up).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from kvcal.engines.base import EnginePair
from kvcal.errors import EngineError
from kvcal.records.run import Leg, PlannedProbe, ProbeRecord
from kvcal.sweep.probe import ProbeContext, attempt_once, gave_up

log = logging.getLogger(__name__)

COLD_MARK = "cold"


def cold_probe_id(pair: str | None, index: int, tokens: int) -> str:
    """``cold3-L256-pull-r0`` (one pair) or ``<pair>-cold3-L256-pull-r0``: its shape names its length and leg."""
    stem = f"{COLD_MARK}{index}-L{tokens}-pull-r0"
    return stem if pair is None else f"{pair}-{stem}"


def open_sessions(
    ctx: ProbeContext,
    records: Iterable[ProbeRecord],
    *,
    tokens: int,
    kvcal_created: bool,
    cold_sessions: int,
    link_classes: dict[str, str],
) -> list[ProbeRecord]:
    """Open every member pair's session: measured cold where kvcal created it, else warmed as before.

    Returns every cold attempt recorded (their engine time counts as the run's)."""
    records, measured = list(records), []
    pair = ctx.pair
    for name, member in pair.members().items():
        pair.select(name)
        pulled_before = any(r.valid and r.leg is Leg.PULL and r.pair == name for r in records)
        if not kvcal_created and pulled_before:
            member.warm_up(ctx.prompts.tokens(tokens))  # its session may be open: nothing cold to measure
            continue
        done = sum(1 for r in records if r.session == "cold" and r.pair == name and r.valid)
        for sample in range(cold_sessions):
            if sample:
                ctx.progress.on_phase(f"restarting the consumer{_of(name)} for cold sample {sample + 1}")
                member.restart_consumer()
            _first_request(member, ctx.prompts.tokens(tokens))
            planned = PlannedProbe(
                plan_index=0,
                probe_id=cold_probe_id(name, done + sample, tokens),
                prefix_tokens=tokens,
                leg=Leg.PULL,
                rep=0,
                pair=name,
                link_class=link_classes.get(name) if name is not None else None,
            )
            measured += _measure_cold(ctx, planned)
    return measured


def _first_request(member: EnginePair, tokens: list[int]) -> None:
    """The consumer's first request, discarded: its one-time costs are not the session's."""
    try:
        member.measure(Leg.RECOMPUTE, tokens)
    except EngineError as err:  # the cold pull that follows meets the same failure and records it
        log.warning("the consumer's first request failed: %s", err)


def _measure_cold(ctx: ProbeContext, planned: PlannedProbe) -> list[ProbeRecord]:
    reasons, attempts = [], []
    for attempt in range(ctx.config.probe.max_attempts):
        record = attempt_once(ctx, planned, attempt, session="cold")
        ctx.run.append_probe(record)
        attempts.append(record)
        if record.valid:
            return attempts
        log.warning("cold pull %s attempt %d invalid: %s", planned.probe_id, attempt, record.invalid_reason)
        reasons.append(record.invalid_reason or "")
    raise gave_up(ctx, planned.probe_id, reasons)


def _of(name: str | None) -> str:
    return "" if name is None else f" of pair {name}"
