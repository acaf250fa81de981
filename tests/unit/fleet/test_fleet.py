"""kvcal fleet: the workload record, the simulator's idle consistency with the calibration, the P2P rule, the thresholds."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import numpy as np
import pytest
import yaml
from pydantic import BaseModel

from factories import make_curve, make_fit
from kvcal.costs.cost_curve import cost_ms
from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from factories import sim_table
from kvcal.threshold.choose import compute_threshold
from kvcal.errors import InputError
from kvcal.fleet.costs import cost_rule, point_costs
from kvcal.fleet.study import policies
from kvcal.records.fit_costmodel import CostModelFit, Estimate
from kvcal.records.fit import FitSettings
from kvcal.fleet.policies.always_pull import AlwaysPull
from kvcal.fleet.policies.no_p2p import NoP2P
from kvcal.fleet.policies.threshold import ThresholdPolicy
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.fleet.sim import READY, FleetSim
from kvcal.fleet.traffic import Session, TurnRequest
from kvcal.fleet.workload import Arrival, Dist, Workload, load_workload

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet-workload.yaml"


def _config(workload: Path = EXAMPLE, **settings) -> FleetConfig:
    return FleetConfig(fit_path=Path("fit.json"), workload_path=workload, **settings)


def _workload(**over) -> Workload:
    data = dict(duration_s=400, warmup_s=10, arrival={"rate": 0.2},
                sessions={"system_prompt_tokens": 0, "turns": 1, "input_tokens": 4096, "output_tokens": 1},
                router={"prefix_weight": 3, "queue_weight": 0, "kv_weight": 0})
    data.update(over)
    return Workload.model_validate(data)


def _keys_of(model) -> dict:
    """The workload records' keys as nested dicts; a distribution (or any plain value) is a leaf."""
    out = {}
    for name, field in model.model_fields.items():
        sub = next((a for a in (field.annotation, *typing.get_args(field.annotation))
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        out[name] = _keys_of(sub) if sub is not None and sub is not Dist else None
    return out


def _shape(data) -> dict | None:
    return {k: _shape(v) for k, v in data.items()} if isinstance(data, dict) and "dist" not in data else None


def test_the_shipped_example_documents_every_key_of_the_workload_records():
    w = load_workload(EXAMPLE)
    assert w.arrival.rate and w.sessions.system_prompt_tokens > 0 and w.slo.ttft_ms
    assert w.with_overrides(rate=7.5).arrival.rate == 7.5
    # The alternatives the example shows commented out (concurrency, trace) count as documented.
    shown = re.sub(r"^(\s*)# ( *[a-z_]+:(?:\s|$))", r"\1\2", EXAMPLE.read_text(), flags=re.M)
    assert _shape(yaml.safe_load(shown)) == _keys_of(Workload)


@pytest.mark.parametrize("text, where", [
    ("duration_s: 10\nwarmup_s: 1\narrival: {rate: 1}\nsessions: {system_prompt_tokens: 1, turns: 1, input_tokens: 1, "
     "output_tokens: 1, colour: red}\n", "sessions.colour"),
    ("nope: 1\n", "nope"),
    ("duration_s: 10\nwarmup_s: 20\ntrace: {per_request: x.json}\n", "warmup_s"),
    ("arrival: {rate: 1, concurrency: 2}\n", "arrival"),
    ("duration_s: 10\nwarmup_s: 1\narrival: {rate: 1}\nsessions: {system_prompt_tokens: 1, turns: {dist: uniform, "
     "min: 3}, input_tokens: 1, output_tokens: 1}\n", "turns"),
])
def test_a_bad_workload_is_one_input_error_naming_the_key(tmp_path, text, where):
    path = tmp_path / "w.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=where):
        load_workload(path)


def test_an_idle_engine_costs_what_the_calibration_measured():
    fit = make_fit()
    stats = FleetSim(_workload(), 1, point_costs(fit), NoP2P(), 64, seed=0).run()
    assert np.median(stats.ttft_ms) == pytest.approx(float(cost_ms(fit.recompute.coefficients, 4096)), rel=1e-6)


def _two_turns(think: float = 1.0) -> Workload:
    # The pod is chosen at random (no scorer weights), so half the second turns land away from their history.
    return _workload(sessions={"system_prompt_tokens": 0, "turns": 2, "input_tokens": 8192, "output_tokens": 1,
                               "think_time_s": think},
                     router={"prefix_weight": 0, "queue_weight": 0, "kv_weight": 0},
                     engine={"max_num_batched_tokens": 65536})


def test_a_pull_below_the_threshold_is_not_taken_and_one_above_is():
    fit = make_fit()  # break-even 1,500 tokens: a pull of 8K wins
    costs = point_costs(fit)
    never = FleetSim(_two_turns(), 2, costs, NoP2P(), 64, seed=1).run()
    high = FleetSim(_two_turns(), 2, costs, ThresholdPolicy(65536), 64, seed=1).run()
    low = FleetSim(_two_turns(), 2, costs, ThresholdPolicy(1024), 64, seed=1).run()
    assert never.pulled == high.pulled == 0
    assert 0.15 < low.pulled / low.routed < 0.35  # half of the second turns (half of all turns) move
    assert np.mean(low.ttft_ms) < np.mean(never.ttft_ms)
    assert never.ttft_ms == high.ttft_ms  # the same sessions (common random numbers)


def test_an_idle_pull_costs_the_pull_curve():
    fit = make_fit()
    stats = FleetSim(_two_turns(), 2, point_costs(fit), AlwaysPull(), 64, seed=1).run()
    # The second turn pulls the first's 8,192 whole-block tokens, then computes the other 8,193 in one step.
    rest = point_costs(fit).prefill_ms(8192, 8193)
    expected = float(cost_ms(fit.pull.coefficients, 8192)) + rest
    assert stats.pulled and min(abs(t - expected) for t in stats.ttft_ms) < 1e-6


def test_near_idle_the_recommended_threshold_is_emit_configs(tmp_path):
    fit = make_fit(break_even_tokens=682.0, break_even_ci=[600.0, 780.0])  # the default curves cross at 682
    w = tmp_path / "w.yaml"
    w.write_text(EXAMPLE.read_text())
    result = run_fleet(_config(w, pods=2, thresholds=[256, 1024, 2048], rate=0.05, duration_s=120,
                                   seeds=1), fit, lambda *a: None)
    assert result.idle_threshold == compute_threshold(fit).min_cached_token_delta
    assert abs(result.recommended_threshold - result.idle_threshold) <= result.block_size
    assert {r.policy for r in result.rows} == {"no-p2p", "always-pull", "threshold"}


def test_thresholds_off_the_block_are_refused(tmp_path):
    with pytest.raises(InputError, match="multiples of the block size 64, or 1"):
        run_fleet(_config(thresholds=[100]), make_fit(), lambda *a: None)


def test_the_plugins_default_threshold_of_1_is_simulated_and_pulls_like_always_pull(tmp_path):
    """kvcal observe names `--thresholds 1` for a fleet deployed with the plugin's default (issue 55)."""
    w = tmp_path / "w.yaml"
    w.write_text(EXAMPLE.read_text())
    result = run_fleet(_config(w, pods=2, thresholds=[1, 1024], rate=0.05, duration_s=120, seeds=1), make_fit(),
                       lambda *a: None)
    rows = {(r.policy, r.threshold): r for r in result.rows}
    assert rows[("threshold", 1)].pull_share == rows[("always-pull", None)].pull_share


def test_rate_replaces_a_closed_loop():
    w = _workload(arrival={"concurrency": 4}).with_overrides(rate=2.0)
    assert w.arrival.rate == 2.0 and w.arrival.concurrency is None


def test_a_nixl_pd_hand_off_costs_a_hold_on_the_source_then_the_whole_prompts_pull():
    fit = make_fit()
    costs = point_costs(fit)
    w = _workload(sessions={"system_prompt_tokens": 0, "turns": 2, "input_tokens": 4096, "output_tokens": 1},
                  router={"pick": "rotate"}, engine={"max_num_batched_tokens": 65536, "pull_computes_on_source": True})
    stats = FleetSim(w, 2, costs, AlwaysPull(), 64, seed=3).run()
    a = fit.recompute.intercept_ms
    history, prompt = 4096 // 64 * 64, 4097 + 4096  # turn 1's 4,097 tokens cached in whole blocks; turn 2's prompt
    hold = a + costs.prefill_ms(history, prompt - history)
    expected = hold + costs.transfer_ms(prompt) + a + costs.prefill_ms(prompt - 1, 1)
    assert stats.pulled and min(abs(t - expected) for t in stats.ttft_ms) < 1e-6


def test_near_idle_with_simulated_resamples_the_recommendation_is_still_emit_configs(tmp_path):
    fit = fit_table(sim_table(SimCosts(), [256, 512, 1024, 2048, 4096], 3), settings=FitSettings(n_resamples=200))
    result = run_fleet(_config(pods=2, thresholds=[256, 1024, 2048], rate=0.05,
                                   duration_s=60, seeds=1, resamples=4), fit, lambda *a: None)
    assert result.resamples == 4
    assert abs(result.recommended_threshold - result.idle_threshold) <= result.block_size


def test_a_fit_with_a_cost_model_gets_a_costmodel_row_that_applies_its_rule():
    e = lambda v: Estimate(value=v)  # noqa: E731
    cm = CostModelFit(transferFixedMs=e(20.0), sourceWaitMs=e(30.0), requeueMs=e(50.0),
                      prefillMicrosecondsPerToken=e(25.0), transferMicrosecondsPerToken=e(3.0), busyQueueThreshold=2,
                      base_ms=e(5.0), busy_computing_ms=e(80.0), design="designed", confidence=0.9, n_requests=72,
                      n_resamples=100)
    fit = make_fit(cost_model=cm)
    assert [p.name for p in policies(fit, [256])][-1] == "costmodel"
    rule = cost_rule(fit)
    # 1,000 tokens save 22 ms against F = 20 ms: pulled when both queues are short, not when the source is busy (+30 ms).
    assert rule.pulls(1000, running=0, source_waiting=0, computing_waiting=0)
    assert not rule.pulls(1000, running=0, source_waiting=2, computing_waiting=0)
    assert cost_rule(make_fit()) is None


def test_when_emit_config_refuses_the_idle_threshold_is_null_with_its_reason():
    fit = make_fit(status="recompute-always-wins", break_even_tokens=None, break_even_ci=None, pull=make_curve(500.0, 50.0))
    result = run_fleet(_config(pods=2, thresholds=[256, 1024], rate=0.05, duration_s=120,
                                   seeds=1), fit, lambda *a: None)
    assert result.idle_threshold is None and "not recommended" in result.idle_threshold_reason
    assert result.recommended_threshold is None and result.recommended_reason


def test_a_window_without_requests_is_an_input_error_not_nan():
    with pytest.raises(InputError, match="no request arrived in the measured window"):
        run_fleet(_config(pods=2, thresholds=[256], rate=0.001, duration_s=40, seeds=1),
                  make_fit(), lambda *a: None)


def test_an_inference_perf_trace_is_replayed_at_its_recorded_times(tmp_path):
    records = [{"start_time": 1000.0 + 2 * i, "error": None,
                "info": {"input_tokens": 3000, "response_metrics": {"output_token_times": [1.0, 2.0, 3.0]}}}
               for i in range(20)]
    records.append({"start_time": 1001.0, "error": "timeout", "info": {"input_tokens": 10}})
    (tmp_path / "per_request.json").write_text(json.dumps(records))
    w = Workload.model_validate({"duration_s": 60, "warmup_s": 1, "trace": {
        "per_request": str(tmp_path / "per_request.json"), "shared_prefix_tokens": 2048}})
    stats = FleetSim(w, 2, point_costs(make_fit()), NoP2P(), 64, seed=0).run()
    assert stats.routed == 19 and len(stats.ttft_ms) == 19  # the failed record is skipped; the first lies in the warm-up


def test_a_relative_trace_path_is_read_beside_the_workload_file(tmp_path, monkeypatch):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "w.yaml").write_text("duration_s: 30\nwarmup_s: 0\ntrace: {per_request: runs/trace.json}\n")
    monkeypatch.chdir(tmp_path)
    w = load_workload(Path("work/w.yaml"))
    assert Path(w.trace.per_request) == Path("work/runs/trace.json")
    absolute = tmp_path / "t.json"
    (folder / "a.yaml").write_text(f"duration_s: 30\nwarmup_s: 0\ntrace: {{per_request: {absolute}}}\n")
    assert load_workload(folder / "a.yaml").trace.per_request == str(absolute)


def _pd_pair(**sessions) -> Workload:
    spec = {"system_prompts": 1, "system_prompt_tokens": 1024, "turns": 2, "input_tokens": 1024, "output_tokens": 1,
            "think_time_s": 0.1}
    spec.update(sessions)
    return _workload(duration_s=2000, warmup_s=0, arrival={"rate": 0.01}, sessions=spec, router={"pick": "rotate"},
                     engine={"max_num_batched_tokens": 65536, "pull_computes_on_source": True})


def test_a_hand_off_reads_only_the_blocks_the_consumer_lacks():
    # vLLM's NixlConnector pulls prompt - local prefix hit: once the consumer holds the system prompt, only the rest moves.
    stats = FleetSim(_pd_pair(), 2, point_costs(make_fit()), AlwaysPull(), 64, seed=2).run()
    first, later = 1024 + 1024 + 1 + 1024, 1024 + 1 + 1024
    assert stats.pulled > 3 and stats.tokens_moved == first + (stats.pulled - 1) * later


def test_a_hand_off_to_a_busy_consumer_is_read_from_its_next_step_and_scheduled_after_the_read():
    fit = make_fit()
    costs = point_costs(fit)
    sim = FleetSim(_pd_pair(), 2, costs, AlwaysPull(), 64, seed=0)
    session = Session(1, 0, 0, 1, np.random.default_rng(0))
    busy = TurnRequest(1, session, 0.0, 8192, 1)
    busy.pod = 1
    sim._join(sim.pods[1], busy, 0.0)  # the consumer computes 8,192 tokens from t = 0
    handed = TurnRequest(2, Session(2, 0, 0, 1, np.random.default_rng(1)), 0.0, 4096, 1)
    handed.pod, handed.hand_to, handed.admitted = 0, (1, 4096), True
    sim.pods[0].kv_held, sim.pods[1].pending, sim.open[2] = 4097, 1, 0.0
    sim._held(sim.pods[0], handed, 5.0)  # the producer is done at 5 ms, mid-step on the consumer
    stats = sim.run()
    a = fit.recompute.intercept_ms
    step = a + costs.prefill_ms(0, 8192)
    # Posted when the consumer's step ends, read for transfer_ms, then its last token in a step of its own.
    assert stats.ttft_ms[0] == pytest.approx(step + costs.transfer_ms(4096) + a + costs.prefill_ms(4095, 1))


def test_draining_serves_every_turn_of_the_sessions_started_in_the_run():
    w = _pd_pair(think_time_s=5.0).model_copy(update={"duration_s": 400.0, "arrival": Arrival(rate=0.05)})
    cut = FleetSim(w, 2, point_costs(make_fit()), NoP2P(), 64, seed=4).run()
    sim = FleetSim(w, 2, point_costs(make_fit()), NoP2P(), 64, seed=4, drain=True)
    drained = sim.run()
    assert drained.routed == 2 * sim.traffic.next_session == len(drained.ttft_ms) and not sim.open
    assert drained.routed >= cut.routed and sorted(drained.ttft_ms)[:5] == sorted(cut.ttft_ms)[:5]


def _shared_pair(slowdown: float, budget: int = 65536) -> FleetSim:
    """Two engines and no traffic of their own (the first session would start after the run): requests are joined by hand."""
    w = _workload(arrival={"rate": 1e-4}, engine={"max_num_batched_tokens": budget, "shared_host_slowdown": slowdown})
    return FleetSim(w, 2, point_costs(make_fit()), NoP2P(), 64, seed=0)


@pytest.mark.parametrize("slowdown", [1.0, 2.0, 3.0])
def test_engines_on_one_host_stretch_each_others_steps_by_the_measured_slowdown(slowdown):
    fit = make_fit()
    alone = float(cost_ms(fit.recompute.coefficients, 4096))
    sim = _shared_pair(slowdown)
    for pod in (0, 1):
        sim._join(sim.pods[pod], _request(sim, pod, pod + 1, 0.0), 0.0)
    stats = sim.run()
    assert stats.ttft_ms == pytest.approx([alone * slowdown] * 2, rel=1e-9)


def test_a_step_that_overlaps_another_for_part_of_its_time_is_stretched_for_that_part_only():
    # Processor sharing: pod 0 runs alone for W/2, both run at half speed, then pod 1 alone: each ends 1.5 W after it began.
    fit = make_fit()
    alone = float(cost_ms(fit.recompute.coefficients, 4096))
    sim = _shared_pair(2.0)
    sim._join(sim.pods[0], _request(sim, 0, 1, 0.0), 0.0)
    late = _request(sim, 1, 2, alone / 2)
    sim.push(alone / 2, READY, late)  # READY: the request joins pod 1 half-way through pod 0's step
    sim.pods[1].pending = 1
    stats = sim.run()
    assert sorted(stats.ttft_ms) == pytest.approx([1.5 * alone, 1.5 * alone], rel=1e-9)


def test_a_step_rescheduled_back_to_its_first_end_time_ends_once():
    # Pod 0 runs two steps back to back (a budget of one request); pod 1's step is stretched, then not, then again,
    # which schedules its end twice at the same time: it must end once, and every figure follows processor sharing.
    fit = make_fit()
    alone = float(cost_ms(fit.recompute.coefficients, 4096))
    sim = _shared_pair(2.0, budget=4096)
    for rid in (1, 3):
        sim._join(sim.pods[0], _request(sim, 0, rid, 0.0), 0.0)
    sim.push(alone / 2, READY, _request(sim, 1, 2, alone / 2))
    sim.pods[1].pending = 1
    stats = sim.run()
    assert stats.ttft_ms == pytest.approx([1.5 * alone, 2.0 * alone, 3.0 * alone], rel=1e-9)


def test_engines_with_their_own_accelerators_do_not_slow_each_other():
    fit = make_fit()
    alone = float(cost_ms(fit.recompute.coefficients, 4096))
    sim = _shared_pair(1.0)
    assert sim.host is None
    sim._join(sim.pods[0], _request(sim, 0, 1, 0.0), 0.0)
    sim._join(sim.pods[1], _request(sim, 1, 2, 0.0), 0.0)
    assert sim.run().ttft_ms == pytest.approx([alone, alone], rel=1e-12)


def _request(sim: FleetSim, pod: int, rid: int, at_ms: float, tokens: int = 4096) -> TurnRequest:
    session = Session(rid, 0, 0, 0, np.random.default_rng(rid))  # no turn after this one
    req = TurnRequest(rid, session, at_ms, tokens, 1)
    req.pod, sim.open[rid] = pod, at_ms
    return req
