"""Pulls are counted by the counter that proved them, in the run summary and in fit.json (issue 28, item 1)."""

from __future__ import annotations

import json

from factories import make_probe, write_run_folder
from kvcal.sweep.summary import summarize

TIER = 'consumer/vllm:kv_offload_tiering_read_bytes_total{tier="1:p2p"}'
LOAD = "consumer/vllm:kv_offload_load_bytes_total"


def _probes():
    records, i = [], 0
    for rep in range(3):
        for n in (256, 512, 1024, 2048, 4096, 8192):
            for leg, ttft in (("recompute", 10 + 0.02 * n + rep * 0.1), ("pull", 30 + 0.004 * n + rep * 0.1)):
                probe = make_probe(i, n, leg, ttft, rep=rep)
                if leg == "pull":
                    probe = probe.model_copy(update={"bytes_metric": LOAD if (n, rep) == (512, 0) else TIER})
                records.append(probe)
                i += 1
    return records


def test_the_summary_counts_each_lengths_pulls_by_proof():
    summary = summarize(_probes())
    pulls = summary[summary["leg"] == "pull"].set_index("prefix_tokens")["pull_proofs"]
    assert pulls[512] == f"{LOAD}=1; {TIER}=2"
    assert pulls[4096] == f"{TIER}=3"
    assert set(summary[summary["leg"] == "recompute"]["pull_proofs"]) == {""}


def test_fit_json_counts_the_fitted_pulls_by_proof(tmp_path, kvcal):
    run = write_run_folder(tmp_path / "run", _probes())
    result = kvcal("fit", str(run), "--resamples", "100")
    assert result.code == 0, result.err
    fitted = json.loads((run / "fit.json").read_text())
    assert fitted["pulls_by_proof"] == {LOAD: 1, TIER: 17}
