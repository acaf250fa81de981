"""``kvcal plan``'s bounds as plain numbers: :class:`kvcal.plan.settings.PlanConfig` declares its fields with
them and the command's flags show them, so ``kvcal plan --help`` builds no pydantic model."""

from __future__ import annotations

MAX_CAMPAIGNS = 200  # 10 campaigns took 17 s of CPU on the 2-core dev host (2026-12-07): 200 is minutes, 1e5 days
MAX_PLAN_MODEL_LEN = 2**24  # 16.8M tokens, beyond any model's context; 1e8 took 89 s there and 1e9 did not end in 100 s
