"""kvcal predict: curve shapes, the exact break-even, the published ladders it must land near, and the JSON contract."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvcal.cli.app import main
from kvcal.errors import InputError
from kvcal.estimate.predict import PredictSettings, build_cost_model, predict, solve_break_even
from kvcal.estimate.profiles import load_profiles

REPO = Path(__file__).resolve().parents[3]
SETUPS = [  # (model, accelerator, link): every attention family, GPU and CPU
    ("llama-3.1-8b", "h100", "rdma-400"),
    ("qwen3-32b", "b200", "tcp-100g"),
    ("gpt-oss-120b", "h200", "rdma-400"),
    ("gpt-oss-120b", "h200", "tcp-100g"),
    ("deepseek-v3", "h200", "rdma-200"),
    ("deepseek-v3.2", "h200", "tcp-100g"),
    ("glm-moe-dsa-753b", "h200", "tcp-100g"),
    ("glm-4.5", "h100", "rdma-400"),
    ("tiny-llama-cpu", "cpu-amx", "cpu-ucx-cma"),
    ("tiny-llama-cpu", "cpu-amx", "cpu-ucx-tcp"),
]


@pytest.fixture(scope="module")
def profiles():
    return load_profiles(REPO / "kvcal" / "estimate" / "profile_data")


def _cost(profiles, model, hw, link, **settings):
    return build_cost_model(profiles.model(model), profiles.accelerator(hw), profiles.link(link), PredictSettings(**settings))


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: "-".join(s))
def test_pull_is_linear_and_recompute_convex(profiles, setup):
    cost = _cost(profiles, *setup)
    start = max(cost.breakpoints() or [0]) + 64  # past every window and top-k
    n = np.linspace(start, start + 60_000, 25)
    pull = np.array([cost.pull_ms(x) for x in n])
    recompute = np.array([cost.recompute_ms(x) for x in n])
    assert np.allclose(np.diff(pull, 2), 0, atol=1e-7 * pull.max())  # linear
    assert np.all(np.diff(pull) > 0)
    assert np.all(np.diff(recompute, 2) > 0)  # convex: the attention term
    assert np.all(np.diff(recompute) > 0)


@pytest.mark.parametrize("setup", SETUPS, ids=lambda s: "-".join(s))
def test_break_even_is_the_exact_root_and_matches_a_brute_force_scan(profiles, setup):
    cost = _cost(profiles, *setup)
    upper = profiles.model(setup[0]).max_position_embeddings
    status, root = solve_break_even(cost, upper)
    grid = np.arange(1, upper + 1, dtype=float)
    diff = np.array([cost.difference_ms(x) for x in grid[:: max(1, upper // 20000)]])
    sampled = grid[:: max(1, upper // 20000)]
    if status == "crossover":
        assert abs(cost.recompute_ms(root) - cost.pull_ms(root)) < 1e-6 * cost.pull_ms(root)
        assert cost.difference_ms(root - 1) < 0 <= cost.difference_ms(root + 1)
        first = sampled[np.argmax(diff >= 0)]
        assert abs(first - root) <= (sampled[1] - sampled[0]) + 1
    elif status == "pull-always-wins":
        assert cost.difference_ms(1) >= 0
    else:
        assert np.all(diff < 0)


def test_piecewise_pieces_are_exact_polynomials(profiles):
    cost = _cost(profiles, "glm-moe-dsa-753b", "h200", "tcp-100g")  # top-k breakpoint at 2048
    for n in (100.0, 1500.0, 3000.0, 50_000.0):
        c0, c1, c2 = cost.difference_poly(n)
        assert c0 + c1 * n + c2 * n * n == pytest.approx(cost.difference_ms(n), rel=1e-9, abs=1e-9)


def test_reproduces_the_published_gpt_oss_h200_ladder(profiles):
    lengths = (2048, 8192, 16384, 32768, 49152)
    recompute = (70.6, 205.4, 426.3, 983.0, 1695)  # shared/reference/p2p-kv-sharing.md
    pull = (49.0, 120.1, 196.2, 376.3, 550.5)
    result = predict(profiles.model("gpt-oss-120b"), profiles.accelerator("h200"), profiles.link("rdma-400"),
                     PredictSettings(lengths=lengths))
    for n, r, p in zip(lengths, recompute, pull):
        assert result.recompute_ms_at[str(n)] == pytest.approx(r, rel=0.05)
        assert result.pull_ms_at[str(n)] == pytest.approx(p, rel=0.10)
        assert result.pull_ms_at[str(n)] < result.recompute_ms_at[str(n)]  # "the pull wins at every length"
    assert result.break_even_tokens is None or result.break_even_tokens < 2048


def test_tcp_fallback_moves_the_crossover_near_the_published_29k(profiles):
    result = predict(profiles.model("gpt-oss-120b"), profiles.accelerator("h200"), profiles.link("tcp-100g"))
    assert result.status == "crossover"
    assert result.break_even_tokens == pytest.approx(29_000, rel=0.15)


def test_tiny_cpu_model_lands_near_the_measured_cpu_timings(profiles):
    # cpu-vllm.md, one core per engine: recompute 129-160 ms at 2000, 353-404 at 4000, 1024-1068 at 8000;
    # pulled over NIXL: 27-38 ms at 2000, 40-50 at 8000
    result = predict(profiles.model("tiny-llama-cpu"), profiles.accelerator("cpu-amx"), profiles.link("cpu-ucx-cma"),
                     PredictSettings(lengths=(2000, 4000, 8000)))
    for n, lo, hi in ((2000, 129, 160), (4000, 353, 404), (8000, 1024, 1068)):
        assert 0.8 * lo <= result.recompute_ms_at[str(n)] <= 1.2 * hi
    assert 27 <= result.pull_ms_at["2000"] <= 38 and 40 <= result.pull_ms_at["8000"] <= 50
    assert result.status == "crossover" and 256 < result.break_even_tokens < 2000


def test_overrides_move_the_curves_the_right_way(profiles):
    model, hw, link = profiles.model("llama-3.1-8b"), profiles.accelerator("h100"), profiles.link("rdma-400")
    base = predict(model, hw, link, PredictSettings(lengths=(8192,)))
    fp8 = predict(model, hw, link, PredictSettings(kv_dtype="fp8", lengths=(8192,)))
    assert fp8.kv_bytes_per_token == base.kv_bytes_per_token // 2
    assert fp8.pull_us_per_token == pytest.approx(base.pull_us_per_token / 2)
    two = predict(model, hw, link, PredictSettings(devices=2, lengths=(8192,)))
    compute = base.recompute_ms_at["8192"] - base.assumptions["overhead_ms"]
    assert two.recompute_ms_at["8192"] - two.assumptions["overhead_ms"] == pytest.approx(compute / 2)
    # half the bytes per token: the pull now beats the 28 us/token dense prefill from the first token
    assert base.status == "crossover" and fp8.status == "pull-always-wins"
    for n in base.lengths:
        assert base.min_transfer_ms_at[str(n)] < base.pull_ms_at[str(n)]


def test_all_three_statuses(profiles):
    model, hw = profiles.model("llama-3.1-8b"), profiles.accelerator("h100")
    slow = predict(model, hw, profiles.link("rdma-400"), PredictSettings(link_efficiency=1e-4))
    assert slow.status == "recompute-always-wins" and slow.break_even_tokens is None
    free = predict(model, hw, profiles.link("pcie5-h2d"), PredictSettings(pull_floor_ms=0))
    assert free.status == "pull-always-wins" and free.break_even_tokens is None


@pytest.mark.parametrize("kwargs,flag", [({"mfu": 0}, "--mfu"), ({"mfu": 1.5}, "--mfu"), ({"devices": 0}, "--devices"),
                                         ({"link_efficiency": 2}, "--link-efficiency"), ({"pull_floor_ms": -1}, "--pull-floor-ms"),
                                         ({"lengths": (0, 5)}, "--lengths")])
def test_bad_settings_are_input_errors(kwargs, flag):
    with pytest.raises(InputError, match=flag):
        PredictSettings(**kwargs)


def test_the_check_accepts_what_the_help_says():
    """--mfu and --link-efficiency: above 0, at most 1 (the help's words, from the same declaration)."""
    assert PredictSettings(mfu=1, link_efficiency=1).mfu == 1
    for kwargs, flag in (({"mfu": 0}, "--mfu"), ({"link_efficiency": 0.0}, "--link-efficiency")):
        with pytest.raises(InputError) as err:
            PredictSettings(**kwargs)
        assert str(err.value) == f"{flag} must be above 0 and at most 1, got {next(iter(kwargs.values()))}"


def test_cli_json_contract(capsys):
    code = main(["predict", "--model", "llama-3.1-8b", "--hardware", "h100", "--link", "rdma-400", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert out["kv_bytes_per_token"] == 131_072 and isinstance(out["kv_bytes_per_token"], int)
    assert out["break_even_tokens"] is None or isinstance(out["break_even_tokens"], (int, float))
    assert out["estimate"] is True and out["schema"] == "kvcal.estimate.predict/1"
    for key in ("recompute_ms_at", "pull_ms_at", "min_transfer_ms_at"):
        assert set(out[key]) == {str(n) for n in out["lengths"]}
        assert all(isinstance(v, float) for v in out[key].values())
    assert max(out["lengths"]) <= 131_072


def test_cli_text_default_link_config_path_and_errors(capsys):
    assert main(["predict", "-m", "tiny-llama", "--hardware", "cpu-amx", "--lengths", "1024,4096"]) == 0
    text = capsys.readouterr().out
    assert "cpu-ucx-cma" in text and "break-even" in text and "estimate" in text
    config = str(REPO / "tests" / "fixtures" / "hf_configs" / "deepseek-v3.json")
    assert main(["predict", "-m", config, "--hardware", "h200", "--kv-dtype", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_bytes_per_token"] == 61 * 576
    assert main(["predict", "-m", "llama-3.1-8b", "--hardware", "tpu-v9"]) == 2
    assert "unknown hardware profile 'tpu-v9'" in capsys.readouterr().err
    assert main(["predict", "-m", "llama-3.1-8b", "--hardware", "h100", "--link", "smoke-signals"]) == 2
    assert "unknown link profile" in capsys.readouterr().err
