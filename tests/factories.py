"""One place that builds kvcal's records for tests: setups, fits, manifests, probes and run folders.

Every builder takes keyword overrides, so a test states only what it is about; the
defaults describe a small simulated run (block 64, 2048 B/token, seed 0).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcal.fit.fitting import fit_table
from kvcal.fit.io import write_fit as write_fit_file
from kvcal.engines.sim import SimCosts, SimPair
from kvcal.fit.tables import ProbeTable, from_rows
from kvcal.records.fit import BootstrapSummary, CurveFit, FitResult, FitSource
from kvcal.records.run import Leg, ProbeRecord, RunSetup
from kvcal.records.manifest import RunManifest
from kvcal.settings.sweep import FLAT_ORDER, SweepConfig
from kvcal.records.fit import FitSettings

CREATED_AT = "2026-01-01T00:00:00+00:00"
RECOMPUTE = CurveFit(model="quadratic", intercept_ms=5.0, per_token_us=25.0, per_token2_ns=0.012)
PULL = CurveFit(model="affine", intercept_ms=20.0, per_token_us=3.0, per_token2_ns=0.0)


def make_curve(intercept_ms: float, per_token_us: float, per_token2_ns: float = 0.0, **overrides: Any) -> CurveFit:
    """A fitted curve; quadratic when it has a squared term."""
    fields: dict[str, Any] = dict(model="quadratic" if per_token2_ns else "affine", intercept_ms=intercept_ms,
                                  per_token_us=per_token_us, per_token2_ns=per_token2_ns)
    return CurveFit(**{**fields, **overrides})


def make_setup(**overrides: Any) -> RunSetup:
    """A run setup; every field not given stays unknown (None)."""
    return RunSetup(**overrides)


def make_fit(**overrides: Any) -> FitResult:
    """A crossover fit at 1500 tokens ([1300, 1800]) of the default curves; ``setup``/``bootstrap`` may be dicts."""
    fields: dict[str, Any] = dict(
        status="crossover", break_even_tokens=1500.0, break_even_ci=[1300.0, 1800.0], confidence=0.95,
        extrapolated=False, measured_range=[256, 16384], recompute=RECOMPUTE, pull=PULL, block_size=64,
        kvcal_version="test", created_at=CREATED_AT,
    )
    fields.update(overrides)
    for key, record in (("setup", RunSetup), ("bootstrap", BootstrapSummary), ("source", FitSource)):
        if isinstance(fields.get(key), dict):
            fields[key] = record(**fields[key])
    return FitResult(**fields)


def make_manifest(**overrides: Any) -> RunManifest:
    """A run.json record of a simulated run; ``setup`` and ``settings`` may be dicts."""
    fields: dict[str, Any] = dict(name="sim-run", created_at=CREATED_AT, settings=SweepConfig(engine="sim"),
                                  setup=RunSetup(model="tiny", engine="sim", block_size=64, kv_bytes_per_token=2048,
                                                 python_hash_seed=0, created_at=CREATED_AT),
                                  provenance={}, plan=[])
    fields.update(overrides)
    if isinstance(fields["setup"], dict):
        fields["setup"] = RunSetup(**fields["setup"])
    if isinstance(fields["settings"], dict):
        fields["settings"] = SweepConfig(**fields["settings"])
    return RunManifest(**fields)


def flat_settings(config: SweepConfig) -> dict[str, Any]:
    """Settings as run.json held them before ``kvcal.run/4`` grouped them: every setting by its flat name."""
    return {name: _json(config.value(name)) for name in FLAT_ORDER}


def _json(value: Any) -> Any:
    if isinstance(value, list):
        return [_json(item) for item in value]
    return value.model_dump(mode="json", by_alias=True) if hasattr(value, "model_dump") else (
        str(value) if isinstance(value, Path) else value)


def make_probe(i: int, n: int, leg: str, ttft: float | None, *, rep: int = 0, attempt: int = 0, valid: bool = True,
               probe_id: str | None = None, bytes_moved: int | None | str = "auto") -> ProbeRecord:
    """One probe record; a pull moves n x 2048 bytes and a recompute none unless ``bytes_moved`` says otherwise."""
    moved = (n * 2048 if leg == "pull" else 0) if bytes_moved == "auto" else bytes_moved
    return ProbeRecord(probe_id=probe_id or f"p{i:04d}-L{n}-{leg}-r{rep}", plan_index=i, attempt=attempt,
                       prefix_tokens=n, leg=Leg(leg), rep=rep, ttft_ms=ttft, bytes_moved=moved, valid=valid,
                       invalid_reason=None if valid else "gate failed", started_at=CREATED_AT)


def probes_of(table: ProbeTable) -> list[ProbeRecord]:
    """A table's rows as valid probe records (bytes unknown), in table order."""
    return [make_probe(i, int(r.prefix_tokens), str(r.leg), float(r.ttft_ms), rep=int(r.rep), probe_id=f"p{i}",
                       bytes_moved=None) for i, r in enumerate(table.probes.itertuples())]


def write_run_folder(folder: Path, probes: list[ProbeRecord] | ProbeTable, *, manifest: RunManifest | None = None,
                     fit: FitResult | None = None, tail: str = "") -> Path:
    """A run folder as a sweep leaves it: run.json, probes.jsonl (``tail`` appended raw), and fit.json if given."""
    folder.mkdir(parents=True, exist_ok=True)
    records = probes_of(probes) if isinstance(probes, ProbeTable) else probes
    (folder / "run.json").write_text((manifest or make_manifest()).model_dump_json(by_alias=True))
    lines = [r.model_dump_json(by_alias=True) for r in records]
    (folder / "probes.jsonl").write_text("\n".join(lines) + "\n" + tail)
    if fit is not None:
        write_fit_file(fit, folder / "fit.json")
    return folder


def sim_table(costs: SimCosts, lengths: list[int], reps: int, *, seed: int = 0, block_size: int = 64,
              kv_bytes_per_token: int = 2048) -> ProbeTable:
    """A synthetic campaign from :class:`kvcal.engines.sim.SimPair` (a test and benchmark helper: the stages never read the simulator).

    Legs alternate within each (length, rep) as a sweep's shuffled plan would; the
    truth is ``costs.true_break_even()``.
    """
    pair = SimPair(costs, seed=seed, block_size=block_size, kv_bytes_per_token=kv_bytes_per_token)
    rows = []
    for rep in range(reps):
        for n in lengths:
            ids = [0] * int(n)
            for leg in (Leg.RECOMPUTE, Leg.PULL):
                m = pair.measure(leg, ids)
                rows.append({"prefix_tokens": int(n), "leg": leg.value, "ttft_ms": m.ttft_ms, "rep": rep,
                             "bytes_moved": m.bytes_moved})
    return from_rows(rows, setup=pair.setup().model_copy(update={"model": "sim"}), origin=FitSource(kind="sim"))


def sim_run(folder: Path, *, costs: SimCosts | None = None, lengths: tuple[int, ...] = (256, 512, 1024, 2048, 4096),
            reps: int = 3, seed: int = 0, created_at: str = CREATED_AT, n_resamples: int = 200,
            provenance: dict[str, Any] | None = None) -> Path:
    """A fitted run folder of a simulated campaign (run.json, probes.jsonl with bytes moved, fit.json), made at
    ``created_at``; the reports' tests read it as they read a sweep's."""
    table = sim_table(costs or SimCosts(), list(lengths), reps, seed=seed)
    setup = table.setup.model_copy(update={"created_at": created_at})
    fit = fit_table(table.with_setup(setup), settings=FitSettings(n_resamples=n_resamples, seed=seed))
    records = [make_probe(i, int(r.prefix_tokens), str(r.leg), float(r.ttft_ms), rep=int(r.rep), probe_id=f"p{i}")
               for i, r in enumerate(table.probes.itertuples())]
    manifest = make_manifest(name=folder.name, created_at=created_at, setup=setup, provenance=provenance or {})
    return write_run_folder(folder, records, manifest=manifest, fit=fit)
