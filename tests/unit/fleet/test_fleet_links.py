"""The fleet model on a fit with link classes: each pull charged its pair's class, each pair's first its session."""

from __future__ import annotations

import pytest

from kvcal.errors import InputError
from kvcal.fit import fit_input
from kvcal.fleet.costs import point_costs
from kvcal.fleet.links import PairLinks
from kvcal.fleet.policies.threshold import ThresholdPolicy
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.workload import Workload
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.runner import run_sweep
from kvcal.records.fit import FitSettings

NEAR = {"pull_intercept_ms": 5.0, "pull_per_token_us": 2.0}
SLOW = {"pull_intercept_ms": 30.0, "pull_per_token_us": 22.0, "session_ms": 500.0}
WORKLOAD = {"duration_s": 120, "warmup_s": 10, "arrival": {"rate": 2.0},
            "sessions": {"system_prompt_tokens": 2048, "turns": 4, "input_tokens": 256, "output_tokens": 32,
                         "think_time_s": 1.0},
            "router": {"pick": "rotate"}}


@pytest.fixture(scope="module")
def two_class_fit(tmp_path_factory):
    pairs = [{"name": "a", "class": "near", "sim": NEAR}, {"name": "b", "class": "slow", "sim": SLOW}]
    config = SweepConfig.model_validate(dict(engine="sim", prefix_lengths=[256, 1024, 4096], reps=3, pairs=pairs,
                                             output_dir=tmp_path_factory.mktemp("fleet"), name="run"))
    return fit_input(run_sweep(config).run_dir, settings=FitSettings(n_resamples=0))


def run(fit, share_slow: float, threshold: int = 512):
    workload = Workload.model_validate({**WORKLOAD, "link_classes": {"near": 1 - share_slow, "slow": share_slow}})
    sim = FleetSim(workload, 4, point_costs(fit), ThresholdPolicy(threshold), 64, seed=1)
    return sim, sim.run()


def test_pulls_over_the_slow_class_cost_more_and_first_pulls_pay_the_session(two_class_fit):
    fast_sim, fast = run(two_class_fit, 0.0)
    slow_sim, slow = run(two_class_fit, 1.0)
    assert fast.pulled > 0 and slow.pulled > 0
    assert slow_sim.links.sessions_opened > 0
    assert slow_sim.links.sessions_opened <= 4 * 3  # once per ordered pair
    assert _mean_ttft(slow) > _mean_ttft(fast)


def test_the_pairs_are_dealt_to_the_classes_in_their_shares(two_class_fit):
    links = PairLinks(point_costs(two_class_fit).links, {"near": 0.75, "slow": 0.25}, 4, seed=0)
    classes = list(links.class_of.values())
    assert len(classes) == 12 and classes.count("slow") == 3
    assert links.session_ms(0, 1) == links.pull(0, 1).session_ms and links.session_ms(0, 1) == 0.0
    with pytest.raises(InputError, match="mars"):
        PairLinks(point_costs(two_class_fit).links, {"mars": 1.0}, 4, seed=0)


def _mean_ttft(stats) -> float:
    values = getattr(stats, "ttft_ms", None)
    assert values is not None and len(values), "the run served requests"
    return float(sum(values) / len(values))


def test_without_the_session_cost_the_same_fleet_is_faster(two_class_fit):
    from dataclasses import replace

    costs = point_costs(two_class_fit)
    free = replace(costs, links={name: replace(link, session_ms=0.0) for name, link in costs.links.items()})
    # warmup_s 0: the pairs' first pulls come early, and must be in the window
    workload = Workload.model_validate({**WORKLOAD, "warmup_s": 0, "link_classes": {"near": 0.0, "slow": 1.0}})
    paid = FleetSim(workload, 4, costs, ThresholdPolicy(512), 64, seed=1).run()
    unpaid = FleetSim(workload, 4, free, ThresholdPolicy(512), 64, seed=1).run()
    assert max(paid.ttft_ms) > max(unpaid.ttft_ms) + 400  # a first pull waited for its 500 ms set-up
