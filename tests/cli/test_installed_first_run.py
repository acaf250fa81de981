"""Issue 29's contract through the INSTALLED ``kvcal`` script: a default design that finds a short crossover,
advice in lengths kvcal accepts, --json warnings on stderr, from-config without MLP sizes; plan's ladder grows as
that design does."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hf_configs" / "no_mlp"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")

# Simulated curves that cross at 180 tokens (block size 64): recompute 2 ms + 0.1 ms/token, the pull a flat 20 ms.
SHORT_CROSSOVER = """sim:
  recompute_intercept_ms: 2.0
  recompute_per_token_us: 100.0
  recompute_per_token2_ns: 0.0
  pull_intercept_ms: 20.0
  pull_per_token_us: 0.0
  max_model_len: 4096
"""
TRUTH = 180.0


def kvcal(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.fixture
def campaign(tmp_path) -> Path:
    (tmp_path / "short.yaml").write_text(SHORT_CROSSOVER)
    return tmp_path


@pytest.mark.parametrize("mode", [[], ["--adaptive", "--target-width", "0.10"]], ids=["ladder", "adaptive"])
def test_the_default_design_locates_a_crossover_below_the_ladder(campaign, mode):
    swept = kvcal("sweep", "--engine", "sim", "--config", "short.yaml", "--name", "r", *mode, cwd=campaign)
    assert swept.returncode == 0, swept.stderr
    fitted = kvcal("fit", "results/r", "--json", cwd=campaign)
    assert fitted.returncode == 0, fitted.stderr
    fit = json.loads(fitted.stdout)
    assert fit["status"] == "crossover" and fit["extrapolated"] is False
    low, high = fit["break_even_ci"]
    assert low <= TRUTH <= high
    assert fit["measured_range"][0] == 128  # the floor: two blocks of 64


def test_the_ladder_says_it_grew_and_resume_shows_the_grown_plan(campaign):
    dry = kvcal("sweep", "--engine", "sim", "--config", "short.yaml", "--name", "r", "--dry-run", cwd=campaign)
    assert dry.returncode == 0, dry.stderr
    assert "# default design: if the pull wins at 256 tokens, lengths below it are added" in dry.stdout
    assert "down to 128 tokens, two blocks of 64" in dry.stdout
    swept = kvcal("sweep", "--engine", "sim", "--config", "short.yaml", "--name", "r", "--reps", "2", cwd=campaign)
    assert swept.returncode == 0, swept.stderr
    assert "the pull won at 256 tokens" in swept.stderr and "adding 128,192 tokens" in swept.stderr
    run = campaign / "results" / "r"
    plan = json.loads((run / "run.json").read_text())["plan"]
    assert {p["prefix_tokens"] for p in plan} >= {128, 192}
    assert sorted(p["plan_index"] for p in plan) == list(range(len(plan)))
    # a run that died among the grown probes: --resume --dry-run lists what is left of them
    lines = (run / "probes.jsonl").read_text().splitlines()
    (run / "probes.jsonl").write_text("\n".join(lines[:-3]) + "\n")
    resumed = kvcal("sweep", "--name", "r", "--resume", "--dry-run", cwd=campaign)
    assert resumed.returncode == 0, resumed.stderr
    left = [line.split("\t") for line in resumed.stdout.splitlines() if not line.startswith("#")]
    assert len(left) == 3 and {int(row[1]) for row in left} <= {128, 192}
    finished = kvcal("sweep", "--name", "r", "--resume", cwd=campaign)
    assert finished.returncode == 0, finished.stderr
    assert "3 measured now" in finished.stderr


def test_explicit_lengths_are_measured_as_given_and_the_advice_names_lengths_to_add(campaign):
    swept = kvcal("sweep", "--engine", "sim", "--config", "short.yaml", "--name", "r", "--prefix-lengths",
                  "256,512,1024", cwd=campaign)
    assert swept.returncode == 0, swept.stderr
    plan = json.loads((campaign / "results" / "r" / "run.json").read_text())["plan"]
    assert {p["prefix_tokens"] for p in plan} == {256, 512, 1024}
    fitted = kvcal("fit", "results/r", "--json", cwd=campaign)
    assert json.loads(fitted.stdout)["status"] == "pull-always-wins"
    assert "add shorter lengths to locate it: --prefix-lengths 128,192 (the floor is 128 tokens)" in fitted.stderr
    assert "32-256" not in fitted.stderr


def test_fit_json_keeps_stdout_for_the_data_and_names_a_warm_up_effect_on_stderr(tmp_path):
    rows = ["prefix_tokens,leg,ttft_ms,rep"]
    for n in (256, 512, 1024, 2048):
        for leg, cost in (("recompute", 5 + 0.03 * n), ("pull", 20 + 0.003 * n)):
            rows += [f"{n},{leg},{cost * (1.5 if rep == 0 else 1) * (1 + 0.01 * rep):.3f},{rep}" for rep in range(3)]
    (tmp_path / "probes.csv").write_text("\n".join(rows) + "\n")
    fitted = kvcal("fit", "probes.csv", "--json", cwd=tmp_path)
    assert fitted.returncode == 0, fitted.stderr
    fit = json.loads(fitted.stdout)  # stdout is the JSON alone
    said = [w for w in fit["warnings"] if "warm-up effect" in w]
    assert said and f"kvcal: warning: {said[0]}" in fitted.stderr.splitlines()


@pytest.mark.parametrize("name,kv_bytes", [("deepseek-v3", 70_272), ("qwen3-235b-a22b", 192_512), ("glm-4.5", 376_832)])
def test_from_config_derives_the_kv_layout_without_mlp_sizes(tmp_path, name, kv_bytes):
    done = kvcal("profiles", "from-config", str(FIXTURES / f"{name}.json"), "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["kv_bytes_per_token"] == kv_bytes
    assert out["compute_estimate"].startswith("incomplete") and out["dense_flops_per_token"] is None
    assert "gives no MLP sizes" in done.stderr
    text = kvcal("profiles", "from-config", str(FIXTURES / f"{name}.json"), cwd=tmp_path)
    assert text.returncode == 0 and "dense prefill FLOPs per token: unknown" in text.stdout
    predicted = kvcal("predict", "--model", str(FIXTURES / f"{name}.json"), "--hardware", "h200", cwd=tmp_path)
    assert predicted.returncode == 2 and "has no MLP sizes" in predicted.stderr
    assert len(predicted.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("pull_ms,mode,said", [
    (0.5, [], "the pull won down to 128 tokens, two blocks of 64"),
    (0.5, ["--adaptive"], "the pull won down to 128 tokens, two blocks of 64"),
    (500.0, [], "recompute won at 4032 tokens, the longest prompt this model allows"),
    (500.0, ["--adaptive"], "recompute won up to 4032 tokens, the longest prompt this model allows"),
], ids=["ladder-floor", "adaptive-floor", "ladder-limit", "adaptive-limit"])
def test_a_default_design_that_meets_an_end_says_how_far_a_pull_or_the_model_allows(tmp_path, pull_ms, mode, said):
    (tmp_path / "c.yaml").write_text(f"sim:\n  pull_intercept_ms: {pull_ms}\n  max_model_len: 4096\n")
    swept = kvcal("sweep", "--engine", "sim", "--config", "c.yaml", "--name", "r", "--reps", "2", *mode, cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    assert said in swept.stderr


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    """A default design under a 300-token limit on curves crossing at 180: it measured 128-256 (grown from 256)."""
    root = tmp_path_factory.mktemp("short")
    (root / "c.yaml").write_text(SHORT_CROSSOVER.replace("max_model_len: 4096", "max_model_len: 300"))
    swept = kvcal("sweep", "--engine", "sim", "--config", "c.yaml", "--reps", "2", "--name", "r", cwd=root)
    assert swept.returncode == 0, swept.stderr
    fitted = kvcal("fit", "results/r", "--json", "--resamples", "200", cwd=root)
    assert fitted.returncode == 0, fitted.stderr
    assert json.loads(fitted.stdout)["measured_range"] == [128, 256]
    return root / "results" / "r"


def _plan(run: Path, limit: int) -> subprocess.CompletedProcess:
    return kvcal("plan", "--from", str(run), "--max-model-len", str(limit), "--campaigns", "1", "--json", cwd=run)


@pytest.mark.parametrize("limit", [257, 300, 320, 512, 1000])
def test_plan_simulates_the_ladder_a_sweep_would_grow_at_a_short_limit(short_run, limit):
    """Before, plan's ladder never grew below 256: a limit of 257-320 left it 256 alone, and plan ended in the
    fit's "recompute leg has one prefix length only (256)" (exit 2) on a run that had measured 128-256."""
    done = _plan(short_run, limit)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert {"adaptive", "ladder", "ladder-3"} <= {d["design"] for d in plan["designs"]}
    assert plan["allowed_range"] == [128, (limit - 1) // 64 * 64]


def test_plan_grows_a_one_length_ladder_even_where_recompute_wins(tmp_path):
    """A limit of 257-320 tokens leaves the default ladder 256 alone; where recompute wins there, a sweep (and so
    the plan) still adds the octave below, since no fit can use one length. Before, the plan simulated no ladder."""
    (tmp_path / "c.yaml").write_text(SHORT_CROSSOVER.replace("pull_intercept_ms: 20.0", "pull_intercept_ms: 100.0"))
    swept = kvcal("sweep", "--engine", "sim", "--config", "c.yaml", "--reps", "2", "--prefix-lengths",
                  "128,256,512,1024,2048", "--name", "r", cwd=tmp_path)  # crossing at about 1,000 tokens
    assert swept.returncode == 0, swept.stderr
    done = _plan(tmp_path / "results" / "r", 300)
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert [d["design"] for d in plan["designs"]] == ["adaptive", "ladder-3"]
    assert not [note for note in plan["notes"] if "the default ladder has one length" in note]
