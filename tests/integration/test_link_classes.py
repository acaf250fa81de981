"""Two link classes for real (tests/netlinks.py): one `kvcal sweep --pairs` over a loopback pair and a pair in two
network namespaces joined by a tbf-limited veth (NIXL over UCX TCP), one `kvcal fit` per class, namespaces removed.

It holds the plumbing to account (each probe tagged and its bytes proven over its own link, the first pull of each
pair measured cold, one fit per class, nothing left behind); the figures (per-token cost against bytes over the
rate, the break-evens' order, the session cost) are benchmarks/link_classes.py's, as they depend on a quiet host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("vllm")

from kvcal.engines.dtype import choose_dtype, cpu_flags  # noqa: E402
from kvcal.records.run import Leg  # noqa: E402
from kvcal.records.run_folder import RunFolder  # noqa: E402
from netlinks import NetLinks, namespaces_left, netns_unavailable  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.netns]
# What the tiny model's KV takes a token in the dtype kvcal launches it in on this host (kvcal.engines.dtype); the
# sweep attaches, and an attached engine's --dtype is not visible to it, so the bytes are checked against this.
KV_BYTES = {"bfloat16": 2048, "float32": 4096}[choose_dtype((), tiny_model=True, device="cpu", flags=cpu_flags()).dtype]


@pytest.fixture(scope="module")
def links(tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (CI runs as root)")
    why = netns_unavailable()
    if why:
        pytest.skip(f"ip netns is unavailable here: {why}")
    made = NetLinks(tmp_path_factory.mktemp("links"))
    try:
        made.start("1gbit")
        yield made
    finally:
        made.close()
        assert not namespaces_left(), "the test's namespaces outlived it"


def test_one_campaign_over_a_loopback_and_a_rate_limited_pair(links, tmp_path):
    pairs = tmp_path / "pairs.yaml"
    pairs.write_text(links.pairs_yaml({"loop": "loopback", "veth": "veth-1gbit"}))
    kvcal = [sys.executable, "-m", "kvcal.cli.app"]
    swept = subprocess.run([*kvcal, "sweep", "--pairs", pairs, "--output-dir", tmp_path, "--name", "links",
                            "--prefix-lengths", "512,2048", "--reps", "2", "--seed", "1"],
                           capture_output=True, text=True, timeout=1200)
    assert swept.returncode == 0, swept.stderr[-3000:]
    records = RunFolder(tmp_path / "links").read_probes()
    assert {(r.pair, r.link_class) for r in records} == {("loop", "loopback"), ("veth", "veth-1gbit")}
    cold = [r for r in records if r.session == "cold" and r.valid]
    assert sorted(r.pair for r in cold) == ["loop", "veth"] and all(r.bytes_moved for r in cold)
    for r in records:
        if r.valid and r.leg is Leg.PULL:
            assert r.bytes_moved == pytest.approx(r.prefix_tokens * KV_BYTES, rel=0.1)
    fitted = subprocess.run([*kvcal, "fit", tmp_path / "links", "--json", "--resamples", "200"],
                            capture_output=True, text=True, timeout=600)
    assert fitted.returncode == 0, fitted.stderr[-3000:]
    fit = json.loads(fitted.stdout)
    assert set(fit["classes"]) == {"loopback", "veth-1gbit"}
    for cls in fit["classes"].values():
        assert cls["session_cost_ms"] is not None and cls["fit"]["session_cost"]["n_cold"] == 1
