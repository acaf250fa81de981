"""What kvcal said against what the fleet did: the checks behind ``kvcal observe``'s exit 1.

Tolerances (a figure is ``outside`` only beyond them):

- bytes per pulled token: within :data:`BYTES_TOLERANCE` of the fit's KV bytes per token
  (a pull moves whole blocks, so a prompt's last partial block adds a little);
- TTFT p50/p90: the histogram bucket the observed quantile lies in must meet the fleet
  row's interval widened by :data:`TTFT_TOLERANCE` of its ends (the histogram cannot say
  more than its bucket, and the fleet model is held to 25 % on the CPU pair, docs/fleet.md);
- share of prompt tokens pulled: the row's interval widened by :data:`SHARE_TOLERANCE` (absolute);
- queue p90: the row's interval widened by :data:`TTFT_TOLERANCE` and :data:`QUEUE_SLACK` requests.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcal.errors import InputError
from kvcal.fleet.policies import policy_class
from kvcal.fleet.result import FleetResult, FleetRow
from kvcal.observe.result import Check, Figures, Observed
from kvcal.records.fit import FitResult

BYTES_TOLERANCE = 0.10
TTFT_TOLERANCE = 0.25
SHARE_TOLERANCE = 0.05
QUEUE_SLACK = 1.0
FLEET_FIGURES = {
    "ttft_p50_ms": "ttft_p50_ms",
    "ttft_p90_ms": "ttft_p90_ms",
    "pull_share": "pulled_token_share",
    "queue_p90": "prefill_queue_p90",
}
"""The checks against a kvcal fleet row: observe's figure and the row's figure it is held to."""
FLEET_CHECKS = tuple(FLEET_FIGURES)


@dataclass(frozen=True)
class Prediction:
    """What to check the fleet against: a fit's KV bytes per token, and/or a fleet row chosen by the threshold."""

    fit: FitResult | None = None
    fleet: FleetResult | None = None
    deployed: int | None = None


def fleet_row(fleet: FleetResult, deployed: int) -> FleetRow:
    """The fleet's row for the deployed threshold; an input error naming the thresholds it has and what to run.

    Cached prefixes are whole blocks, so the delta the router compares with the threshold is
    a multiple of the block size, and a threshold pulls at the same deltas as the next block
    multiple up: a deployed 1000 with 64-token blocks is the row of 1024, and one of at most
    one block (1, the plugin's default) pulls whenever a peer holds more, kvcal fleet's
    ``always-pull`` row (or a ``threshold`` row run at that value).
    """
    block = max(1, fleet.block_size)
    acts_as = -(-deployed // block) * block
    rows = [row for row in fleet.rows if policy_class(row.policy).swept]
    for wanted in (deployed, acts_as):
        for row in rows:
            if row.threshold == wanted:
                return row
    if acts_as == block:
        for row in fleet.rows:
            if policy_class(row.policy).pulls_whenever_a_peer_holds_more:
                return row
    ran = sorted({row.threshold for row in rows if row.threshold is not None})
    raise InputError(
        f"the fleet result has no row for the deployed threshold {deployed} (it ran {ran}): "
        f"run kvcal fleet with --thresholds {deployed if deployed == 1 else acts_as}"
    )


def _unknown(name: str, observed: Observed, predicted: list[float] | None, tolerance: str, why: str) -> Check:
    return Check(
        name=name, observed=observed.value, predicted=predicted, tolerance=tolerance, verdict="unknown", reason=why
    )


def bytes_check(fit: FitResult, observed: Observed) -> Check:
    name, tolerance = "bytes_per_pulled_token", f"{BYTES_TOLERANCE:.0%} of the fit's KV bytes per token"
    kv = fit.setup.kv_bytes_per_token if fit.setup is not None else None
    predicted = [float(kv), float(kv)] if kv else None
    if predicted is None or kv is None:
        return _unknown(name, observed, None, tolerance, "the fit does not record its KV bytes per token")
    if observed.value is None:
        return _unknown(name, observed, predicted, tolerance, observed.missing or "not observed")
    inside = abs(observed.value - kv) <= BYTES_TOLERANCE * kv
    return Check(
        name=name,
        observed=observed.value,
        predicted=predicted,
        tolerance=tolerance,
        verdict="ok" if inside else "outside",
        reason=f"{observed.value:,.0f} bytes per pulled token against the calibration's {kv:,}",
    )


def _interval_check(
    name: str,
    observed: Observed,
    predicted: list[float],
    seen: list[float | None],
    widen: tuple[float, float],
    tolerance: str,
) -> Check:
    """ok when ``seen`` (the observed value, or the bucket it lies in) meets ``predicted`` widened by ``widen``."""
    if observed.value is None:
        return _unknown(name, observed, predicted, tolerance, observed.missing or "not observed")
    relative, absolute = widen
    low = predicted[0] * (1 - relative) - absolute
    high = predicted[1] * (1 + relative) + absolute
    seen_low, seen_high = seen[0], seen[1]
    meets = (seen_high is None or seen_high >= low) and seen_low is not None and seen_low <= high
    where = "within" if meets else ("below" if seen_high is not None and seen_high < low else "above")
    return Check(
        name=name,
        observed=observed.value,
        predicted=predicted,
        tolerance=tolerance,
        verdict="ok" if meets else "outside",
        reason=f"{observed.value:.4g} is {where} the predicted [{predicted[0]:.4g}, {predicted[1]:.4g}] "
        f"widened to [{low:.4g}, {high:.4g}]",
    )


def fleet_checks(row: FleetRow, fleet: Figures, buckets: dict[str, list[float | None]]) -> list[Check]:
    ttft_tol = f"interval widened by {TTFT_TOLERANCE:.0%}; the observed quantile's histogram bucket must meet it"
    out = []
    for name in ("ttft_p50_ms", "ttft_p90_ms"):
        observed = getattr(fleet, name)
        seen = buckets.get(name) or [observed.value, observed.value]
        predicted = list(getattr(row, FLEET_FIGURES[name]).ci)
        out.append(_interval_check(name, observed, predicted, seen, (TTFT_TOLERANCE, 0.0), ttft_tol))
    share = fleet.pull_share
    share_tol = f"interval widened by {SHARE_TOLERANCE} (absolute)"
    row_share = getattr(row, FLEET_FIGURES["pull_share"])
    if row_share is None:
        out.append(
            _unknown(
                "pull_share",
                share,
                None,
                share_tol,
                "the fleet result predates the share of prompt tokens pulled: run kvcal fleet again",
            )
        )
    else:
        out.append(
            _interval_check(
                "pull_share",
                share,
                list(row_share.ci),
                [share.value, share.value],
                (0.0, SHARE_TOLERANCE),
                share_tol,
            )
        )
    queue = fleet.queue_p90
    out.append(
        _interval_check(
            "queue_p90",
            queue,
            list(getattr(row, FLEET_FIGURES["queue_p90"]).ci),
            [queue.value, queue.value],
            (TTFT_TOLERANCE, QUEUE_SLACK),
            f"interval widened by {TTFT_TOLERANCE:.0%} and {QUEUE_SLACK:g} request",
        )
    )
    return out


def remeasure(checks: list[Check], prediction: Prediction, requests_per_s: float | None) -> list[str]:
    """What to measure again for each check outside, in words a cron job's log can carry."""
    out = []
    outside = {c.name for c in checks if c.verdict == "outside"}
    if "bytes_per_pulled_token" in outside:
        out.append(
            "bytes per pulled token moved from the calibration's: the model's KV layout or dtype, or the "
            "transport, changed; run kvcal sweep on a producer/consumer pair of this fleet, then kvcal fit"
        )
    if outside & set(FLEET_CHECKS):
        rate = f" (it served {requests_per_s:.3g} requests/s)" if requests_per_s is not None else ""
        fleet = prediction.fleet
        out.append(
            f"the fleet's TTFT, pulls or queues left kvcal fleet's prediction for threshold "
            f"{prediction.deployed}: run kvcal fleet again with the workload the fleet now serves{rate} and "
            f"--thresholds {prediction.deployed}"
            + (f" (the prediction was made from {fleet.fit})" if fleet is not None else "")
            + "; if the load matches, the pull or recompute cost moved: run kvcal sweep on a pair of its pods"
        )
    return out
