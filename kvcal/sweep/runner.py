"""Run a sweep: the one public entry (:func:`run_sweep`), its dry run, and the run folder it works in.

:func:`run_sweep` picks the run folder (a new one, or the stored settings and plan on
``--resume``), chooses the campaign the settings ask for (a planned ladder or an adaptive
one) and hands both to a :class:`kvcal.sweep.session.ProbeSession`, which runs the one
probe loop.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from kvcal.engines.base import EnginePair
from kvcal.engines.pairset import PairSet
from kvcal.engines.sim import SimPair
from kvcal.engines.vllm import pair_from_config
from kvcal.errors import EngineError, InputError
from kvcal.provenance import host_provenance, utc_now
from kvcal.run_manifest import RunManifest
from kvcal.runfolder import RunFolder, completed_probe_ids
from kvcal.settings import SweepConfig
from kvcal.sweep.adaptive_run import AdaptiveCampaign
from kvcal.sweep.lengths import grow_below
from kvcal.sweep.lengths.probe_plan import PlannedProbe
from kvcal.sweep.load import plan_for
from kvcal.sweep.lock import no_run_to_resume
from kvcal.sweep.probe import gate  # noqa: F401  (the gate is part of the sweep's public face)
from kvcal.sweep.progress import NullProgress, SweepProgress
from kvcal.sweep.regret_stop import Judge
from kvcal.sweep.session import (
    Campaign,
    PairFactory,
    PlannedCampaign,
    ProbeSession,
    SweepOutcome,
    explicit_lengths,
    lengths_for,
)
from kvcal.sweep.validate import check_resume


@dataclass(frozen=True)
class DryRun:
    run_dir: Path
    commands: list[str]
    plan: list[PlannedProbe]


def default_run_name(config: SweepConfig) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    label = re.sub(r"[^A-Za-z0-9._-]+", "-", Path(config.engine.model_label).name or config.engine.model_label).strip(
        "-"
    )
    return f"{stamp}-{label or 'model'}"


def make_pair(config: SweepConfig, run: RunFolder) -> EnginePair:
    """The engine pair named by the config (a campaign over pairs: each of them, behind one PairSet)."""
    if config.pairs is None:
        return _one_pair(config, run)
    members = {}
    for index, spec in enumerate(config.pairs):
        if config.engine.kind == "sim":  # each simulated pair draws its own noise, on its own curves when it has them
            probe = config.probe.model_copy(update={"seed": config.probe.seed + index})
            update: dict[str, object] = {"probe": probe, "sim": spec.sim or config.sim}
        else:
            update = {"engine": config.engine.model_copy(update=spec.attach_settings())}
        members[spec.name] = _one_pair(config.model_copy(update={**update, "pairs": None}), run)
    return PairSet(members, {spec.name: spec.link_class for spec in config.pairs})


def _one_pair(config: SweepConfig, run: RunFolder) -> EnginePair:
    if config.engine.kind == "sim":
        sim = config.sim
        return SimPair(
            sim.costs,
            block_size=config.engine.block_size,
            max_model_len=sim.max_model_len,
            seed=config.probe.seed,
            fail_pull_rate=sim.fail_pull_rate,
            python_hash_seed=config.engine.python_hash_seed,
        )
    return pair_from_config(config, run)


def build_manifest(config: SweepConfig, run: RunFolder, pair: EnginePair, plan: list[PlannedProbe]) -> RunManifest:
    """run.json of a new run: the settings, the pair's setup and facts, the host's provenance and the plan."""
    provenance = host_provenance()
    provenance["engine"] = pair.describe()
    created_at = utc_now()
    setup = pair.setup().model_copy(
        update={"model": config.engine.model_label, "created_at": created_at, "max_model_len": _served_length(pair)}
    )
    return RunManifest(
        name=run.path.name,
        created_at=created_at,
        settings=config,
        setup=setup,
        pair=pair.facts(),
        provenance=provenance,
        plan=plan,
    )


def _served_length(pair: EnginePair) -> int | None:
    """The longest context the started pair serves (emit-config's work-range labels end there); None if unknown."""
    try:
        return int(pair.max_model_len)
    except EngineError:
        return None


def prepare_run(config: SweepConfig, resume: bool) -> tuple[SweepConfig, RunFolder, list[PlannedProbe] | None]:
    """Pick the run folder; on resume, return the stored settings and plan."""
    output_dir = Path(config.output.output_dir)
    if resume:
        if config.output.name:
            run = RunFolder(output_dir / config.output.name)
        else:
            candidates = sorted(
                (p for p in output_dir.glob("*") if RunFolder.is_run_folder(p)), key=lambda p: p.stat().st_mtime
            )
            if not candidates:
                raise InputError(f"no run to resume in {output_dir}; give --name or --output-dir")
            run = RunFolder(candidates[-1])
        if not RunFolder.is_run_folder(run.path):
            raise InputError(no_run_to_resume(run.path))
        manifest = run.manifest()
        stored = manifest.settings.with_output(output_dir=output_dir, name=run.path.name)
        check_resume(stored, config)
        plan = list(manifest.plan)
        return stored, run, plan
    name = config.output.name or default_run_name(config)
    run = RunFolder(output_dir / name)
    if run.has_probes() or RunFolder.is_run_folder(run.path):
        raise InputError(f"run folder {run.path} already exists; add --resume to continue it or choose another --name")
    return config.with_output(name=name), run, None


def plan_dry_run(config: SweepConfig, pair_factory: PairFactory = make_pair, *, resume: bool = False) -> DryRun:
    """What ``sweep`` (or ``sweep --resume``) would run, without starting anything or writing any file."""
    config, run, plan = prepare_run(config, resume=resume)
    pair = pair_factory(config, run)
    if plan is None:
        plan = plan_for(config, lengths_for(config, pair))
    else:  # resume: what is left of the stored plan, else what the default design would add below it
        records = run.read_probes()
        done = completed_probe_ids(records)
        left = [p for p in plan if p.probe_id not in done]
        grown = (
            None
            if left or explicit_lengths(config)
            else grow_below.grown_probes(
                plan, records, block_size=config.engine.block_size, reps=config.probe.reps, seed=config.probe.seed
            )
        )
        plan = grown[0] if grown else left
    return DryRun(run.path, pair.dry_run_commands(), plan)


def run_sweep(
    config: SweepConfig,
    *,
    resume: bool = False,
    pair_factory: PairFactory = make_pair,
    progress: SweepProgress | None = None,
    judge: Judge | None = None,
) -> SweepOutcome:
    """Run (or resume) the campaign the settings ask for; every finished probe is on disk even if this raises.

    An adaptive campaign (``adaptive``, the stored setting on resume) returns an
    :class:`kvcal.sweep.adaptive_run.AdaptiveOutcome`; ``judge`` is emit-config's verdict on a fit, which its
    targets must satisfy (:mod:`kvcal.sweep.regret_stop`; the emit stage sits above this one, so the caller hands
    it in).
    """
    prepared, run, stored_plan = prepare_run(config, resume)
    campaign: Campaign
    if prepared.adaptive.enabled:
        if prepared.load.loaded:
            raise InputError("--adaptive chooses lengths for the idle break-even; run --load-states as a planned sweep")
        campaign = AdaptiveCampaign(prepared, run, requested=config, resume=stored_plan is not None, judge=judge)
    else:
        campaign = PlannedCampaign(prepared)
    session = ProbeSession(
        prepared,
        run,
        resume=resume,
        pair_factory=pair_factory,
        manifest_factory=build_manifest,
        progress=progress or NullProgress(),
    )
    outcome = session.run_campaign(campaign, stored_plan)
    return campaign.outcome(outcome) if isinstance(campaign, AdaptiveCampaign) else outcome
