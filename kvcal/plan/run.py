"""``kvcal plan``'s one library call: the prior its settings name, then the simulated campaigns on it."""

from __future__ import annotations

from kvcal.plan.priors import prior_from_fit, prior_from_profiles
from kvcal.plan.settings import PlanConfig
from kvcal.plan.simulate_designs import CampaignPlan, plan_campaigns
from kvcal.sweep.regret_stop import Judge


def plan_from_config(config: PlanConfig, judge: Judge | None = None) -> CampaignPlan:
    """Build the prior and simulate the campaigns (``judge``: emit-config's, for ``target_regret``)."""
    if config.source is not None:
        prior = prior_from_fit(
            str(config.source),
            noise_cv=config.noise_cv,
            block_size=config.block_size,
            max_model_len=config.max_model_len,
        )
    else:
        assert config.model is not None and config.hardware is not None  # the model's validator holds it
        prior = prior_from_profiles(
            config.model,
            config.hardware,
            config.link,
            noise_cv=config.noise_cv,
            block_size=config.block_size,
            max_model_len=config.max_model_len,
        )
    return plan_campaigns(
        prior, config.target_width, config.campaigns, config.seed, target_regret=config.target_regret, judge=judge
    )
