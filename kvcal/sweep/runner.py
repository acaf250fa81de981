"""Run a sweep: drive an engine pair through the plan, gate every probe, record it.

The runner owns the probe protocol, not the engines: a fresh random prompt per probe
and attempt (the consumer caches what it just served), the pair warmed once and the
warm-up discarded, the plan's shuffled order, and the gates:

* a pull that moved no bytes (or less than ``min_pull_fraction`` of the expected KV)
  measured recompute against recompute;
* a recompute control that moved bytes was not a recompute.

Either marks the attempt invalid; it is retried with a new prompt up to
``max_attempts`` times, after which the run fails with the reason. Every attempt is
appended to probes.jsonl the moment it ends, so a run that dies loses nothing and
``resume`` repeats no finished probe.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from kvcal.sweep import disturbance, reach, warmup
from kvcal.sweep.config import SweepConfig
from kvcal.engines.base import EnginePair, LegMeasurement
from kvcal.engines.sim import SimPair
from kvcal.engines.vllm import pair_from_config
from kvcal.engines.process import sigterm_raises
from kvcal.errors import EngineError, GateError, InputError
from kvcal.sweep.load import LoadController, LoadReading, is_loaded, plan_for
from kvcal.sweep.plan import PlannedProbe, default_prefix_lengths, validate_prefix_lengths
from kvcal.sweep.progress import NullProgress, SweepProgress
from kvcal.sweep.provenance import host_provenance, utc_now
from kvcal.sweep.lock import claim_run_folder, no_run_to_resume
from kvcal.sweep.probe_checks import checked_record
from kvcal.sweep.recorder import RunFolder, attempts_so_far, completed_probe_ids
from kvcal.sweep.validate import check_resume
from kvcal.records import Leg, ProbeRecord, RunManifest

log = logging.getLogger(__name__)

PairFactory = Callable[[SweepConfig, RunFolder], EnginePair]


@dataclass(frozen=True)
class SweepOutcome:
    run_dir: Path
    total: int
    done_before: int
    measured: int
    invalid_attempts: int
    resumed: bool


@dataclass(frozen=True)
class DryRun:
    run_dir: Path
    commands: list[str]
    plan: list[PlannedProbe]


def default_run_name(config: SweepConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(config.model_label).name or config.model_label).strip("-")
    return f"{stamp}-{label or 'model'}"


def make_pair(config: SweepConfig, run: RunFolder) -> EnginePair:
    """The engine pair named by the config."""
    if config.engine == "sim":
        sim = config.sim
        return SimPair(sim.costs, block_size=config.block_size, max_model_len=sim.max_model_len, seed=config.seed,
                       fail_pull_rate=sim.fail_pull_rate, python_hash_seed=config.python_hash_seed)
    return pair_from_config(config, run)


class PromptSource:
    """Fresh random token ids: exact lengths, no text-to-token guess, no accidental cache hit."""

    def __init__(self, seed: int, vocab_size: int) -> None:
        # Fresh entropy on every run: a resumed run must not resend a prompt the
        # consumer may have cached before the crash.
        self._rng = np.random.default_rng([seed, int(time.time_ns() % (2**63))])
        margin = min(256, vocab_size // 4)
        self._low, self._high = min(100, vocab_size // 4), vocab_size - margin

    def tokens(self, n: int) -> list[int]:
        return self._rng.integers(self._low, self._high, size=n).tolist()


def gate(leg: Leg, measured: LegMeasurement, expected_bytes: int | None, min_pull_fraction: float) -> str | None:
    """Why an attempt cannot be trusted, or None when it passes."""
    if leg is Leg.RECOMPUTE:
        if measured.bytes_moved:
            return f"recompute control moved {measured.bytes_moved} bytes (a transfer fired on a leg that must prefill)"
        return None
    if measured.bytes_moved is None:
        return "the pull's bytes could not be counted (the engine exposes no transfer metric)"
    if measured.bytes_moved == 0:
        return ("pull moved no bytes: it measured recompute against recompute "
                "(check the kv-transfer-config and that PYTHONHASHSEED matches on both engines)")
    if expected_bytes and measured.bytes_moved < min_pull_fraction * expected_bytes:
        return f"pull moved {measured.bytes_moved} bytes, under {min_pull_fraction:.0%} of the expected {expected_bytes}"
    return None


def _prepare(config: SweepConfig, resume: bool) -> tuple[SweepConfig, RunFolder, list[PlannedProbe] | None]:
    """Pick the run folder; on resume, return the stored settings and plan."""
    output_dir = Path(config.output_dir)
    if resume:
        if config.name:
            run = RunFolder(output_dir / config.name)
        else:
            candidates = sorted((p for p in output_dir.glob("*") if RunFolder.is_run_folder(p)),
                                key=lambda p: p.stat().st_mtime)
            if not candidates:
                raise InputError(f"no run to resume in {output_dir}; give --name or --output-dir")
            run = RunFolder(candidates[-1])
        if not RunFolder.is_run_folder(run.path):
            raise InputError(no_run_to_resume(run.path))
        manifest = run.manifest()
        stored = manifest.settings.model_copy(update={"output_dir": output_dir, "name": run.path.name})
        check_resume(stored, config)
        plan = list(manifest.plan)
        return stored, run, plan
    name = config.name or default_run_name(config)
    run = RunFolder(output_dir / name)
    if run.has_probes() or RunFolder.is_run_folder(run.path):
        raise InputError(f"run folder {run.path} already exists; add --resume to continue it or choose another --name")
    return config.model_copy(update={"name": name}), run, None


def _lengths_for(config: SweepConfig, pair: EnginePair) -> list[int]:
    lengths = config.prefix_lengths or default_prefix_lengths(config.block_size, pair.max_model_len)
    return validate_prefix_lengths(lengths, config.block_size, pair.max_model_len)


def plan_dry_run(config: SweepConfig, pair_factory: PairFactory = make_pair, *, resume: bool = False) -> DryRun:
    """What ``sweep`` (or ``sweep --resume``) would run, without starting anything or writing any file."""
    config, run, plan = _prepare(config, resume=resume)
    pair = pair_factory(config, run)
    if plan is None:
        plan = plan_for(config, _lengths_for(config, pair))
    else:  # resume: what is left of the stored plan, else what the default design would add below it
        records = run.read_probes()
        done = completed_probe_ids(records)
        left = [p for p in plan if p.probe_id not in done]
        grown = None if left or _explicit(config) else reach.grown_probes(
            plan, records, block_size=config.block_size, reps=config.reps, seed=config.seed)
        plan = grown[0] if grown else left
    return DryRun(run.path, pair.dry_run_commands(), plan)


def _explicit(config: SweepConfig) -> bool:
    """Lengths the user chose (or a loaded design): measured as given, never grown (kvcal.sweep.reach)."""
    return config.prefix_lengths is not None or is_loaded(config)


def run_sweep(
    config: SweepConfig,
    *,
    resume: bool = False,
    pair_factory: PairFactory = make_pair,
    progress: SweepProgress | None = None,
) -> SweepOutcome:
    """Run (or resume) a sweep; every finished probe is on disk even if this raises."""
    progress = progress or NullProgress()
    config, run, stored_plan = _prepare(config, resume)
    with claim_run_folder(run.path, new=stored_plan is None):  # one sweep per run folder (kvcal/sweep/lock.py)
        return _sweep_claimed(config, run, stored_plan, resume, pair_factory, progress)


def _sweep_claimed(config: SweepConfig, run: RunFolder, stored_plan: list[PlannedProbe] | None, resume: bool,
                   pair_factory: PairFactory, progress: SweepProgress) -> SweepOutcome:
    pair = pair_factory(config, run)
    if stored_plan is None:
        # Fail on bad lengths before minutes of engine start-up when the limit is known
        # (attached engines report theirs only once reached).
        try:
            _lengths_for(config, pair)
        except EngineError:
            pass
    run.create()
    records = run.read_probes(repair_torn_tail=True) if resume else []
    done_ids = completed_probe_ids(records)
    attempts = attempts_so_far(records)
    with sigterm_raises():
        progress.on_phase("starting engines" if config.engine != "sim" else "starting simulated pair")
        # Background streams (load states) are owned like the engines, and stop before them.
        load = LoadController(pair, config, lambda i: PromptSource(config.seed + 1 + i, pair.vocab_size).tokens,
                              progress.on_phase)
        with pair, load:
            plan = stored_plan if stored_plan is not None else plan_for(config, _lengths_for(config, pair))
            if stored_plan is None:
                run.write_manifest(_manifest(config, run, pair, plan))
            todo = [p for p in plan if p.probe_id not in done_ids]
            prompts = PromptSource(config.seed, pair.vocab_size)
            progress.on_phase("warming the pair (discarded)")
            pair.warm_up(prompts.tokens(min(p.prefix_tokens for p in plan)))
            done = done_before = len(plan) - len(todo)
            description = pair.describe()
            monitor = disturbance.monitor_for(description)  # primed here: the first probe's window starts now
            warmups = warmup.WarmupProbes(warmup.enabled(config.warmup_probes, description))
            progress.on_start(len(plan), done)
            measured = invalid = 0
            try:
                while True:  # a resumed run with nothing left may still grow (kvcal.sweep.reach)
                    for planned in todo:
                        load.enter(planned.load_state)
                        warm = warmups.before(pair, planned, prompts.tokens(planned.prefix_tokens))
                        if warm is not None:
                            run.append_probe(warm)
                        record = _probe_until_valid(pair, planned, prompts, run, config, attempts, progress, done,
                                                    len(plan), monitor=monitor, load_reading=load.reading)
                        invalid += record.attempt
                        measured += 1
                        done += 1
                    todo = _grow_default_design(config, run, plan, progress)
                    if not todo:
                        break
                    plan += todo
                _say_where_the_design_stopped(config, run, pair)
            finally:
                run.write_summary()
                progress.on_complete(done, len(plan))
    return SweepOutcome(run.path, len(plan), done_before, measured, invalid, resume)


def _grow_default_design(config: SweepConfig, run: RunFolder, plan: list[PlannedProbe],
                         progress: SweepProgress) -> list[PlannedProbe]:
    """The default design's probes below its shortest length (kvcal.sweep.reach), appended to run.json's plan."""
    if _explicit(config):
        return []  # measured as given; the fit's advice names what to add
    grown = reach.grown_probes(plan, run.read_probes(), block_size=config.block_size, reps=config.reps, seed=config.seed)
    if grown is None:
        return []
    probes, why = grown
    run.write_manifest(run.manifest().model_copy(update={"plan": [*plan, *probes]}))  # --resume sees the grown plan
    progress.on_phase(why)
    progress.on_start(len(plan) + len(probes), len(plan))
    return probes


def _say_where_the_design_stopped(config: SweepConfig, run: RunFolder, pair: EnginePair) -> None:
    """A default design that met the floor or the model's limit without a crossover says so."""
    if _explicit(config):
        return
    records = run.read_probes()
    longest = default_prefix_lengths(config.block_size, pair.max_model_len)[-1]
    for note in (reach.floor_note(records, config.block_size), reach.top_note(records, longest)):
        if note:
            log.warning(note)


def _probe_until_valid(
    pair: EnginePair,
    planned: PlannedProbe,
    prompts: PromptSource,
    run: RunFolder,
    config: SweepConfig,
    attempts: dict[str, int],
    progress: SweepProgress,
    done: int,
    total: int,
    monitor: disturbance.HostMonitor | None = None,
    load_reading: Callable[[], LoadReading] | None = None,
) -> ProbeRecord:
    kv_per_token = pair.kv_bytes_per_token
    expected = planned.prefix_tokens * kv_per_token if (kv_per_token and planned.leg is Leg.PULL) else (0 if planned.leg is Leg.RECOMPUTE else None)
    first_attempt = attempts.get(planned.probe_id, 0)
    reasons = []
    for attempt in range(first_attempt, first_attempt + config.max_attempts):
        loaded = load_reading().record_fields() if load_reading else {}  # the queues just before this attempt
        started_at = utc_now()
        if monitor is not None:
            monitor.before_probe()
        began = time.perf_counter()
        try:
            measured = pair.measure(planned.leg, prompts.tokens(planned.prefix_tokens))
        except EngineError as err:
            # A request the engine refused (e.g. a KV load that failed) is an invalid attempt;
            # an engine that is gone fails every retry quickly and ends the run below.
            measured, reason = None, f"request failed: {err}"
        else:
            reason = gate(planned.leg, measured, expected, config.min_pull_fraction)
        wall_ms = (time.perf_counter() - began) * 1e3
        host_busy = monitor.after_probe() if monitor is not None else None
        if measured is None:
            record = checked_record(
                probe_id=planned.probe_id, plan_index=planned.plan_index, attempt=attempt,
                prefix_tokens=planned.prefix_tokens, leg=planned.leg, rep=planned.rep, ttft_ms=None,
                bytes_moved=None, expected_bytes=expected, valid=False, invalid_reason=reason, started_at=started_at,
                host_busy=host_busy, **loaded,
                adaptive_round=planned.adaptive_round, adaptive_reason=planned.adaptive_reason,
            )
        else:
            engine_ms = measured.ttft_ms + (measured.producer_ttft_ms or 0.0)
            record = checked_record(
                probe_id=planned.probe_id, plan_index=planned.plan_index, attempt=attempt,
                prefix_tokens=planned.prefix_tokens, leg=planned.leg, rep=planned.rep,
                ttft_ms=measured.ttft_ms, bytes_moved=measured.bytes_moved, bytes_metric=measured.bytes_metric,
                expected_bytes=expected,
                producer_ttft_ms=measured.producer_ttft_ms,
                overhead_ms=measured.overhead_ms if measured.overhead_ms is not None else max(wall_ms - engine_ms, 0.0),
                valid=reason is None, invalid_reason=reason, started_at=started_at,
                metrics_delta=measured.metrics_delta, host_busy=host_busy, **loaded,
                adaptive_round=planned.adaptive_round, adaptive_reason=planned.adaptive_reason,
            )
        reason = record.invalid_reason if not record.valid else None  # checked_record: numbers out of bounds
        run.append_probe(record)
        attempts[planned.probe_id] = attempt + 1
        progress.on_probe(record, done + (1 if reason is None else 0), total)
        if reason is None:
            return record
        log.warning("probe %s attempt %d invalid: %s", planned.probe_id, attempt, reason)
        reasons.append(reason)
    if all(r.startswith("request failed") for r in reasons):
        raise EngineError(
            f"probe {planned.probe_id} failed {config.max_attempts} times in a row ({reasons[-1]}); "
            f"every finished probe is kept in {run.probes_path}; fix the engine and rerun with --resume"
        )
    raise GateError(
        f"probe {planned.probe_id} failed its gate {config.max_attempts} times in a row ({reasons[-1]}); "
        f"every finished probe is kept in {run.probes_path}; fix the cause and rerun with --resume"
    )


def _manifest(config: SweepConfig, run: RunFolder, pair: EnginePair, plan: list[PlannedProbe]) -> RunManifest:
    provenance = host_provenance()
    provenance["engine"] = pair.describe()
    created_at = utc_now()
    setup = pair.setup().model_copy(update={"model": config.model_label, "created_at": created_at})
    return RunManifest(name=run.path.name, created_at=created_at, settings=config, setup=setup,
                       provenance=provenance, plan=plan)
