"""The one probe loop: a session owns a sweep's life in its run folder.

A :class:`ProbeSession` claims the folder (one sweep per folder), starts and stops the
pair, warms it up, picks the disturbance monitor, switches load states, appends every
attempt to probes.jsonl and writes the summary, whatever ends the loop. What it probes
next comes from a :class:`Campaign`: a planned campaign (:class:`PlannedCampaign`, the
shuffled ladder or the loaded block design) hands over its plan at the start; an
adaptive one (:mod:`kvcal.sweep.adaptive_run`) hands over rounds as its refits choose
them. Probes a campaign adds later are appended to run.json's plan before they run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from kvcal.engines.base import EnginePair
from kvcal.engines.deadline import STOP
from kvcal.engines.process import sigterm_raises
from kvcal.errors import EngineError
from kvcal.records.manifest import RunManifest
from kvcal.records.run import ProbeRecord
from kvcal.records.run_folder import RunFolder, attempts_so_far, completed_probe_ids
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep import coldstart, host_monitors, warmup
from kvcal.sweep.lengths import grow_below
from kvcal.sweep.lengths.probe_plan import PlannedProbe, default_prefix_lengths, validate_prefix_lengths
from kvcal.sweep.load import LoadController, is_loaded, plan_for
from kvcal.sweep.lock import claim_run_folder
from kvcal.sweep.probe import ProbeContext, PromptSource, probe_until_valid
from kvcal.sweep.progress import SweepProgress
from kvcal.sweep.summary import write_summary

log = logging.getLogger(__name__)

PairFactory = Callable[[SweepConfig, RunFolder], EnginePair]
ManifestFactory = Callable[[SweepConfig, RunFolder, EnginePair, list[PlannedProbe]], RunManifest]


@dataclass(frozen=True)
class SweepOutcome:
    run_dir: Path
    total: int
    done_before: int
    measured: int
    invalid_attempts: int
    resumed: bool


class Campaign(Protocol):
    """Where a session's probes come from; the session does everything else."""

    def check_lengths(self, pair: EnginePair) -> object:
        """Refuse lengths the pair cannot serve (called before start-up too, when the limit is already known)."""

    def first_plan(self, session: ProbeSession, stored_plan: list[PlannedProbe] | None) -> list[PlannedProbe]:
        """The plan to start from, once the pair runs: the stored one on resume."""

    def warmup_tokens(self, plan: list[PlannedProbe]) -> int:
        """The length of the discarded prompt that warms the pair."""

    def round_ends_after(self, session: ProbeSession) -> bool:
        """Whether to stop the probes under way after this one (and ask :meth:`next_probes`)."""

    def next_probes(self, session: ProbeSession, plan: list[PlannedProbe]) -> list[PlannedProbe]:
        """Probes to append once the plan so far is measured; none ends the campaign."""

    def appended(self, session: ProbeSession, probes: list[PlannedProbe]) -> None:
        """``probes`` are now in run.json's plan (a campaign may record why it chose them)."""

    def finished(self, session: ProbeSession) -> None:
        """Every probe is measured and none is to be added (not called when the loop fails)."""


def explicit_lengths(config: SweepConfig) -> bool:
    """Lengths the user chose (or a loaded design, or a campaign over pairs): measured as given, never grown
    (kvcal.sweep.lengths.grow_below grows one pair's ladder)."""
    return config.probe.prefix_lengths is not None or is_loaded(config) or config.pairs is not None


def lengths_for(config: SweepConfig, pair: EnginePair) -> list[int]:
    """The lengths of a planned sweep: the given ones or the default ladder, checked against the pair."""
    block_size = config.engine.block_size
    lengths = config.probe.prefix_lengths or default_prefix_lengths(block_size, pair.max_model_len)
    return validate_prefix_lengths(lengths, block_size, pair.max_model_len)


class PlannedCampaign:
    """The whole plan up front: the shuffled ladder, or the loaded block design."""

    def __init__(self, config: SweepConfig) -> None:
        self.config = config

    def check_lengths(self, pair: EnginePair) -> None:
        lengths_for(self.config, pair)

    def first_plan(self, session: ProbeSession, stored_plan: list[PlannedProbe] | None) -> list[PlannedProbe]:
        return stored_plan if stored_plan is not None else plan_for(self.config, lengths_for(self.config, session.pair))

    def warmup_tokens(self, plan: list[PlannedProbe]) -> int:
        return min(p.prefix_tokens for p in plan)

    def round_ends_after(self, session: ProbeSession) -> bool:
        return False

    def next_probes(self, session: ProbeSession, plan: list[PlannedProbe]) -> list[PlannedProbe]:
        """The default design's probes below its shortest length while the pull wins there
        (kvcal.sweep.lengths.grow_below)."""
        config = self.config
        if explicit_lengths(config):
            return []  # measured as given; the fit's advice names what to add
        grown = grow_below.grown_probes(
            plan,
            session.run.read_probes(),
            block_size=config.engine.block_size,
            reps=config.probe.reps,
            seed=config.probe.seed,
        )
        if grown is None:
            return []
        probes, why = grown
        session.progress.on_phase(why)
        session.progress.on_start(len(plan) + len(probes), len(plan))
        return probes

    def appended(self, session: ProbeSession, probes: list[PlannedProbe]) -> None:
        return None

    def finished(self, session: ProbeSession) -> None:
        """A default design that met the floor or the model's limit without a crossover says so."""
        config = self.config
        if explicit_lengths(config):
            return
        records = session.run.read_probes()
        longest = default_prefix_lengths(config.engine.block_size, session.pair.max_model_len)[-1]
        for note in (grow_below.floor_note(records, config.engine.block_size), grow_below.top_note(records, longest)):
            if note:
                log.warning(note)


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


@dataclass
class _Counts:
    """Probes done (before this run and in it), measured in it, and invalid attempts retried."""

    done: int
    measured: int = 0
    invalid: int = 0


class ProbeSession:
    """One sweep (or its resumption) in ``run``: see the module docstring."""

    def __init__(
        self,
        config: SweepConfig,
        run: RunFolder,
        *,
        resume: bool,
        pair_factory: PairFactory,
        manifest_factory: ManifestFactory,
        progress: SweepProgress,
    ) -> None:
        self.config, self.run, self.resume = config, run, resume
        self.pair_factory, self.manifest_factory = pair_factory, manifest_factory
        self.progress = progress
        self.meter = _Meter(progress, 0.0)
        self.manifest: RunManifest | None = None
        self.done_ids: set[str] = set()

    @property
    def pair(self) -> EnginePair:
        return self._pair

    @property
    def engine_seconds(self) -> float:
        """The summed TTFT of every attempt of the run so far, earlier sessions included."""
        return self.meter.spent_ms / 1e3

    def run_campaign(self, campaign: Campaign, stored_plan: list[PlannedProbe] | None) -> SweepOutcome:
        with claim_run_folder(self.run.path, new=stored_plan is None):  # one sweep per run folder (kvcal/sweep/lock.py)
            return self._claimed(campaign, stored_plan)

    def _claimed(self, campaign: Campaign, stored_plan: list[PlannedProbe] | None) -> SweepOutcome:
        config, run = self.config, self.run
        self._pair = pair = self.pair_factory(config, run)
        if stored_plan is None:
            # Fail on bad lengths before minutes of engine start-up when the limit is known
            # (attached engines report theirs only once reached).
            try:
                campaign.check_lengths(pair)
            except EngineError:
                pass
        run.create()
        records = run.read_probes(repair_torn_tail=True) if self.resume else []
        self.done_ids = completed_probe_ids(records)
        attempts = attempts_so_far(records)
        self.meter.spent_ms = sum(r.ttft_ms or 0.0 for r in records)
        with sigterm_raises():
            self.progress.on_phase("starting engines" if config.engine.kind != "sim" else "starting simulated pair")
            # Background streams (load states) are owned like the engines, and stop before them.
            load = LoadController(
                pair,
                config,
                lambda i: PromptSource(config.probe.seed + 1 + i, pair.vocab_size).tokens,
                self.progress.on_phase,
            )
            with pair, load:
                ctx, plan = self._started(campaign, stored_plan, pair, load, records, attempts)
                done_before = sum(1 for p in plan if p.probe_id in self.done_ids)
                warmups = warmup.WarmupProbes(warmup.enabled(self.config.probe.warmup_probes, pair.facts()))
                self.progress.on_start(len(plan), done_before)
                counts = _Counts(done=done_before)
                try:
                    self._probe_plan(campaign, ctx, load, warmups, plan, counts)
                except BaseException:
                    # The error in flight is the one to report (a full disk names the append that failed);
                    # a summary that cannot be written now must not replace it.
                    with contextlib.suppress(Exception):
                        write_summary(run)
                    raise
                else:
                    write_summary(run)
                finally:
                    self.progress.on_complete(counts.done, len(plan))
        return SweepOutcome(run.path, len(plan), done_before, counts.measured, counts.invalid, self.resume)

    def _started(
        self,
        campaign: Campaign,
        stored_plan: list[PlannedProbe] | None,
        pair: EnginePair,
        load: LoadController,
        records: list[ProbeRecord],
        attempts: dict[str, int],
    ) -> tuple[ProbeContext, list[PlannedProbe]]:
        """With the engines up: the settings the pair fixes, the plan and run.json, the sessions opened, the
        probe context (its host monitor primed, so the first probe's window starts now)."""
        config, run = self.config, self.run
        if pair.block_size != config.engine.block_size:
            # Attached engines report their own block size (a --block-size that contradicts it is refused
            # by the pair): the plan and run.json's settings take it, so run.json never holds two.
            engine = config.engine.model_copy(update={"block_size": pair.block_size})
            config = self.config = config.model_copy(update={"engine": engine})
        plan = list(campaign.first_plan(self, stored_plan))
        if stored_plan is None:
            self.manifest = self.manifest_factory(config, run, pair, plan)
            run.write_manifest(self.manifest)
        prompts = PromptSource(config.probe.seed, pair.vocab_size)
        facts = pair.facts()
        opening = ProbeContext(pair, prompts, run, config, attempts, self.meter, None, load.reading)
        self._open_sessions(opening, records, campaign.warmup_tokens(plan), facts.mode != "attach")
        # the host monitor is primed here, after the sessions opened: the first probe's window starts now
        return replace(opening, monitor=host_monitors.monitor_for(facts)), plan

    def _probe_plan(
        self,
        campaign: Campaign,
        ctx: ProbeContext,
        load: LoadController,
        warmups: warmup.WarmupProbes,
        plan: list[PlannedProbe],
        counts: _Counts,
    ) -> None:
        """Probe every planned probe not done yet, round by round, until the campaign adds none (``plan`` grows)."""
        while True:
            for planned in [p for p in plan if p.probe_id not in self.done_ids]:
                if STOP.is_set():  # a signal whose KeyboardInterrupt was lost (kvcal/engines/deadline.py)
                    raise KeyboardInterrupt("stopped by a signal")
                load.enter(planned.load_state)
                warm = warmups.before(ctx.pair, planned, ctx.prompts.tokens(planned.prefix_tokens))
                if warm is not None:
                    self.run.append_probe(warm)
                record = probe_until_valid(ctx, planned, counts.done, len(plan))
                self.done_ids.add(record.probe_id)
                counts.invalid += record.attempt
                counts.measured += 1
                counts.done += 1
                if campaign.round_ends_after(self):
                    break
            new = campaign.next_probes(self, plan)
            if not new:
                campaign.finished(self)
                return
            plan += new
            self._append_to_plan(plan)
            campaign.appended(self, new)

    def _open_sessions(self, opening: ProbeContext, records: list[ProbeRecord], tokens: int, created: bool) -> None:
        """Each pair's first pull, measured cold where kvcal created the session (kvcal.sweep.coldstart)."""
        self.progress.on_phase("opening the sessions (the first pull of each, measured cold)")
        config = self.config
        cold = coldstart.open_sessions(
            opening,
            records,
            tokens=tokens,
            kvcal_created=created,
            cold_sessions=config.probe.cold_sessions,
            link_classes={p.name: p.link_class for p in config.pairs or ()},
        )
        self.meter.spent_ms += sum(r.ttft_ms or 0.0 for r in cold)  # engine time, as every attempt's

    def _append_to_plan(self, plan: list[PlannedProbe]) -> None:
        manifest = self.manifest or self.run.manifest()
        self.manifest = manifest.model_copy(update={"plan": list(plan)})
        self.run.write_manifest(self.manifest)
