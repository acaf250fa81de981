"""Production costs per pod and fleet-wide: what a pull and a prefill cost the engines over the window.

The figures and their series are declared in :data:`kvcal.observe.catalog.COSTS`; this module
counts each ratio's parts over a window (:mod:`kvcal.observe.series`: resets and starts
counted), per pod and added over pods, and says why a figure is missing:

- a pod that exposes neither NIXL's transfer histogram nor the P2P tier's read time has no
  pull figures (it does not pull, or its vLLM does not count it);
- a **P/D decode pod** (it took tokens from a peer and has no P2P tier: NIXL's consumer) has
  no prefill figure: vLLM counts a pulled prompt's tokens as computed while the prefill time
  covers only the transfer and the tail, so the ratio means nothing there; the prefill pods
  give it;
- a denominator of zero (nothing pulled, attempted or computed in the window) is missing
  with that reason, never 0.

The P2P tier creates its promotion-failure series at the first failure (a labelled counter),
so a tier pod without it failed none; the notes say so. NIXL's time is divided by the TP
size (the fit's, else 1 with a note). ``samples`` counts the events behind a figure: NIXL
transfers per rank, the tier's chunks, attempted transfers, prefilled requests (the scrapes
read where the engines count no events).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvcal.observe.catalog import ABSENT_IS_ZERO, ALL_QUERIES, COSTS, EXTERNAL, KIND_ROLES, Part, Ratio
from kvcal.observe.client import Series
from kvcal.observe.result import Observed
from kvcal.observe.series import History, Increase, Window, by_pod, summed

NO_PULL_SERIES = (
    f"neither NIXL's transfer histogram ({ALL_QUERIES['nixl_xfer_time']}) nor the P2P tier's read time "
    f"({ALL_QUERIES['tier_p2p_time']}) is exposed: "
)


def no_pull(name: str, pulled: float) -> str:
    """Why a pod has no pull figures: it pulled nothing, or its vLLM does not count a pull's time."""
    if pulled > 0:
        return f"{NO_PULL_SERIES}{name} pulled {pulled:,.0f} prompt tokens, but its vLLM does not count their transfer"
    return f"{NO_PULL_SERIES}{name} does not pull, or its vLLM does not count it"


EMPTY = {
    "pull_ms_per_token": "no token was pulled in the window",
    "pull_bytes_per_s": "no transfer time was counted in the window",
    "pull_failure_rate": "no pull was attempted in the window",
    "prefill_ms_per_token": "no prompt token was computed in the window",
}
_EVENTS = {"nixl": "nixl_transfers", "p2p-tier": "tier_p2p_chunks"}


@dataclass
class PodCosts:
    """One pod's (or several pods') counts for each cost figure: (numerator, denominator, events), or why missing."""

    kind: str | None
    sums: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    pulled_tokens: float = 0.0
    prefill_exposed: bool = False
    notes: list[str] = field(default_factory=list)


def pod_kind(mine: dict[str, list[Series]]) -> str | None:
    """``p2p-tier`` (its tier read counters, as figures.py reads its pulls), ``nixl`` (NIXL's histograms), or None:
    the first kind of :data:`kvcal.observe.catalog.KIND_ROLES` whose series the pod exposes."""
    return next((kind for kind, roles in KIND_ROLES.items() if any(mine.get(role) for role in roles)), None)


def _increase(part: Part, mine: dict[str, list[Series]], window: Window, history: History) -> Increase | None:
    chosen = [s for s in mine.get(part.role, []) if all(s.labels.get(k) == v for k, v in part.labels)]
    if not chosen:
        return None
    found = summed(chosen, window, history)
    return Increase(part.sign * found.value, found.samples)


def _added(parts: tuple[Part, ...], mine: dict[str, list[Series]], window: Window, history: History):
    """The parts' increases added; the first part not exposed (its role) when one is not."""
    total = Increase(0.0, 0)
    for part in parts:
        found = _increase(part, mine, window, history)
        if found is None:
            if part.role in ABSENT_IS_ZERO:  # created at the first failure: absent means none
                continue
            return part.role
        total = Increase(total.value + found.value, max(total.samples, found.samples))
    return total


@dataclass(frozen=True)
class CostReader:
    """The cost figures' series split by pod, read over any window (the whole one, or its sub-windows)."""

    split: dict[str, dict[str, list[Series]]]
    history: History
    ranks: int

    @classmethod
    def of(cls, fetched: dict[str, list[Series]], history: History, ranks: int) -> CostReader:
        pods: dict[str, dict[str, list[Series]]] = {name: {} for name in history.seen}
        for role, series in fetched.items():
            for name, mine in by_pod(series).items():
                pods.setdefault(name, {})[role] = mine
        return cls(pods, history, ranks)

    def pods(self, window: Window) -> dict[str, PodCosts]:
        return {name: self.pod(name, window) for name in sorted(self.split)}

    def pod(self, name: str, window: Window) -> PodCosts:
        mine = self.split[name]
        kind = pod_kind(mine)
        costs = PodCosts(kind)
        external = _increase(EXTERNAL, mine, window, self.history)
        costs.pulled_tokens = external.value if external is not None and kind != "p2p-tier" else 0.0
        costs.prefill_exposed = bool(mine.get("prefill_time"))
        events = self._events(kind, mine, window)
        for figure, spec in COSTS.items():
            ratio = spec.ratio(kind or "any")
            if ratio is None:
                costs.missing[figure] = no_pull(name, costs.pulled_tokens)
                continue
            if ratio.unless_pulled and costs.pulled_tokens > 0:
                costs.missing[figure] = _decode_pod(costs.pulled_tokens)
                continue
            self._one(costs, figure, ratio, mine, window, events)
        if kind == "p2p-tier" and not mine.get("tier_p2p_failures"):
            costs.notes.append(f"{name}: no promotion-failure series (the P2P tier creates it at the first failure)")
        return costs

    def _events(self, kind: str | None, mine: dict[str, list[Series]], window: Window) -> dict[str, float | None]:
        role = _EVENTS.get(kind or "")
        pulls = _increase(Part(role), mine, window, self.history) if role else None
        requests = _increase(Part("prefill_requests"), mine, window, self.history)
        ranks = self.ranks if kind == "nixl" else 1
        return {
            "pull": None if pulls is None else pulls.value / ranks,
            "prefill": None if requests is None else requests.value,
        }

    def _one(self, costs: PodCosts, figure: str, ratio: Ratio, mine, window: Window, events) -> None:
        top = _added(ratio.numerator, mine, window, self.history)
        bottom = _added(ratio.denominator or (), mine, window, self.history)
        for found in (top, bottom):
            if isinstance(found, str):
                costs.missing[figure] = f"{ALL_QUERIES[found]} is not exposed"
                return
        assert isinstance(top, Increase) and isinstance(bottom, Increase)
        numerator = top.value / (self.ranks if ratio.per_rank else 1)
        denominator = bottom.value / (self.ranks if ratio.per_rank == "both" else 1)
        if figure == "pull_failure_rate":
            count: float | None = denominator
        else:
            count = events["prefill" if figure == "prefill_ms_per_token" else "pull"]
        costs.sums[figure] = (numerator, denominator, float(top.samples if count is None else count))


def _decode_pod(pulled: float) -> str:
    return (
        f"a P/D decode pod (it took {pulled:,.0f} prompt tokens from a peer in the window): vLLM counts a pulled "
        "prompt's tokens as computed while its prefill time covers only the transfer and the tail, so the prefill "
        "pods give this figure"
    )


def combined(parts: list[PodCosts]) -> PodCosts:
    """Several pods' counts added, figure by figure, over the pods that give it (the fleet)."""
    out = PodCosts(kind=None)
    for figure in COSTS:
        given = [p.sums[figure] for p in parts if figure in p.sums]
        if given:
            out.sums[figure] = (sum(g[0] for g in given), sum(g[1] for g in given), sum(g[2] for g in given))
        else:
            reasons = [p.missing[figure] for p in parts if figure in p.missing]
            out.missing[figure] = _fleet_reason(figure, reasons)
    out.pulled_tokens = sum(p.pulled_tokens for p in parts)
    return out


def _fleet_reason(figure: str, reasons: list[str]) -> str:
    if not reasons:
        return "no vLLM series matched in the window"
    if all(r == reasons[0] for r in reasons):
        return reasons[0]
    if all(r.startswith(NO_PULL_SERIES) for r in reasons):
        return f"{NO_PULL_SERIES}no pod's pull is counted (the pods pull nothing, or their vLLM does not count it)"
    return f"no pod gives it ({reasons[0]})"


def observed(costs: PodCosts) -> dict[str, Observed]:
    """The four cost figures of one pod or of the fleet; missing with the reason where a part is absent or zero."""
    out = {}
    for figure, spec in COSTS.items():
        if figure not in costs.sums:
            out[figure] = Observed(value=None, samples=0, missing=costs.missing.get(figure, "not exposed"))
            continue
        numerator, denominator, events = costs.sums[figure]
        scale = next(iter(spec.ratios.values())).scale
        if denominator <= 0:
            out[figure] = Observed(value=None, samples=int(round(events)), missing=EMPTY[figure])
            continue
        out[figure] = Observed(value=scale * numerator / denominator, samples=int(round(events)))
    return out
