"""Threshold rule and the non-Helm formats of `kvcal emit-config`."""

from __future__ import annotations

import json
import math
import re

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcal.emit import formats as em
from kvcal.emit.renderers import format_names
from kvcal.errors import InputError, NotRecommended
from kvcal.records.fit import CurveFit, FitResult

import factories

from factories import make_curve, PULL, RECOMPUTE


def true_break_even() -> float:
    a, b, c = 0.012 / 1e6, (25.0 - 3.0) / 1e3, 5.0 - 20.0
    return (-b + math.sqrt(b * b - 4 * a * c)) / (2 * a)


def make_fit(status: str = "crossover", be: float | None = 1500.0, ci: list[float] | None = (1300.0, 1800.0),
             block_size: int | None = 64, smallest_win: int | None = None, measured: list[int] = (256, 16384),
             setup: dict | None = None, recompute: CurveFit = RECOMPUTE, pull: CurveFit = PULL) -> FitResult:
    return factories.make_fit(
        status=status, break_even_tokens=be, break_even_ci=list(ci) if ci else None,
        measured_range=list(measured), recompute=recompute, pull=pull, block_size=block_size,
        smallest_pull_win_tokens=smallest_win, setup=setup or {},
    )


# ------------------------------------------------------------------ threshold rule

def test_crossover_uses_upper_bound_margin_and_rounds_up() -> None:
    t = em.compute_threshold(make_fit(), rule="upper", margin=0.25)
    assert t.min_cached_token_delta == 2304  # 1800 x 1.25 = 2250 -> next multiple of 64
    assert t.block_size == 64 and t.status == "crossover"
    text = "\n".join(t.steps)
    assert "1,800" in text and "0.25" in text and "2304" in text


def test_margin_zero_on_a_block_multiple_is_exact() -> None:
    assert em.compute_threshold(make_fit(ci=[1000.0, 2048.0]), rule="upper", margin=0).min_cached_token_delta == 2048


def test_default_margin_is_documented_value() -> None:
    assert em.DEFAULT_MARGIN == 0.25
    assert em.compute_threshold(make_fit(), rule="upper").margin == 0.25
    assert em.compute_threshold(make_fit()).margin is None  # the default rule has none


def test_block_size_override_and_default() -> None:
    assert em.compute_threshold(make_fit(), rule="upper", margin=0, block_size=256).min_cached_token_delta == 2048
    t = em.compute_threshold(make_fit(block_size=None, ci=[100.0, 130.0]), rule="upper", margin=0)
    assert t.block_size == 64 and t.min_cached_token_delta == 192
    assert any("default" in s for s in t.steps)


def test_tiny_break_even_still_gives_one_block() -> None:
    assert em.compute_threshold(make_fit(be=3.0, ci=[1.0, 5.0]), rule="upper", margin=0.1).min_cached_token_delta == 64


def test_no_interval_falls_back_to_point_estimate_with_warning() -> None:
    t = em.compute_threshold(make_fit(be=1000.0, ci=None), rule="upper", margin=0)
    assert t.min_cached_token_delta == 1024
    assert any("no break-even interval" in w for w in t.warnings)


def test_upper_bound_beyond_range_warns() -> None:
    t = em.compute_threshold(make_fit(be=15000.0, ci=[12000.0, 30000.0], measured=[256, 16384]), rule="upper")
    assert any("beyond the longest measured prefix" in w and "kvcal sweep --prefix-lengths" in w for w in t.warnings)


def test_pull_always_wins_is_never_capped_below_the_raised_bound() -> None:
    fit = make_fit(status="pull-always-wins", be=900.0, ci=[400.0, 3000.0], smallest_win=2048, measured=[2048, 49152])
    t = em.compute_threshold(fit, rule="upper", margin=0.25)
    assert t.min_cached_token_delta == 3776  # 3000 x 1.25 = 3750 -> 3776: a cap at 2048 would undercut the bound
    assert any("kvcal sweep --prefix-lengths" in w for w in t.warnings)


def test_pull_always_wins_below_the_data_is_raised_to_the_shortest_win() -> None:
    fit = make_fit(status="pull-always-wins", be=300.0, ci=[200.0, 500.0], smallest_win=2048, measured=[2048, 49152])
    t = em.compute_threshold(fit, rule="upper", margin=0.25)
    assert t.min_cached_token_delta == 2048
    assert em.compute_threshold(fit, rule="upper", margin=0.25, allow_extrapolation=True).min_cached_token_delta == 640


def test_pull_always_wins_without_estimate_uses_smallest_win_rounded_up() -> None:
    fit = make_fit(status="pull-always-wins", be=None, ci=None, smallest_win=2100, measured=[2100, 8000])
    assert em.compute_threshold(fit).min_cached_token_delta == 2112


def test_published_ladder_gives_the_guides_2048() -> None:
    """The llm-d ladder (pull wins from 2048 up) gives 2048, what the guide deployed."""
    fit = make_fit(status="pull-always-wins", be=None, ci=None, smallest_win=2048, measured=[2048, 49152])
    assert em.compute_threshold(fit).min_cached_token_delta == 2048


@pytest.mark.parametrize("fmt", [f for f in format_names() if f != "affinity"])
def test_recompute_always_wins_raises_not_recommended(fmt: str, tmp_path) -> None:
    fit = make_fit(status="recompute-always-wins", be=None, ci=None, pull=make_curve(500.0, 50.0))
    values = tmp_path / "v.yaml"
    values.write_text("a: 1\n")
    opts = em.EmitOptions(format=fmt, values=values if fmt == "helm" else None,
                          ttft_penalty_ms=3500.0 if fmt == "work-range" else None)
    with pytest.raises(NotRecommended) as err:
        em.emit(fit, opts)
    assert err.value.exit_code == 3
    assert "not recommended" in str(err.value)
    assert values.read_text() == "a: 1\n"


@pytest.mark.parametrize("kwargs, match", [
    ({"rule": "upper", "margin": -0.1}, "--margin"),
    ({"rule": "upper", "margin": float("nan")}, "--margin"),
    ({"margin": 0.25}, "--margin applies only to --rule upper"),
    ({"rule": "cheapest"}, "--rule"),
    ({"block_size": 0}, "--block-size"),
    ({"block_size": -64}, "--block-size"),
    ({"format": "toml"}, "--format"),
    ({"format": "helm"}, "--values"),
    ({"format": "env", "in_place": True}, "--in-place"),
    ({"prefill_profile": "two words"}, "--prefill-profile"),
    ({"format": "vllm", "transport": "carrier-pigeon"}, "transport"),
])
def test_bad_options_are_one_line_input_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(InputError, match=re.escape(match)) as err:
        em.EmitOptions(**kwargs)
    assert "\n" not in str(err.value)


def test_crossover_without_any_estimate_is_not_a_fit() -> None:
    with pytest.raises(ValueError, match="a crossover needs a break-even"):
        make_fit(be=None, ci=None)


GOOD_FIT = factories.make_fit().model_dump(mode="json", by_alias=True)


@pytest.mark.parametrize("edit", [
    {"break_even_tokens": float("nan")},
    {"break_even_tokens": None},
    {"break_even_tokens": -5.0, "break_even_ci": [-10.0, -1.0]},
    {"break_even_tokens": 1e300},
    {"break_even_ci": [1800.0, 1300.0]},
    {"break_even_ci": [1300.0, float("inf")]},
    {"break_even_ci": [float("nan"), float("nan")]},
    {"break_even_ci": [1300.0]},
    {"confidence": 5},
    {"confidence": 0},
    {"pull_won_from_tokens": 10**30},
    {"smallest_pull_win_tokens": -1},
    {"measured_range": [4096, 256]},
    {"block_size": 0},
    {"recompute": {**GOOD_FIT["recompute"], "per_token_us": float("nan")}},
    {"pull": {**GOOD_FIT["pull"], "intercept_ms": float("inf")}},
], ids=lambda edit: ",".join(f"{k}={v}"[:40] for k, v in edit.items()))
def test_a_hand_edited_implausible_fit_is_refused_by_every_reader(tmp_path, kvcal, edit) -> None:
    bad = tmp_path / "fit.json"
    bad.write_text(json.dumps({**GOOD_FIT, **edit}))  # NaN and Infinity as Python's json writes them
    good = tmp_path / "good.json"
    good.write_text(json.dumps(GOOD_FIT))
    for args in (["emit-config", bad, "--format", "env"], ["emit-config", bad, "--format", "json"],
                 ["compare", good, bad], ["plan", "--from", bad, "--campaigns", "1"]):
        result = kvcal(*args)
        assert result.code == 2 and result.out == "" and "corrupt fit" in result.err, (args, result.err)
        assert result.err.count("\n") == 1


@settings(max_examples=300, deadline=None)
@given(
    lo=st.floats(0, 1e6, allow_nan=False), width=st.floats(0, 1e6, allow_nan=False),
    margin=st.floats(0, 3, allow_nan=False), block=st.sampled_from([1, 16, 32, 64, 128, 256]) | st.integers(1, 1024),
)
def test_threshold_is_a_block_multiple_at_or_above_the_raised_upper_bound(lo, width, margin, block) -> None:
    hi = lo + width
    t = em.compute_threshold(make_fit(be=lo + width / 2, ci=[lo, hi], block_size=block), rule="upper", margin=margin)
    n = t.min_cached_token_delta
    assert isinstance(n, int) and n >= 1 and n % block == 0
    assert n >= hi and n >= hi * (1 + margin)
    assert n - block < max(hi * (1 + margin), block)  # the smallest such multiple


@settings(max_examples=200, deadline=None)
@given(
    hi=st.floats(0, 1e5, allow_nan=False), win=st.integers(1, 100_000),
    margin=st.floats(0, 3, allow_nan=False), block=st.integers(1, 512),
)
def test_pull_always_wins_is_at_or_above_the_shortest_win_and_the_raised_bound(hi, win, margin, block) -> None:
    fit = make_fit(status="pull-always-wins", be=hi / 2, ci=[0.0, hi], block_size=block, smallest_win=win, measured=[win, win * 8])
    n = em.compute_threshold(fit, rule="upper", margin=margin).min_cached_token_delta
    assert n % block == 0 and n >= block
    assert n >= win and n >= hi * (1 + margin)
    assert n - block < max(win, hi * (1 + margin), block)  # and the smallest such multiple


# ------------------------------------------------------------------ formats

def test_env_is_exactly_one_line() -> None:
    out = em.emit(make_fit(), em.EmitOptions(format="env")).stdout
    assert re.fullmatch(r"MIN_CACHED_TOKEN_DELTA=\d+\n", out)
    # the default rule decides on the curves: make_fit's legs cross at 682 tokens, between 640 and 704 (the nearer,
    # and the cheaper over log-uniform deltas); the upper rule reads the recorded interval: 1800 x 1.25 -> 2304
    assert out == "MIN_CACHED_TOKEN_DELTA=704\n"
    assert em.emit(make_fit(), em.EmitOptions(format="env", rule="upper")).stdout == "MIN_CACHED_TOKEN_DELTA=2304\n"


def test_json_has_the_contract_keys() -> None:
    data = json.loads(em.emit(make_fit(), em.EmitOptions(format="json")).stdout)
    assert set(data) == {"minCachedTokenDelta", "break_even_tokens", "break_even_ci", "margin", "block_size", "status",
                         "peakPrefillThroughput", "peak_prefill_chunk_size", "peak_prefill_ci", "peak_prefill_extrapolated",
                         "rule", "expected_regret_ms", "expected_regret_pct", "p_break_even_above", "alternatives",
                         "decision"}
    assert data["minCachedTokenDelta"] == 704 and isinstance(data["minCachedTokenDelta"], int)
    assert set(data["decision"]) == {"candidates", "chosen_cost_ms", "no_p2p_cost_ms"}
    assert data["decision"]["candidates"] == (16384 - 256) // 64 + 2  # block multiples over the range, and no P2P
    assert data["decision"]["chosen_cost_ms"] < data["decision"]["no_p2p_cost_ms"]
    assert data["rule"] == "expected-cost" and data["margin"] is None
    assert data["expected_regret_ms"] is None and data["p_break_even_above"] is None  # no bootstrap draws recorded
    assert set(data["alternatives"]) == {"upper", "recipe"}
    assert data["alternatives"]["upper"] == {"threshold": 2304, "expected_regret_ms": None, "expected_regret_pct": None,
                                             "p_break_even_above": None}
    assert data["alternatives"]["recipe"]["threshold"] is None  # the fit records no length where the pull won
    assert data["break_even_ci"] == [1300.0, 1800.0] and data["status"] == "crossover" and data["block_size"] == 64


def test_plugin_is_a_yaml_list_with_the_entry() -> None:
    out = em.emit(make_fit(), em.EmitOptions(format="plugin", prefill_profile="prefill")).stdout
    data = yaml.safe_load(out)
    assert data == [{"type": "p2p-source-producer", "parameters": {
        "prefixMatchInfoProducerName": "precise-prefix-cache-producer", "prefillProfileName": "prefill",
        "minCachedTokenDelta": 704}}]
    assert out.startswith("# kvcal: ") and "rule expected-cost" in out.splitlines()[0]


def test_costmodel_reproduces_the_break_even_in_the_router_comparison() -> None:
    be = true_break_even()
    fit = make_fit(be=be, ci=[be * 0.9, be * 1.1])
    res = em.emit(fit, em.EmitOptions(format="costmodel"))
    block = yaml.safe_load(res.stdout)["costModel"]
    p, tr, f = block["prefillMicrosecondsPerToken"], block["transferMicrosecondsPerToken"], block["transferFixedMs"]
    assert tr == pytest.approx(3.0) and f == pytest.approx(20.0)
    # the router pulls when P*n > F*1e3 + T*n: its idle crossover is F*1e3 / (P - T)
    assert f * 1e3 / (p - tr) == pytest.approx(be, rel=1e-3)
    for key in em.LOAD_DEPENDENT_COST_KEYS:
        assert key not in block and f"# {key}:" in res.stdout
    assert "Not calibrated" in res.stdout
    assert any("secant" in n for n in res.notes)


def test_costmodel_clamps_negative_floor() -> None:
    fit = make_fit(pull=CurveFit(model="affine", intercept_ms=-2.0, per_token_us=3.0, per_token2_ns=0.0))
    res = em.emit(fit, em.EmitOptions(format="costmodel"))
    assert yaml.safe_load(res.stdout)["costModel"]["transferFixedMs"] == 0
    assert any("negative" in w for w in res.warnings)


def test_vllm_p2p_tier_renders_the_guides_engine_settings() -> None:
    res = em.emit(make_fit(setup={"transport": "p2p-tier", "model": "openai/gpt-oss-120b", "python_hash_seed": 42}),
                  em.EmitOptions(format="vllm"))
    data = yaml.safe_load(res.stdout)
    args = data["args"]
    assert args[args.index("--block-size") + 1] == "64"
    cfg = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector"] == "OffloadingConnector" and cfg["kv_role"] == "kv_both"
    extra = cfg["kv_connector_extra_config"]
    assert extra["spec_name"] == "TieringOffloadingSpec"
    assert extra["offload_prompt_only"] is False and extra["self_describing_kv_events"] is True
    assert extra["secondary_tiers"] == [{"type": "p2p", "host": "$(POD_IP)", "port": 7777}]
    events = json.loads(args[args.index("--kv-events-config") + 1])
    assert events["enable_kv_cache_events"] is True and events["publisher"] == "zmq"
    assert events["topic"] == "kv@$(POD_IP):$(POD_PORT)@openai/gpt-oss-120b" and events["endpoint"] == "$(KV_EVENTS_ENDPOINT)"
    env = {e["name"]: e for e in data["env"]}
    assert [e["name"] for e in data["env"]][0] == "POD_IP"  # must precede the $(POD_IP) references
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["VLLM_P2P_SIDE_CHANNEL_HOST"]["value"] == env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["value"] == "$(POD_IP)"
    assert "VLLM_P2P_SIDE_CHANNEL_PORT" not in env and env["PYTHONHASHSEED"]["value"] == "42"
    assert env["KV_EVENTS_ENDPOINT"]["value"] == "tcp://*:5556"
    assert extra["cpu_bytes_to_use"] == 8 * 2**30 and any("cpu_bytes_to_use" in w for w in res.warnings)
    assert data["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    assert data["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "9Gi"}}]


@pytest.mark.parametrize("seed", [0, 7, 4294967295])
def test_vllm_emits_the_runs_hash_seed(seed) -> None:
    res = em.emit(make_fit(setup={"transport": "p2p-tier", "python_hash_seed": seed}), em.EmitOptions(format="vllm"))
    env = {e["name"]: e for e in yaml.safe_load(res.stdout)["env"]}
    assert env["PYTHONHASHSEED"]["value"] == str(seed)
    assert not any("PYTHONHASHSEED 0: the run records none" in n for n in res.notes)


def test_vllm_without_a_recorded_seed_says_it_used_the_guides() -> None:
    res = em.emit(make_fit(setup={"transport": "p2p-tier"}), em.EmitOptions(format="vllm"))
    env = {e["name"]: e for e in yaml.safe_load(res.stdout)["env"]}
    assert env["PYTHONHASHSEED"]["value"] == "0" and any("PYTHONHASHSEED 0: the run records none" in n for n in res.notes)


def test_vllm_never_carries_run_local_ports_or_tier_sizes() -> None:
    """A launch-mode run recorded port 50107 and 8 GiB with offload_prompt_only: none of it reaches the deployment."""
    recorded = {"kv_connector": "OffloadingConnector", "kv_connector_extra_config": {
        "cpu_bytes_to_use": 1000, "offload_prompt_only": True,
        "secondary_tiers": [{"type": "p2p", "host": "127.0.0.1", "port": 50107}]}}
    res = em.emit(make_fit(setup={"kv_transfer_config": {"producer": {}, "consumer": recorded}}),
                  em.EmitOptions(format="vllm", transport="p2p_tier", block_size=128, cpu_bytes_to_use=88 * 2**30))
    assert "50107" not in res.stdout and "127.0.0.1" not in res.stdout
    data = yaml.safe_load(res.stdout)
    args = data["args"]
    extra = json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]
    assert extra["cpu_bytes_to_use"] == 88 * 2**30 and extra["offload_prompt_only"] is False
    assert extra["secondary_tiers"][0]["port"] == 7777
    assert args[args.index("--block-size") + 1] == "128"
    assert data["volumes"][0]["emptyDir"]["sizeLimit"] == "97Gi"  # >= the 88 GiB tier
    assert not any("cpu_bytes_to_use" in w for w in res.warnings)


def test_vllm_p2p_port_flag_moves_the_listener_and_warns() -> None:
    res = em.emit(make_fit(), em.EmitOptions(format="vllm", transport="p2p-tier", p2p_port=7800))
    args = yaml.safe_load(res.stdout)["args"]
    assert json.loads(args[args.index("--kv-transfer-config") + 1])["kv_connector_extra_config"]["secondary_tiers"][0]["port"] == 7800
    assert any("7777" in w for w in res.warnings)


def _kv_transfer_config(stdout: str) -> dict:
    args = yaml.safe_load(stdout)["args"]
    return json.loads(args[args.index("--kv-transfer-config") + 1])


def test_vllm_nixl_pd_sets_vllms_own_threshold_to_the_fitted_one() -> None:
    """A nixl-pd run measured the path vLLM's kv_recompute_threshold decides: the knob gets the threshold, a note
    says it is the thing itself (the router's minCachedTokenDelta stays a proxy), the output says where vLLM applies it."""
    res = em.emit(make_fit(setup={"transport": "nixl-pd", "kv_transfer_config": {"consumer": {"kv_buffer_device": "cpu"}}}),
                  em.EmitOptions(format="vllm"))
    data = yaml.safe_load(res.stdout)
    cfg = _kv_transfer_config(res.stdout)
    assert cfg == {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cuda",
                   "kv_connector_extra_config": {"kv_recompute_threshold": res.threshold.min_cached_token_delta}}
    assert res.threshold.min_cached_token_delta % 64 == 0 and res.threshold.min_cached_token_delta != 64  # not vLLM's default
    env = {e["name"]: e.get("value") for e in data["env"]}
    assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$(POD_IP)" and env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert "--kv-events-config" not in data["args"] and "volumes" not in data
    assert any("'cpu'" in n for n in res.notes)
    assert any("the thing itself" in n and "minCachedTokenDelta" in n and "proxy" in n for n in res.notes)
    assert not any("proxy" in w for w in res.warnings)
    comments = "\n".join(line for line in res.stdout.splitlines() if line.startswith("#"))
    assert f"kv_recompute_threshold {res.threshold.min_cached_token_delta} in --kv-transfer-config" in comments
    for word in ("prefill instance", "do_remote_decode", "remote_block_ids", "bidirectional_kv_xfer: true",
                 "decoder_kv_blocks_ttl", "PR 55801"):
        assert word in comments, word


@pytest.mark.parametrize("block_size", [64, 128])
def test_vllm_nixl_pd_threshold_follows_the_block_size_given(block_size) -> None:
    res = em.emit(make_fit(setup={"transport": "nixl-pd"}), em.EmitOptions(format="vllm", block_size=block_size))
    threshold = _kv_transfer_config(res.stdout)["kv_connector_extra_config"]["kv_recompute_threshold"]
    assert threshold == res.threshold.min_cached_token_delta and threshold % block_size == 0


@pytest.mark.parametrize("recorded", [None, "p2p-tier"])
def test_vllm_nixl_pd_from_another_transports_run_warns_the_threshold_is_a_proxy(recorded) -> None:
    res = em.emit(make_fit(setup={"transport": recorded} if recorded else {}),
                  em.EmitOptions(format="vllm", transport="nixl-pd"))
    assert _kv_transfer_config(res.stdout)["kv_connector_extra_config"] == {
        "kv_recompute_threshold": res.threshold.min_cached_token_delta}
    (warning,) = [w for w in res.warnings if "proxy" in w]
    assert (recorded or "a transport it does not record") in warning and "--transport nixl-pd" in warning
    assert not any("the thing itself" in n for n in res.notes)


def test_vllm_p2p_tier_has_no_recompute_threshold() -> None:
    """The OffloadingConnector has no such knob: its fragment carries none and says nothing of it."""
    res = em.emit(make_fit(setup={"transport": "p2p-tier"}), em.EmitOptions(format="vllm"))
    assert "kv_recompute_threshold" not in res.stdout
    assert not any("kv_recompute_threshold" in line for line in res.notes + res.warnings)


def test_vllm_without_transport_is_an_input_error() -> None:
    with pytest.raises(InputError, match="--transport"):
        em.emit(make_fit(), em.EmitOptions(format="vllm"))


# ------------------------------------------------------------------ CLI

def write_fit(tmp_path, fit: FitResult):
    path = tmp_path / "fit.json"
    path.write_text(fit.model_dump_json(by_alias=True))
    return path


def test_cli_env_and_explanation_on_stderr(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    rc = main(["emit-config", str(write_fit(tmp_path, make_fit())), "--format", "env", "--rule", "upper", "--margin", "0.5"])
    out, err = capsys.readouterr()
    assert rc == 0 and out == "MIN_CACHED_TOKEN_DELTA=2752\n"  # 1800 x 1.5 = 2700 -> 2752
    assert "interval" in err and "margin 0.5" in err and "2752" in err


def test_cli_recompute_always_wins_exits_3_with_empty_stdout(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    path = write_fit(tmp_path, make_fit(status="recompute-always-wins", be=None, ci=None, pull=make_curve(500.0, 50.0)))
    rc = main(["emit-config", str(path), "--format", "json"])
    out, err = capsys.readouterr()
    assert rc == 3 and out == ""
    assert "P2P is not recommended" in err and err.count("\n") == 1


@pytest.mark.parametrize("args", [["--rule", "upper", "--margin", "-1"], ["--margin", "0.25"], ["--rule", "x"],
                                  ["--block-size", "0"], ["--format", "helm"]])
def test_cli_bad_flags_one_line(tmp_path, capsys, args) -> None:
    from kvcal.cli.app import main

    rc = main(["emit-config", str(write_fit(tmp_path, make_fit())), *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err


def test_cli_not_a_fit_file(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    bad = tmp_path / "fit.json"
    bad.write_text('{"schema": "something/else", "x": 1}')
    rc = main(["emit-config", str(bad)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and err.startswith("kvcal: error:") and err.count("\n") == 1
    assert bad.read_text() == '{"schema": "something/else", "x": 1}'


def test_cli_fits_a_sim_run_folder_on_the_fly(tmp_path, capsys) -> None:
    """sweep (sim) -> emit-config on the run folder, with no fit.json: fitted on the fly."""
    from kvcal.cli.app import main
    from kvcal.engines.sim import SimCosts

    assert main(["sweep", "--engine", "sim", "--prefix-lengths", "256,512,1024,2048,4096", "--reps", "3",
                 "--output-dir", str(tmp_path), "--name", "r"]) == 0
    capsys.readouterr()
    assert not (tmp_path / "r" / "fit.json").exists()
    assert main(["emit-config", str(tmp_path / "r"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    truth = SimCosts().true_break_even()
    lo, hi = data["break_even_ci"]
    assert data["status"] == "crossover" and data["minCachedTokenDelta"] % 64 == 0
    assert lo * 0.8 <= truth <= hi * 1.2  # the sim's known truth sits at the interval
    assert abs(data["minCachedTokenDelta"] - truth) <= max(0.15 * truth, 64)  # the mean costs' crossing, to a block
    assert data["alternatives"]["upper"]["threshold"] >= hi * 1.25
    assert data["expected_regret_pct"] <= data["alternatives"]["upper"]["expected_regret_pct"]
    assert 0 <= data["p_break_even_above"] <= 1


def test_vllm_format_reads_the_per_role_config_a_sweep_records(tmp_path, kvcal):
    """A sweep records {producer: {...}, consumer: {...}} in its setup; the consumer's settings are the ones reported."""
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text("python_hash_seed: 7\n")
    assert kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "2", "--config", campaign,
                 "--output-dir", tmp_path, "--name", "run").code == 0
    run = tmp_path / "run"
    manifest = json.loads((run / "run.json").read_text())
    assert manifest["setup"]["python_hash_seed"] == 7
    manifest["setup"]["kv_transfer_config"] = {
        "producer": {"kv_connector": "NixlConnector", "kv_role": "kv_producer", "kv_buffer_device": "cpu"},
        "consumer": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer", "kv_buffer_device": "cpu"},
    }
    manifest["setup"]["transport"] = "nixl-pd"
    (run / "run.json").write_text(json.dumps(manifest))
    out = kvcal("emit-config", run, "--format", "vllm")
    assert out.code == 0, out.err
    assert "the run used kv_buffer_device 'cpu'" in out.err


def test_a_sim_sweeps_hash_seed_reaches_the_vllm_fragment(tmp_path, kvcal):
    """sweep -> fit -> emit-config: the PYTHONHASHSEED the sweep set is the one the engines are told to use."""
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text("python_hash_seed: 4242\n")
    assert kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "2", "--config", campaign,
                 "--output-dir", tmp_path, "--name", "run").code == 0
    assert kvcal("fit", tmp_path / "run", "--resamples", "200").code == 0
    fit = json.loads((tmp_path / "run" / "fit.json").read_text())
    assert fit["setup"] == json.loads((tmp_path / "run" / "run.json").read_text())["setup"]
    out = kvcal("emit-config", tmp_path / "run" / "fit.json", "--format", "vllm", "--transport", "p2p-tier")
    assert out.code == 0, out.err
    env = {e["name"]: e.get("value") for e in yaml.safe_load(out.out)["env"]}
    assert env["PYTHONHASHSEED"] == "4242"
