"""Drive an engine pair through an adaptive campaign, recording it like any sweep.

Same protocol as :mod:`kvcal.sweep.runner` (fresh prompts, gates, retries, one
fsynced line per attempt); what differs is where the plan comes from: each round
is appended to run.json's plan as it is chosen (each probe carrying its round and
reason), and ``adaptive.json`` keeps the rules, the rounds and, at the end, the stop
reason and the final interval. ``--resume`` finishes the round that was under way,
then carries on with the rules given now (flags override the stored ones, so a run
stopped by its budget can be given more).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from kvcal.errors import InputError
from kvcal.fit.tables import ProbeTable, load_probe_table
from kvcal.records import ProbeRecord
from kvcal.sweep import design, disturbance, reach, warmup
from kvcal.sweep.adaptive import DEFAULT_MAX_PROBES, AdaptiveState, Controller, RoundSummary, Step, StopRules, relative_width
from kvcal.sweep.config import SweepConfig
from kvcal.sweep.plan import PlannedProbe, validate_prefix_lengths
from kvcal.sweep.progress import SweepProgress
from kvcal.sweep.recorder import RunFolder, _atomic_write, attempts_so_far, completed_probe_ids
from kvcal.sweep.progress import NullProgress
from kvcal.sweep.lock import claim_run_folder
from kvcal.sweep.runner import PairFactory, PromptSource, SweepOutcome, _manifest, _prepare, _probe_until_valid, make_pair, run_sweep
from kvcal.engines.process import sigterm_raises

log = logging.getLogger(__name__)

STATE_FILE = "adaptive.json"
RULE_FIELDS = ("target_width", "max_probes", "max_engine_seconds")


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
    _atomic_write(state_path(run), state.model_dump_json(by_alias=True, indent=1) + "\n")


class _Meter:
    """Forwards progress events and sums the engine time (TTFT) of every attempt."""

    def __init__(self, inner: SweepProgress, spent_ms: float) -> None:
        self.inner, self.spent_ms = inner, spent_ms

    def on_phase(self, message: str) -> None:
        self.inner.on_phase(message)

    def on_start(self, total: int, already_done: int) -> None:
        self.inner.on_start(total, already_done)

    def on_probe(self, record: ProbeRecord, done: int, total: int) -> None:
        self.spent_ms += record.ttft_ms or 0.0
        self.inner.on_probe(record, done, total)

    def on_complete(self, done: int, total: int) -> None:
        self.inner.on_complete(done, total)

    def on_round(self, view: RoundView) -> None:
        hook = getattr(self.inner, "on_round", None)
        if hook is not None:
            hook(view)


def run_campaign(config: SweepConfig, *, resume: bool = False, pair_factory: PairFactory = make_pair,
                 progress: SweepProgress | None = None) -> SweepOutcome:
    """What ``kvcal sweep`` runs: an adaptive campaign when the settings (stored ones on resume) say so, else the plan."""
    prepared, run, stored_plan = _prepare(config, resume)
    if not prepared.adaptive:
        return run_sweep(config, resume=resume, pair_factory=pair_factory, progress=progress)
    if prepared.load_states != ["idle"]:
        raise InputError("--adaptive chooses lengths for the idle break-even; run --load-states as a planned sweep")
    with claim_run_folder(run.path, new=stored_plan is None):  # one sweep per run folder (kvcal/sweep/lock.py)
        return run_adaptive(prepared, run, stored_plan, requested=config, pair_factory=pair_factory,
                            progress=progress or NullProgress())


def run_adaptive(config: SweepConfig, run: RunFolder, stored_plan: list[PlannedProbe] | None, *,
                 requested: SweepConfig, pair_factory: PairFactory, progress: SweepProgress) -> AdaptiveOutcome:
    """Run or resume an adaptive campaign in ``run`` (see the module docstring)."""
    resume = stored_plan is not None
    state = read_state(run) if resume else None
    pair = pair_factory(config, run)
    run.create()
    records = run.read_probes(repair_torn_tail=True) if resume else []
    attempts = attempts_so_far(records)
    done_ids = completed_probe_ids(records)
    done_before = len(done_ids)
    meter = _Meter(progress, sum(r.ttft_ms or 0.0 for r in records))
    plan = list(stored_plan or [])
    measured = invalid = 0
    with sigterm_raises():
        meter.on_phase("starting engines" if config.engine != "sim" else "starting simulated pair")
        with pair:
            if state is None:
                low, high = design.allowed_range(config.prefix_lengths, config.block_size, pair.max_model_len)
                validate_prefix_lengths([low, high], config.block_size, pair.max_model_len)
                state = AdaptiveState(allowed_range=[low, high], rules=_rules(config, None))
                manifest = _manifest(config, run, pair, plan)
                run.write_manifest(manifest)
            else:
                manifest = run.manifest()
                state = state.model_copy(update={"rules": _rules(requested, state.rules), "stop_reason": None})
            low, high = state.allowed_range
            controller = Controller(low, high, config.block_size, state.rules)
            prompts = PromptSource(config.seed, pair.vocab_size)
            meter.on_phase("warming the pair (discarded)")
            pair.warm_up(prompts.tokens(low))
            description = pair.describe()
            monitor = disturbance.monitor_for(description)  # as the planned sweep: host load per probe
            warmups = warmup.WarmupProbes(warmup.enabled(config.warmup_probes, description))
            meter.on_start(len(plan), len(done_ids))
            try:
                while True:
                    budget_hit = False
                    for planned in [p for p in plan if p.probe_id not in done_ids]:
                        warm = warmups.before(pair, planned, prompts.tokens(planned.prefix_tokens))
                        if warm is not None:
                            run.append_probe(warm)
                        record = _probe_until_valid(pair, planned, prompts, run, config, attempts, meter,
                                                    len(done_ids), len(plan), monitor=monitor)
                        done_ids.add(record.probe_id)
                        invalid += record.attempt
                        measured += 1
                        limit = state.rules.max_engine_seconds
                        if limit is not None and meter.spent_ms / 1e3 >= limit:
                            budget_hit = True
                            break
                    step = controller.step(_table(run), engine_seconds=meter.spent_ms / 1e3,
                                           round_index=len(state.rounds))
                    stop = step.stop or ("max-engine-seconds" if budget_hit else None)
                    summary = _summary(step, len(state.rounds), len(done_ids), meter.spent_ms / 1e3)
                    new = [] if stop else _expand(step, plan, len(state.rounds), config.seed)
                    meter.on_round(_view(summary, state.rules, len(new), step.kind, stop))
                    if stop:
                        state = _finish(state, step, stop, len(done_ids), meter.spent_ms / 1e3)
                        write_state(run, state)
                        break
                    plan += new
                    manifest = manifest.model_copy(update={"plan": list(plan)})
                    run.write_manifest(manifest)
                    summary = summary.model_copy(update={"probes": [p.probe_id for p in new]})
                    state = state.model_copy(update={"rounds": [*state.rounds, summary]})
                    write_state(run, state)
            finally:
                run.write_summary()
                meter.on_complete(len(done_ids), len(plan))
    return AdaptiveOutcome(
        run.path, len(plan), done_before, measured, invalid, resume,
        stop_reason=state.stop_reason or "", final_width=state.final_width,
        break_even_tokens=state.final_break_even_tokens, break_even_ci=state.final_break_even_ci,
        status=state.final_status, rounds=len(state.rounds), engine_seconds=state.engine_seconds,
        target_width=state.rules.target_width,
        reach_note=reach.adaptive_stop_note(state.stop_reason or "", state.allowed_range,
                                            explicit=config.prefix_lengths is not None, block_size=config.block_size),
    )


def adaptive_preview(config: SweepConfig, ladder: list[int]) -> tuple[int, int, list[design.Choice], StopRules]:
    """What ``--adaptive --dry-run`` shows: the allowed range (the lengths' span, else the floor to the ladder's top), the seed round and the rules."""
    low, high = design.allowed_range(config.prefix_lengths, config.block_size, max(ladder) + 1)
    return low, high, design.seed_design(design.candidate_lengths(low, high, config.block_size)), _rules(config, None)


def _rules(config: SweepConfig, stored: StopRules | None) -> StopRules:
    """The stop rules: from the config; on resume the stored ones, except those set again now."""
    if stored is None:
        return StopRules(target_width=config.target_width, max_probes=config.max_probes or DEFAULT_MAX_PROBES,
                         max_engine_seconds=config.max_engine_seconds)
    given = {k: getattr(config, k) for k in RULE_FIELDS if k in config.model_fields_set and getattr(config, k) is not None}
    return stored.model_copy(update=given)


def _table(run: RunFolder) -> ProbeTable | None:
    """The same table ``kvcal fit RUN`` loads, or None before any valid probe."""
    if not run.has_probes():
        return None
    try:
        return load_probe_table(run.path)
    except InputError:
        if any(r.valid for r in run.read_probes()):
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
    return [PlannedProbe(plan_index=len(plan) + i, probe_id=f"L{n}-{leg.value}-r{rep}", prefix_tokens=n, leg=leg, rep=rep,
                         adaptive_round=round_index, adaptive_reason=why)
            for i, (n, leg, rep, why) in enumerate(out[int(k)] for k in order)]


def _summary(step: Step, index: int, n_probes: int, engine_seconds: float) -> RoundSummary:
    fit = step.fit
    return RoundSummary(
        index=index, kind=step.kind, n_probes_before=n_probes, engine_seconds_before=round(engine_seconds, 6),
        status=fit.status if fit else None, break_even_tokens=fit.break_even_tokens if fit else None,
        break_even_ci=fit.break_even_ci if fit else None, width=relative_width(fit) if fit else None,
    )


def _view(summary: RoundSummary, rules: StopRules, next_probes: int, kind: str, stop: str | None) -> RoundView:
    return RoundView(summary.index, summary.n_probes_before, summary.engine_seconds_before, summary.status,
                     summary.break_even_tokens, summary.break_even_ci, summary.width, rules.describe(), next_probes,
                     kind, stop)


def _finish(state: AdaptiveState, step: Step, stop: str, n_probes: int, engine_seconds: float) -> AdaptiveState:
    fit = step.fit
    return state.model_copy(update={
        "stop_reason": stop, "final_width": relative_width(fit) if fit else None,
        "final_break_even_tokens": fit.break_even_tokens if fit else None,
        "final_break_even_ci": fit.break_even_ci if fit else None, "final_status": fit.status if fit else None,
        "n_probes": n_probes, "engine_seconds": round(engine_seconds, 6),
    })
