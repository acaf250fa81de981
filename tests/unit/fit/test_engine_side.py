"""fit.json's engine_side: per-token medians of the engines' own transfer and prefill times over the fitted probes;
null where the engines exported none (a CSV), null as a whole in an older fit.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import CREATED_AT, make_manifest, make_probe, sim_table, write_run_folder
from kvcal.engines.sim import SimCosts
from kvcal.fit_record import load_fit
from kvcal.records import ProbeEngineSide

BASELINE = Path(__file__).parents[3] / "results" / "baselines" / "cpu-tiny"


def _records(wire_us: float = 1.0, prefill_us: float = 40.0, tp_pooled: int = 1):
    """A small NIXL campaign whose probes carry the engines' own figures (a heavy-tailed transfer at one length)."""
    table = sim_table(SimCosts(), [256, 512, 1024, 2048, 4096], 3, seed=2)
    out = []
    for i, row in enumerate(table.probes.itertuples()):
        n = int(row.prefix_tokens)
        record = make_probe(i, n, str(row.leg), float(row.ttft_ms), rep=int(row.rep), probe_id=f"p{i}")
        if row.leg == "pull":
            stall = 0.004 if (n, int(row.rep)) == (256, 0) else 0.0  # a few ms of scheduling: the median ignores it
            side = ProbeEngineSide(pull_time_s=(wire_us * n * 1e-6 + stall) * tp_pooled, pull_transfers=tp_pooled,
                                   pull_bytes=n * 2048.0, pulled_tokens=n, prefill_time_s=0.005, prefill_tokens=n,
                                   prefill_requests=1)
        else:
            side = ProbeEngineSide(prefill_time_s=prefill_us * n * 1e-6, prefill_tokens=n, prefill_requests=1,
                                   pull_time_s=0.0, pulled_tokens=0)
        out.append(record.model_copy(update={"engine_side": side}))
    return out


def _fit(kvcal, folder: Path) -> dict:
    result = kvcal("fit", folder, "--resamples", "200", "--json")
    assert result.code == 0, result.err
    return json.loads(result.out)


@pytest.mark.parametrize("tp", [1, 2])
def test_the_fit_records_the_engines_per_token_costs(kvcal, tmp_path, tp):
    manifest = make_manifest(setup={"engine": "vllm", "transport": "nixl-pd", "block_size": 64,
                                    "kv_bytes_per_token": 2048, "tensor_parallel_size": tp, "created_at": CREATED_AT})
    folder = write_run_folder(tmp_path / "run", _records(tp_pooled=tp), manifest=manifest)
    side = _fit(kvcal, folder)["engine_side"]
    # NIXL's time sums every rank's transfer: divided by TP it is the wire's 1 us a token again
    assert side["pull_ms_per_token"] == {"value": pytest.approx(0.001), "samples": 15}
    # the recompute probes alone (a pulled request's computed tokens include what it pulled)
    assert side["prefill_ms_per_token"] == {"value": pytest.approx(0.040), "samples": 15}
    assert load_fit(folder / "fit.json").engine_side.pull_ms_per_token.samples == 15


def test_a_run_without_engine_figures_and_a_csv_give_nulls(kvcal, tmp_path):
    plain = [r.model_copy(update={"engine_side": None}) for r in _records()]
    folder = write_run_folder(tmp_path / "run", plain)
    assert _fit(kvcal, folder)["engine_side"] == {"pull_ms_per_token": None, "prefill_ms_per_token": None}
    csv = tmp_path / "probes.csv"
    sim_table(SimCosts(), [256, 512, 1024, 2048], 3).probes.to_csv(csv, index=False)
    assert _fit(kvcal, csv)["engine_side"] == {"pull_ms_per_token": None, "prefill_ms_per_token": None}


def test_an_older_fit_json_reads_as_null_and_an_older_runs_metrics_delta_is_read(kvcal, tmp_path):
    assert load_fit(BASELINE / "fit.json").engine_side is None  # written before engine_side
    folder = tmp_path / "cpu-tiny"
    folder.mkdir()
    for name in ("run.json", "probes.jsonl"):
        (folder / name).write_bytes((BASELINE / name).read_bytes())
    side = _fit(kvcal, folder)["engine_side"]  # its probes kept every counter's change in metrics_delta
    assert side["pull_ms_per_token"]["value"] == pytest.approx(0.00109, rel=0.01)
    assert side["prefill_ms_per_token"]["value"] == pytest.approx(0.0400, rel=0.01)
    assert side["pull_ms_per_token"]["samples"] == side["prefill_ms_per_token"]["samples"] == 39
