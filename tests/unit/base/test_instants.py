"""Start times are instants: offsets, unreadable times in a run folder, and one window for ISO and epoch."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from factories import make_probe, sim_table, write_run_folder
from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit import fit_table
from kvcal.fit.fields import start_time
from kvcal.fit.tables import load_probe_table
from kvcal.files.instants import instant
from kvcal.records.fit import FitSettings
from kvcal.records.run import RunSetup

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
ZONES = [timezone.utc, timezone(timedelta(hours=-8)), timezone(timedelta(hours=9))]


def _drifting_run(folder: Path, *, mixed: bool) -> Path:
    """Probes 10 s apart in time, the host slowing by 80 % over the run; written in file order shuffled so that
    only started_at gives the time order, each stamp in one of three offsets when ``mixed``."""
    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 4, seed=3)
    rows = table.probes.to_dict("records")
    records = []
    for i, row in enumerate(rows):
        at = (START + timedelta(seconds=10 * i)).astimezone(ZONES[i % 3] if mixed else timezone.utc)
        probe = make_probe(i, int(row["prefix_tokens"]), row["leg"], row["ttft_ms"] * (1 + 0.8 * i / len(rows)),
                           rep=int(row["rep"]), probe_id=f"p{i}")
        records.append(probe.model_copy(update={"started_at": at.isoformat()}))
    order = np.random.default_rng(0).permutation(len(records))
    return write_run_folder(folder, [records[i] for i in order])


def test_mixed_offsets_give_the_drift_of_the_utc_copy(tmp_path):
    utc = fit_table(load_probe_table(_drifting_run(tmp_path / "utc", mixed=False)), settings=FitSettings(n_resamples=0))
    mixed = fit_table(load_probe_table(_drifting_run(tmp_path / "mixed", mixed=True)), settings=FitSettings(n_resamples=0))
    assert {t.leg for t in utc.time_trends} == {"recompute", "pull"}
    assert [(t.leg, t.change, t.order_source) for t in mixed.time_trends] == \
        [(t.leg, t.change, t.order_source) for t in utc.time_trends]
    assert all(t.order_source == "started_at" for t in mixed.time_trends)


@pytest.mark.parametrize("stamp", ["yesterday", "", "0001-01-01T00:00:00"])
def test_an_unreadable_start_time_turns_the_time_analysis_off_and_names_its_line(tmp_path, stamp):
    run = _drifting_run(tmp_path / "run", mixed=False)
    lines = (run / "probes.jsonl").read_text().splitlines()
    record = json.loads(lines[4])
    record["started_at"] = stamp
    lines[4] = json.dumps(record)
    (run / "probes.jsonl").write_text("\n".join(lines) + "\n")
    table = load_probe_table(run)
    assert table.order_source is None and table.probes["order"].isna().all()
    assert any("probes.jsonl line 5: started_at" in w for w in table.warnings)
    assert fit_table(table, settings=FitSettings(n_resamples=0)).time_trends == []


@pytest.mark.parametrize("iso, epoch", [("2026-01-01T00:00:00+00:00", "1767225600"),
                                        ("2026-01-01T09:00:00+09:00", "1767225600.0")])
def test_iso_and_epoch_read_as_one_instant(iso, epoch):
    assert instant(iso) == instant(epoch) == 1767225600.0


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00", "2526-01-01T00:00:00Z", "17000000000", "1_765_000001",
                                  "1e9", "-5", "nan", "yesterday", ""])
def test_the_same_window_and_forms_hold_for_iso_and_epoch(text):
    with pytest.raises(InputError, match="started_at"):
        start_time(text, "probes.csv row 2")


def test_a_drift_found_from_a_csvs_started_at_is_labelled_so_when_flags_give_the_setup(tmp_path):
    """Before, a setup given by flags (--block-size) rebuilt the table without its time order's source: "from order"."""
    from kvcal.fit.inputs import load_fit_input
    from kvcal.records.run_folder import RunFolder, export_interchange

    run = _drifting_run(tmp_path / "run", mixed=True)
    export_interchange(RunFolder(run), tmp_path / "p.csv")
    table = load_fit_input(tmp_path / "p.csv", supplied=RunSetup(block_size=64)).table
    assert table.order_source == "started_at" and table.block_size == 64
    assert {t.order_source for t in fit_table(table, settings=FitSettings(n_resamples=0)).time_trends} == {"started_at"}
