"""The llm-d recipe's observational inputs: production requests joined to the router's decisions.

Two files, as the recipe collects them (shapes in docs/method.md):

* inference-perf's ``per_request_lifecycle_metrics.json`` (one or more; inference-perf
  0.7.0 writes it with ``report.request_lifecycle.per_request: true``): a list of
  requests with ``start_time`` (s, a monotonic clock), ``error``,
  ``info.request_metrics.text.input_tokens`` (the deprecated ``info.input_tokens``
  mirror is read when it is absent), ``info.response_metrics.output_token_times`` (s)
  and ``info.response_metrics.response_chunks`` (content-bearing chunks only; the
  first one's JSON ``id`` is ``cmpl-<router request id>`` for a completion and
  ``chatcmpl-<router request id>`` for a chat completion). The TTFT is inference-perf's
  own: ``output_token_times[0] - start_time`` for a streamed response with more than
  one token time (``reportgen/base.py``, ``compute_request_latency_metrics``), or its
  ``computed_metrics.time_to_first_token`` where the file carries one. A request
  inference-perf gives no TTFT (an error, a one-token or unstreamed response) or that
  names no id (written with ``response_chunks`` off) is skipped and counted by reason;
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
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvcal.errors import InputError
from kvcal.files.reading import load_json
from kvcal.fit.costmodel_inputs import LoadedProbes, idle_curves
from kvcal.fit.entry import load_or_fit
from kvcal.records.fit import FIT_DEFAULTS, FitResult, FitSettings, FitSource
from kvcal.records.run import MAX_TOKENS
from kvcal.settings.sweep_groups import DEFAULT_BUSY_QUEUE_THRESHOLD

log = logging.getLogger(__name__)

DECISION = "p2p decision"
OUTCOMES = ("pulled", "self", "below-floor", "no-best-match")
ID_PREFIXES = ("chatcmpl-", "cmpl-")  # vLLM's chat and completion ids around the router's request id
RERUN = (
    "rerun inference-perf with api.streaming: true, report.request_lifecycle.per_request: true and "
    "per_request_fields.response_chunks: true (its default), with outputs of at least 2 tokens"
)

# Why a request is left out; each says what inference-perf did or did not record.
ERRORED = "an error"
UNSTREAMED = "no token times (not streamed)"
ONE_TOKEN = "one token time or none (inference-perf gives it no TTFT)"
NO_CHUNKS = "no response chunks (written with response_chunks off)"
NO_ID = "no JSON id in the first response chunk"
NO_INPUT = "no input token count"


class _Read(BaseModel):
    # inference-perf's records grow fields between releases (and carry raw payloads we do
    # not need): read the fields kvcal uses and ignore the rest, unlike kvcal's own records.
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class TextRequestMetrics(_Read):
    input_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS, strict=True)


class RequestMetrics(_Read):
    text: TextRequestMetrics | None = None


class ResponseMetrics(_Read):
    """``StreamedResponseMetrics`` when ``output_token_times`` is present, else a unary response."""

    output_tokens: int | None = None
    output_token_times: list[float] | None = None
    response_chunks: list[str] | None = None


class RequestInfo(_Read):
    request_metrics: RequestMetrics | None = None
    input_tokens: int | None = Field(
        None, ge=0, le=MAX_TOKENS, strict=True
    )  # deprecated mirror of request_metrics.text.input_tokens
    response_metrics: ResponseMetrics | None = None

    def prompt_tokens(self) -> int | None:
        text = self.request_metrics.text if self.request_metrics else None
        return text.input_tokens if text is not None and text.input_tokens is not None else self.input_tokens


class ComputedMetrics(_Read):
    time_to_first_token: float | None = None


class LifecycleRecord(_Read):
    """One entry of ``per_request_lifecycle_metrics.json``."""

    start_time: float
    info: RequestInfo | None = None
    error: dict[str, object] | str | None = None
    computed_metrics: ComputedMetrics | None = None

    def ttft_s(self) -> float | None:
        """inference-perf's TTFT: the first token time after the start, for more than one token time."""
        if self.computed_metrics is not None:
            return self.computed_metrics.time_to_first_token
        metrics = self.info.response_metrics if self.info else None
        times = metrics.output_token_times if metrics else None
        return times[0] - self.start_time if times and len(times) > 1 else None

    def skip_reason(self) -> str | None:
        metrics = self.info.response_metrics if self.info else None
        if self.error:
            return ERRORED
        if metrics is None or metrics.output_token_times is None:
            return UNSTREAMED
        if self.ttft_s() is None:
            return ONE_TOKEN
        if not metrics.response_chunks:
            return NO_CHUNKS
        if _request_id(metrics.response_chunks[0]) is None:
            return NO_ID
        return NO_INPUT if self.info is None or self.info.prompt_tokens() is None else None


@dataclass(frozen=True)
class RequestTiming:
    """One inference-perf request: its router id, prompt length and TTFT."""

    request_id: str
    input_tokens: int
    ttft_ms: float


@dataclass(frozen=True)
class PerRequestFile:
    """The requests of one per-request file with a TTFT and an id, and how many were left out, by reason."""

    requests: list[RequestTiming]
    skipped: Counter[str] = field(default_factory=Counter)


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
    n_skipped: int
    n_unmatched: int
    n_joined: int


def _request_id(chunk: str) -> str | None:
    """The router's request id in a response chunk's JSON ``id`` (``cmpl-``/``chatcmpl-`` removed)."""
    text = chunk.strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    try:
        chunk_id = json.loads(text).get("id")
    except (ValueError, AttributeError, RecursionError):
        return None
    if not isinstance(chunk_id, str) or not chunk_id:
        return None
    return next((chunk_id[len(p) :] for p in ID_PREFIXES if chunk_id.startswith(p)), chunk_id)


def _read_records(path: Path) -> list[LifecycleRecord]:
    try:
        data = load_json(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such per-request file") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise InputError(f"{path}: not JSON ({err})") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deep to read") from None
    if not isinstance(data, list):
        raise InputError(f"{path}: expected inference-perf's list of requests, got {type(data).__name__}")
    records = []
    for index, item in enumerate(data):
        try:
            records.append(LifecycleRecord.model_validate(item))
        except ValidationError as err:
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the record"
            raise InputError(f"{path} request {index}: {where}: {first['msg']}") from None
    return records


def parse_per_request(path: Path) -> PerRequestFile:
    """The requests of one per-request file to which inference-perf gives a TTFT; the rest counted by reason."""
    found: list[RequestTiming] = []
    skipped: Counter[str] = Counter()
    records = _read_records(path)
    for index, record in enumerate(records):
        reason = record.skip_reason()
        if reason is not None:
            skipped[reason] += 1
            continue
        assert record.info is not None and record.info.response_metrics is not None  # skip_reason checked both
        ttft_ms = float(record.ttft_s() or 0.0) * 1e3
        if not math.isfinite(ttft_ms) or ttft_ms <= 0:
            raise InputError(
                f"{path} request {index}: a TTFT of {ttft_ms:.3f} ms (the first token at or before the start)"
            )
        chunks = record.info.response_metrics.response_chunks or []
        found.append(RequestTiming(str(_request_id(chunks[0])), int(record.info.prompt_tokens() or 0), ttft_ms))
    if not found:
        why = ", ".join(f"{n} with {reason}" for reason, n in skipped.most_common()) or "the list is empty"
        raise InputError(f"{path}: none of {len(records)} requests has a TTFT and a request id ({why}); {RERUN}")
    return PerRequestFile(found, skipped)


def _int(value: object, name: str, where: str) -> int:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise InputError(f"{where}: {name} {str(value)[:40]!r} is not a number kvcal can read") from None
    if not math.isfinite(number) or not 0 <= number <= MAX_TOKENS:
        raise InputError(f"{where}: {name} must be a number of 0 to {MAX_TOKENS:.0e}, got {str(value)[:40]!r}")
    return int(number)


def parse_epp_log(path: Path) -> dict[str, Decision]:
    """Every ``p2p decision`` in a router log, by request id (a repeated id keeps its last decision)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        raise InputError(f"{path}: no such EPP log") from None
    out: dict[str, Decision] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        decision = decision_from_line(line, f"{path} line {number}")
        if decision is not None:
            out[decision.request_id] = decision
    if not out:
        raise InputError(f"{path}: no 'p2p decision' lines (is this the router's log, at a level that logs decisions?)")
    return out


def decision_from_line(line: str, where: str) -> Decision | None:
    """The ``p2p decision`` one router log line holds, None for any other line; InputError for a broken one."""
    start = line.find("{")
    if start < 0 or DECISION not in line:
        return None
    try:
        entry = load_json(line[start:])
    except (ValueError, RecursionError):
        return None
    if not isinstance(entry, dict) or DECISION not in (entry.get("msg"), entry.get("body"), entry.get("message")):
        return None
    outcome = entry.get("outcome")
    if outcome not in OUTCOMES:
        raise InputError(f"{where}: outcome {outcome!r} is none of {', '.join(OUTCOMES)}")
    if not entry.get("requestID"):
        raise InputError(f"{where}: a p2p decision without requestID")
    return Decision(
        request_id=str(entry["requestID"]),
        outcome=str(outcome),
        best_cached_tokens=_int(entry.get("bestCachedTokens", 0), "bestCachedTokens", where),
        computing_cached_tokens=_int(entry.get("computingCachedTokens", 0), "computingCachedTokens", where),
        delta_tokens=_int(entry.get("deltaTokens", 0), "deltaTokens", where),
        source_waiting=_int(entry.get("sourceWaiting", 0), "sourceWaiting", where),
        computing_waiting=_int(entry.get("computingWaiting", 0), "computingWaiting", where),
    )


def join(
    requests: list[RequestTiming], decisions: dict[str, Decision], n_skipped: int = 0
) -> tuple[LoadedProbes, JoinStats]:
    """Requests with a decision, as cost-model rows; counts of what could not be joined."""
    rows = [(r, decisions[r.request_id]) for r in requests if r.request_id in decisions]
    stats = JoinStats(len(requests) + n_skipped, n_skipped, len(requests) - len(rows), len(rows))
    log.info("joined %d of %d requests to p2p decisions (%d skipped)", stats.n_joined, stats.n_requests, n_skipped)
    if not rows:
        raise InputError(
            f"none of {len(requests)} requests matched a p2p decision by request id "
            f"(the chunk id is cmpl-<requestID> or chatcmpl-<requestID>); are the two files from the same run?"
        )
    pulled = np.array([d.outcome == "pulled" for _, d in rows])
    cached = np.array(
        [d.best_cached_tokens if d.outcome == "pulled" else d.computing_cached_tokens for _, d in rows], dtype=float
    )
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


def fit_observational(
    per_request: list[Path],
    epp_log: Path,
    idle: Path,
    settings: FitSettings = FIT_DEFAULTS,
    *,
    threshold: int = DEFAULT_BUSY_QUEUE_THRESHOLD,
) -> FitResult:
    """The idle fit of ``idle`` with ``cost_model`` fitted to the joined production requests."""
    if not per_request:
        raise InputError("--epp-log needs at least one --per-request FILE")
    requests: list[RequestTiming] = []
    skipped: Counter[str] = Counter()
    for path in per_request:
        read = parse_per_request(path)
        requests += read.requests
        skipped.update(read.skipped)
    decisions = parse_epp_log(epp_log)
    data, stats = join(requests, decisions, sum(skipped.values()))
    # The cost model's bootstrap brings scipy.stats and pandas: imported here, so that reading a router log's
    # decisions (emit-config --deltas) loads neither.
    from kvcal.fit.costmodel import fit_cost_model

    idle_fit = load_or_fit(idle, settings)
    cost = fit_cost_model(data, idle_curves(idle_fit), threshold=threshold, settings=settings)
    notes = []
    if stats.n_unmatched:
        notes.append(f"{stats.n_unmatched} of {stats.n_requests} requests had no p2p decision and were left out")
    if skipped:
        why = ", ".join(f"{n} with {reason}" for reason, n in skipped.most_common())
        notes.append(f"{stats.n_skipped} of {stats.n_requests} requests were left out: {why}")
    inputs = [str(p) for p in per_request] + [str(epp_log), str(idle)]
    cost = cost.model_copy(update={"warnings": notes + list(cost.warnings), "inputs": inputs})
    # The idle curves and setup are the idle fit's; the source names the production log.
    return idle_fit.model_copy(
        update={"cost_model": cost, "source": FitSource(path=str(epp_log), kind="observational")}
    )
