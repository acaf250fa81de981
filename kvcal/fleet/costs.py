"""What the calibration tells the fleet model: the idle curves (or one bootstrap resample of them) and the costModel.

With the recompute curve r(n) = a_r + b_r n + c_r n^2 and the pull curve p(n) (ms, n tokens):

* a step of an engine costs ``decode_step_ms`` (default a_r: a pass over a near-empty
  prompt) plus, for every prefill chunk of tokens [k, k+m) it carries,
  ``b_r m + c_r ((k+m)^2 - k^2)``; so an idle recompute of n <= budget tokens costs r(n);
* a pull of d tokens takes ``max(0, p(d) - a_r)`` before the request joins the computing
  pod's queue (an idle pull leg then costs p(d), as measured), plus the costModel's
  S when the source's waiting queue is at least busyQueueThreshold and Q when the
  computing pod's is; its per-token part ``b_p d`` occupies the source's link, so pulls
  from one source queue behind each other (the source's extra work).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from kvcal.costs.cost_curve import break_even_tokens
from kvcal.emit.costmodel_block import costmodel_values
from kvcal.fit.mean_cost import mean_scales
from kvcal.fleet.links import LinkClass, link_classes
from kvcal.records.fit import FitResult


@dataclass(frozen=True)
class CostRule:
    """The costModel variant's per-request comparison (kvcal.emit.costmodel_block).

    The fixed threshold is its floor.
    """

    prefill_us: float
    transfer_us: float
    fixed_ms: float
    source_wait_ms: float
    requeue_ms: float
    busy_queue: int
    fleet_weight: float

    def pulls(self, delta: int, running: int, source_waiting: int, computing_waiting: int) -> bool:
        gain_ms = (
            delta * (self.prefill_us - self.transfer_us) / 1e3
            + self.fleet_weight * running * delta * self.prefill_us / 1e3
        )
        cost_ms = (
            self.fixed_ms
            + (source_waiting >= self.busy_queue) * self.source_wait_ms
            + (computing_waiting >= self.busy_queue) * self.requeue_ms
        )
        return gain_ms > cost_ms


@dataclass(frozen=True)
class FleetCosts:
    """One set of curve coefficients (the point fit or a resample), in ms, us/token and ns/token^2."""

    recompute: tuple[float, float, float]
    pull: tuple[float, float, float]
    source_wait_ms: float = 0.0
    requeue_ms: float = 0.0
    busy_queue: int = 1_000_000_000
    links: dict[str, LinkClass] | None = None  # a fit with link classes: each class's pull (kvcal.fleet.links)

    def for_link(self, link: LinkClass | None) -> FleetCosts:
        """These costs with the pull of ``link``'s class (None: the fit's one pull)."""
        return self if link is None else replace(self, pull=link.pull)

    def prefill_ms(self, done: int, take: int) -> float:
        _, b, c = self.recompute
        end = done + take
        return b * take / 1e3 + c * (end * end - done * done) / 1e6

    def transfer_ms(self, tokens: int) -> float:
        a, b, c = self.pull
        return max(0.0, a + b * tokens / 1e3 + c * tokens * tokens / 1e6 - self.recompute[0])

    def link_ms(self, tokens: int) -> float:
        return max(0.0, self.pull[1] * tokens / 1e3)


def _loaded_terms(fit: FitResult) -> dict:
    cm = fit.cost_model
    if cm is None:
        return {}
    return {
        "source_wait_ms": max(0.0, cm.sourceWaitMs.value),
        "requeue_ms": max(0.0, cm.requeueMs.value),
        "busy_queue": cm.busyQueueThreshold,
    }


def leg_cost(fit: FitResult, leg: str, coefficients: tuple[float, float, float]) -> tuple[float, float, float]:
    """The one place a fit leg's coefficients (the point fit's or a resample's) become the fleet's cost of that leg.

    ``leg`` is "recompute" or "pull". The router pays a leg's mean cost, not its typical one: the robust fit's curve
    is scaled by what its residuals say (:mod:`kvcal.fit.mean_cost`, as emit-config's rule decides), so every cost
    set, the point fit's and each resample's, charges the mean.
    """
    m_recompute, m_pull = mean_scales(fit)
    scale = m_recompute if leg == "recompute" else m_pull
    return (float(coefficients[0]) * scale, float(coefficients[1]) * scale, float(coefficients[2]) * scale)


def point_costs(fit: FitResult) -> FleetCosts:
    return FleetCosts(
        leg_cost(fit, "recompute", fit.recompute.coefficients),
        leg_cost(fit, "pull", fit.pull.coefficients),
        **_loaded_terms(fit),
        links=link_classes(fit),
    )


def resampled_costs(fit: FitResult, count: int) -> list[FleetCosts]:
    """``count`` of the fit's bootstrap resamples, evenly spaced; the point fit when it kept none or count is 0."""
    names = ("intercept_ms", "per_token_us", "per_token2_ns")
    rs, ps = fit.bootstrap.recompute_samples, fit.bootstrap.pull_samples
    if count <= 0 or not rs or not ps:
        return [point_costs(fit)]
    r = np.array([[v if v is not None else np.nan for v in rs[k]] for k in names]).T
    p = np.array([[v if v is not None else np.nan for v in ps[k]] for k in names]).T
    usable = np.flatnonzero(np.isfinite(r).all(axis=1) & np.isfinite(p).all(axis=1))
    if not len(usable):
        return [point_costs(fit)]
    # Evenly spaced in the order of their break-even, so that a few resamples span the interval rather than a
    # random part of it.
    order = usable[np.argsort([_crossing(r[i], p[i]) for i in usable])]
    picks = order[np.linspace(0, len(order) - 1, min(count, len(order))).round().astype(int)]
    extra = {**_loaded_terms(fit), "links": link_classes(fit)}
    return [
        FleetCosts(leg_cost(fit, "recompute", tuple(r[i])), leg_cost(fit, "pull", tuple(p[i])), **extra) for i in picks
    ]


def _crossing(recompute: np.ndarray, pull: np.ndarray) -> float:
    roots = np.asarray(break_even_tokens(recompute, pull), dtype=float).ravel()
    return float(roots[0]) if roots.size and np.isfinite(roots[0]) else float("inf")


def cost_rule(fit: FitResult) -> CostRule | None:
    """The costModel rule when the fit calibrated one under load (a loaded run or production logs); else None."""
    if fit.cost_model is None:
        return None
    values, _, _ = costmodel_values(fit)
    return CostRule(
        prefill_us=float(values["prefillMicrosecondsPerToken"]),
        transfer_us=float(values["transferMicrosecondsPerToken"]),
        fixed_ms=float(values["transferFixedMs"]),
        source_wait_ms=float(values.get("sourceWaitMs", 0.0)),
        requeue_ms=float(values.get("requeueMs", 0.0)),
        busy_queue=int(values.get("busyQueueThreshold", fit.cost_model.busyQueueThreshold)),
        fleet_weight=float(values.get("fleetWeight", 0.0)),
    )
