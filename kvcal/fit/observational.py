"""The llm-d recipe's observational inputs: production requests joined to the router's decisions.

Two files, as the recipe collects them (shapes in docs/method.md):

* inference-perf's ``per_request_lifecycle_metrics.json`` (one or more): a list of
  requests with ``start_time`` (s), ``error``, ``info.input_tokens`` and
  ``info.response_metrics.output_token_times`` (s; the first gives the TTFT) and
  ``info.response_metrics.response_chunks`` (the first chunk's JSON ``id`` is
  ``cmpl-<router request id>``);
* the router (EPP) log: lines whose JSON ``msg`` (or ``body``) is ``"p2p decision"``,
  with ``requestID``, ``outcome`` (``pulled``, ``self``, ``below-floor``,
  ``no-best-match``), ``bestCachedTokens``, ``computingCachedTokens``,
  ``deltaTokens``, ``sourceWaiting`` and ``computingWaiting``. Anything before the
  line's first ``{`` (a ``kubectl logs --timestamps`` stamp) is ignored; other lines
  are skipped.

Requests are joined to decisions by request id. A pulled request prefilled
``input_tokens - bestCachedTokens`` tokens and pulled ``deltaTokens``; any other
outcome prefilled ``input_tokens - computingCachedTokens`` and pulled nothing. The
joined requests are fitted by :func:`kvcal.fit.costmodel.fit_cost_model` with P and
T from an idle fit, exactly as a designed run is.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kvcal.errors import InputError
from kvcal.fit import load_or_fit
from kvcal.fit.costmodel import LoadedProbes, fit_cost_model, idle_curves
from kvcal.records import FitResult, FitSource

log = logging.getLogger(__name__)

DECISION = "p2p decision"
OUTCOMES = ("pulled", "self", "below-floor", "no-best-match")
ID_PREFIX = "cmpl-"


@dataclass(frozen=True)
class RequestTiming:
    """One inference-perf request: its router id, prompt length and TTFT."""

    request_id: str
    input_tokens: int
    ttft_ms: float


@dataclass(frozen=True)
class Decision:
    """One ``p2p decision`` line of the router log."""

    request_id: str
    outcome: str
    best_cached_tokens: int
    computing_cached_tokens: int
    delta_tokens: int
    source_waiting: int
    computing_waiting: int


@dataclass(frozen=True)
class JoinStats:
    n_requests: int
    n_errors: int
    n_unmatched: int
    n_joined: int


def _chunk_id(chunk: object) -> str | None:
    if isinstance(chunk, str):
        text = chunk.strip()
        if text.startswith("data:"):
            text = text[5:].strip()
        try:
            chunk = json.loads(text)
        except ValueError:
            return None
    if isinstance(chunk, dict) and isinstance(chunk.get("id"), str):
        return chunk["id"]
    return None


def parse_per_request(path: Path) -> tuple[list[RequestTiming], int]:
    """The successful requests of one per-request file, and how many had an error (skipped)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such per-request file") from None
    except ValueError as err:
        raise InputError(f"{path}: not JSON ({err})") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected inference-perf's list of requests, got {type(data).__name__}")
    out: list[RequestTiming] = []
    errors = 0
    for index, item in enumerate(data):
        where = f"{path} request {index}"
        if not isinstance(item, dict):
            raise InputError(f"{where}: not an object")
        if item.get("error"):
            errors += 1
            continue
        info = item.get("info") or {}
        metrics = info.get("response_metrics") or {}
        times = metrics.get("output_token_times") or []
        chunks = metrics.get("response_chunks") or []
        if not isinstance(item.get("start_time"), (int, float)) or not times or not isinstance(times[0], (int, float)):
            raise InputError(f"{where}: needs start_time and info.response_metrics.output_token_times")
        if not isinstance(info.get("input_tokens"), int):
            raise InputError(f"{where}: needs info.input_tokens (an integer)")
        chunk_id = _chunk_id(chunks[0]) if chunks else None
        if chunk_id is None:
            raise InputError(f"{where}: the first response chunk carries no JSON id (cmpl-<request id>)")
        ttft_ms = (float(times[0]) - float(item["start_time"])) * 1e3
        if not math.isfinite(ttft_ms) or ttft_ms <= 0:
            raise InputError(f"{where}: first token at or before the start ({ttft_ms:.3f} ms)")
        request_id = chunk_id[len(ID_PREFIX):] if chunk_id.startswith(ID_PREFIX) else chunk_id
        out.append(RequestTiming(request_id, int(info["input_tokens"]), ttft_ms))
    return out, errors


def _int(value: object, name: str, where: str) -> int:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise InputError(f"{where}: {name} {value!r} is not a number") from None
    if not math.isfinite(number) or number < 0:
        raise InputError(f"{where}: {name} must be a non-negative number, got {value!r}")
    return int(number)


def parse_epp_log(path: Path) -> dict[str, Decision]:
    """Every ``p2p decision`` in a router log, by request id (a repeated id keeps its last decision)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"{path}: no such EPP log") from None
    out: dict[str, Decision] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        start = line.find("{")
        if start < 0 or DECISION not in line:
            continue
        try:
            entry = json.loads(line[start:])
        except ValueError:
            continue
        if not isinstance(entry, dict) or DECISION not in (entry.get("msg"), entry.get("body"), entry.get("message")):
            continue
        where = f"{path} line {number}"
        outcome = entry.get("outcome")
        if outcome not in OUTCOMES:
            raise InputError(f"{where}: outcome {outcome!r} is none of {', '.join(OUTCOMES)}")
        if not entry.get("requestID"):
            raise InputError(f"{where}: a p2p decision without requestID")
        out[str(entry["requestID"])] = Decision(
            request_id=str(entry["requestID"]), outcome=str(outcome),
            best_cached_tokens=_int(entry.get("bestCachedTokens", 0), "bestCachedTokens", where),
            computing_cached_tokens=_int(entry.get("computingCachedTokens", 0), "computingCachedTokens", where),
            delta_tokens=_int(entry.get("deltaTokens", 0), "deltaTokens", where),
            source_waiting=_int(entry.get("sourceWaiting", 0), "sourceWaiting", where),
            computing_waiting=_int(entry.get("computingWaiting", 0), "computingWaiting", where),
        )
    if not out:
        raise InputError(f"{path}: no 'p2p decision' lines (is this the router's log, at a level that logs decisions?)")
    return out


def join(requests: list[RequestTiming], decisions: dict[str, Decision], n_errors: int = 0) -> tuple[LoadedProbes, JoinStats]:
    """Requests with a decision, as cost-model rows; counts of what could not be joined."""
    rows = [(r, decisions[r.request_id]) for r in requests if r.request_id in decisions]
    stats = JoinStats(len(requests) + n_errors, n_errors, len(requests) - len(rows), len(rows))
    log.info("joined %d of %d requests to p2p decisions (%d errors)", stats.n_joined, stats.n_requests, n_errors)
    if not rows:
        raise InputError(f"none of {len(requests)} requests matched a p2p decision by request id "
                         f"(the chunk id is cmpl-<requestID>); are the two files from the same run?")
    pulled = np.array([d.outcome == "pulled" for _, d in rows])
    cached = np.array([d.best_cached_tokens if d.outcome == "pulled" else d.computing_cached_tokens for _, d in rows], dtype=float)
    inputs = np.array([r.input_tokens for r, _ in rows], dtype=float)
    data = LoadedProbes(
        pulled=pulled,
        uncached=np.maximum(inputs - cached, 0.0),
        delta=np.where(pulled, np.array([d.delta_tokens for _, d in rows], dtype=float), 0.0),
        ttft_ms=np.array([r.ttft_ms for r, _ in rows]),
        source_waiting=np.array([d.source_waiting for _, d in rows], dtype=np.int64),
        computing_waiting=np.array([d.computing_waiting for _, d in rows], dtype=np.int64),
        stratum=pulled.astype(np.int64),
        design="observational",
    )
    return data, stats


def fit_observational(per_request: list[Path], epp_log: Path, idle: Path, *, threshold: int = 1,
                      confidence: float = 0.9, seed: int = 0, n_resamples: int = 2000) -> FitResult:
    """The idle fit of ``idle`` with ``cost_model`` fitted to the joined production requests."""
    if not per_request:
        raise InputError("--epp-log needs at least one --per-request FILE")
    requests: list[RequestTiming] = []
    errors = 0
    for path in per_request:
        found, failed = parse_per_request(path)
        requests += found
        errors += failed
    decisions = parse_epp_log(epp_log)
    data, stats = join(requests, decisions, errors)
    idle_fit = load_or_fit(idle, confidence=confidence, seed=seed, n_resamples=n_resamples)
    cost = fit_cost_model(data, idle_curves(idle_fit), threshold=threshold, confidence=confidence, seed=seed,
                          n_resamples=n_resamples)
    notes = []
    if stats.n_unmatched:
        notes.append(f"{stats.n_unmatched} of {stats.n_requests} requests had no p2p decision and were left out")
    if stats.n_errors:
        notes.append(f"{stats.n_errors} request(s) with an error were left out")
    inputs = [str(p) for p in per_request] + [str(epp_log), str(idle)]
    cost = cost.model_copy(update={"warnings": notes + list(cost.warnings), "inputs": inputs})
    # The idle curves and setup are the idle fit's; the source names the production log.
    return idle_fit.model_copy(update={"cost_model": cost, "source": FitSource(path=str(epp_log), kind="observational")})
