"""The adaptive campaign: where an adaptive sweep's probes come from.

The probe loop is the session's (:mod:`kvcal.sweep.session`: fresh prompts, gates,
retries, one fsynced line per attempt); what differs is where the plan comes from: each round
is appended to run.json's plan as it is chosen (each probe carrying its round and
reason), and ``adaptive.json`` keeps the rules, the rounds and, at the end, the stop
reason and the final interval. ``--resume`` finishes the round that was under way,
then carries on with the rules given now (flags override the stored ones, so a run
stopped by its budget can be given more).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from kvcal.engines.base import EnginePair
from kvcal.errors import InputError
from kvcal.fit.tables import ProbeTable, load_probe_table
from kvcal.records.fit import FIT_DEFAULTS
from kvcal.records.run_folder import RunFolder, atomic_write
from kvcal.settings.sweep import SweepConfig
from kvcal.settings.sweep_flags import adaptive_rule_fields
from kvcal.sweep.adaptive import (
    DEFAULT_MAX_PROBES,
    AdaptiveState,
    Controller,
    RoundSummary,
    Step,
    StopRules,
    relative_width,
)
from kvcal.sweep.lengths import adaptive_design, grow_below
from kvcal.sweep.lengths.probe_plan import PlannedProbe, validate_prefix_lengths
from kvcal.sweep.regret_stop import Judge, width_mc_error
from kvcal.sweep.session import ProbeSession, SweepOutcome

log = logging.getLogger(__name__)

STATE_FILE = "adaptive.json"


@dataclass(frozen=True)
class AdaptiveOutcome(SweepOutcome):
    stop_reason: str
    final_width: float | None
    break_even_tokens: float | None
    break_even_ci: list[float] | None
    status: str | None
    rounds: int
    engine_seconds: float
    target_width: float
    target_regret: float | None = None
    regret: float | None = None
    threshold: int | None = None
    reach_note: str | None = None  # a stop at an end of the allowed range: how far the model or the lengths allow


@dataclass(frozen=True)
class RoundView:
    """What the live display shows after each refit."""

    round: int
    n_probes: int
    engine_seconds: float
    status: str | None
    break_even_tokens: float | None
    break_even_ci: list[float] | None
    width: float | None
    rules: str
    next_probes: int
    kind: str
    stop: str | None
    threshold: int | None = None  # emit-config's threshold on this refit and its expected regret (share of TTFT)
    regret: float | None = None


def state_path(run: RunFolder) -> Path:
    return run.path / STATE_FILE


def read_state(run: RunFolder) -> AdaptiveState:
    path = state_path(run)
    if not path.is_file():
        raise InputError(f"{run.path}: an adaptive run without {STATE_FILE}; it cannot be resumed adaptively")
    try:
        return AdaptiveState.model_validate_json(path.read_text(encoding="utf-8"))
    except ValidationError as err:
        raise InputError(f"{path}: not a kvcal adaptive state ({err.errors()[0].get('msg')})") from None


def write_state(run: RunFolder, state: AdaptiveState) -> None:
    atomic_write(state_path(run), state.model_dump_json(by_alias=True, indent=1) + "\n")


class AdaptiveCampaign:
    """Rounds chosen from the fit so far: the seed round, then each refit's design, until a stop rule holds."""

    def __init__(
        self, config: SweepConfig, run: RunFolder, *, requested: SweepConfig, resume: bool, judge: Judge | None = None
    ) -> None:
        self.config, self.run, self.requested, self.judge = config, run, requested, judge
        self.state: AdaptiveState | None = read_state(run) if resume else None
        self.controller: Controller | None = None
        self._summary: RoundSummary | None = None

    def check_lengths(self, pair: EnginePair) -> tuple[int, int]:
        block_size = self.config.engine.block_size
        low, high = adaptive_design.allowed_range(self.config.probe.prefix_lengths, block_size, pair.max_model_len)
        validate_prefix_lengths([low, high], block_size, pair.max_model_len)
        return low, high

    def first_plan(self, session: ProbeSession, stored_plan: list[PlannedProbe] | None) -> list[PlannedProbe]:
        if self.state is None:
            low, high = self.check_lengths(session.pair)
            self.state = AdaptiveState(allowed_range=[low, high], rules=_rules(self.config, None))
        else:
            self.state = self.state.model_copy(
                update={"rules": _rules(self.requested, self.state.rules), "stop_reason": None}
            )
        low, high = self.state.allowed_range
        if self.state.rules.target_regret is not None and self.judge is None:
            raise InputError("--target-regret needs emit-config's threshold rule: run it through `kvcal sweep`")
        self.controller = Controller(low, high, self.config.engine.block_size, self.state.rules, judge=self.judge)
        return list(stored_plan or [])

    def warmup_tokens(self, plan: list[PlannedProbe]) -> int:
        assert self.state is not None
        return self.state.allowed_range[0]

    def round_ends_after(self, session: ProbeSession) -> bool:
        assert self.state is not None
        limit = self.state.rules.max_engine_seconds
        return limit is not None and session.engine_seconds >= limit

    def next_probes(self, session: ProbeSession, plan: list[PlannedProbe]) -> list[PlannedProbe]:
        assert self.state is not None and self.controller is not None
        rounds, n_probes, spent = len(self.state.rounds), len(session.done_ids), session.engine_seconds
        step = self.controller.step(_table(self.run), engine_seconds=spent, round_index=rounds)
        stop = step.stop or ("max-engine-seconds" if self.round_ends_after(session) else None)
        self._summary = _summary(step, rounds, n_probes, spent)
        new = [] if stop else _expand(step, plan, rounds, self.config.probe.seed)
        on_round = getattr(session.progress, "on_round", None)
        if on_round is not None:
            on_round(_view(self._summary, self.state.rules, len(new), step.kind, stop))
        if stop:
            self.state = _finish(self.state, step, stop, n_probes, spent)
            write_state(self.run, self.state)
        return new

    def appended(self, session: ProbeSession, probes: list[PlannedProbe]) -> None:
        assert self.state is not None and self._summary is not None
        summary = self._summary.model_copy(update={"probes": [p.probe_id for p in probes]})
        self.state = self.state.model_copy(update={"rounds": [*self.state.rounds, summary]})
        write_state(self.run, self.state)

    def finished(self, session: ProbeSession) -> None:
        return None

    def outcome(self, base: SweepOutcome) -> AdaptiveOutcome:
        state = self.state
        assert state is not None
        return AdaptiveOutcome(
            base.run_dir,
            base.total,
            base.done_before,
            base.measured,
            base.invalid_attempts,
            base.resumed,
            stop_reason=state.stop_reason or "",
            final_width=state.final_width,
            break_even_tokens=state.final_break_even_tokens,
            break_even_ci=state.final_break_even_ci,
            status=state.final_status,
            rounds=len(state.rounds),
            engine_seconds=state.engine_seconds,
            target_width=state.rules.target_width,
            target_regret=state.rules.target_regret,
            regret=state.final_regret,
            threshold=state.final_threshold,
            reach_note=grow_below.adaptive_stop_note(
                state.stop_reason or "",
                state.allowed_range,
                explicit=self.config.probe.prefix_lengths is not None,
                block_size=self.config.engine.block_size,
            ),
        )


def adaptive_preview(
    config: SweepConfig, ladder: list[int]
) -> tuple[int, int, list[adaptive_design.Choice], StopRules]:
    """What ``--adaptive --dry-run`` shows: the allowed range (the lengths' span, else the floor to the ladder's
    top), the seed round and the rules."""
    block_size = config.engine.block_size
    low, high = adaptive_design.allowed_range(config.probe.prefix_lengths, block_size, max(ladder) + 1)
    return (
        low,
        high,
        adaptive_design.seed_design(adaptive_design.candidate_lengths(low, high, block_size)),
        _rules(config, None),
    )


def _rules(config: SweepConfig, stored: StopRules | None) -> StopRules:
    """The stop rules: from the config; on resume the stored ones, except those set again now."""
    if stored is None:
        rules = config.adaptive
        return StopRules(
            target_width=rules.target_width,
            target_regret=rules.target_regret,
            max_probes=rules.max_probes or DEFAULT_MAX_PROBES,
            max_engine_seconds=rules.max_engine_seconds,
        )
    set_now = config.given()
    given = {k: config.value(k) for k in adaptive_rule_fields() if k in set_now and config.value(k) is not None}
    return stored.model_copy(update=given)


def _table(run: RunFolder) -> ProbeTable | None:
    """The same table ``kvcal fit RUN`` loads, or None before any valid probe."""
    if not run.has_probes():
        return None
    try:
        return load_probe_table(run.path)
    except InputError:
        if any(r.valid and not r.off_curve for r in run.read_probes()):
            raise
        return None


def _expand(step: Step, plan: list[PlannedProbe], round_index: int, seed: int) -> list[PlannedProbe]:
    """Probes for the step's choices; reps count on per (length, leg) so probe ids stay unique."""
    reps: dict[tuple[int, str], int] = {}
    for p in plan:
        key = (p.prefix_tokens, p.leg.value)
        reps[key] = max(reps.get(key, 0), p.rep + 1)
    out = []
    for choice in step.choices:
        key = (choice.prefix_tokens, choice.leg.value)
        for _ in range(choice.count):
            rep = reps.get(key, 0)
            reps[key] = rep + 1
            out.append((choice.prefix_tokens, choice.leg, rep, choice.reason))
    # Shuffled within the round, as the fixed plan is, so drift does not line up with one length or leg.
    order = np.random.default_rng([seed, round_index]).permutation(len(out))
    return [
        PlannedProbe(
            plan_index=len(plan) + i,
            probe_id=f"L{n}-{leg.value}-r{rep}",
            prefix_tokens=n,
            leg=leg,
            rep=rep,
            adaptive_round=round_index,
            adaptive_reason=why,
        )
        for i, (n, leg, rep, why) in enumerate(out[int(k)] for k in order)
    ]


def _summary(step: Step, index: int, n_probes: int, engine_seconds: float) -> RoundSummary:
    fit = step.fit
    return RoundSummary(
        index=index,
        kind=step.kind,
        n_probes_before=n_probes,
        engine_seconds_before=round(engine_seconds, 6),
        status=fit.status if fit else None,
        break_even_tokens=fit.break_even_tokens if fit else None,
        break_even_ci=fit.break_even_ci if fit else None,
        width=relative_width(fit) if fit else None,
        **_judged(step),
    )


def _judged(step: Step) -> dict[str, float | int | None]:
    """The Monte Carlo error of the width and emit-config's threshold and regret, for a round and the final state."""
    verdict = step.verdict
    return {
        "width_mc_error": _sig(width_mc_error(step.fit, FIT_DEFAULTS.confidence)) if step.fit else None,
        "threshold": verdict.threshold if verdict else None,
        "regret": _sig(verdict.regret) if verdict else None,
        "regret_mc_error": _sig(verdict.regret_mc_error) if verdict else None,
    }


def _sig(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(f"{value:.4g}")


def _view(summary: RoundSummary, rules: StopRules, next_probes: int, kind: str, stop: str | None) -> RoundView:
    return RoundView(
        summary.index,
        summary.n_probes_before,
        summary.engine_seconds_before,
        summary.status,
        summary.break_even_tokens,
        summary.break_even_ci,
        summary.width,
        rules.describe(),
        next_probes,
        kind,
        stop,
        summary.threshold,
        summary.regret,
    )


def _finish(state: AdaptiveState, step: Step, stop: str, n_probes: int, engine_seconds: float) -> AdaptiveState:
    fit = step.fit
    return state.model_copy(
        update={
            "stop_reason": stop,
            "final_width": relative_width(fit) if fit else None,
            "final_break_even_tokens": fit.break_even_tokens if fit else None,
            "final_break_even_ci": fit.break_even_ci if fit else None,
            "final_status": fit.status if fit else None,
            "n_probes": n_probes,
            "engine_seconds": round(engine_seconds, 6),
            **{f"final_{key}": value for key, value in _judged(step).items()},
        }
    )
