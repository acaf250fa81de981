"""Read an engine's Prometheus ``/metrics`` and turn two readings into deltas.

A :data:`Snapshot` maps a sample key to its value for every monotonic sample the engine
exposes: counters (``*_total``) and the ``_sum`` / ``_count`` of histograms and
summaries. Gauges, buckets and ``_created`` stamps are left out: a delta of them means
nothing. The key is the sample name plus its labels, sorted, without the labels that
are the same on every sample of one engine (``engine``, ``model_name``), e.g.
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``.

Metric names drift between vLLM versions, so nothing here hard-codes one: callers ask
:func:`total` for a name and get ``None`` when the engine does not expose it. A wanted
label value ``*:p2p`` matches vLLM 0.33's tier labels, which name a tier by position and
type (``tier="1:p2p"`` when the P2P tier is the first secondary tier; ``tier_label`` in
``vllm/v1/kv_offload/tiering/metrics.py``), whatever the position.

A page the parser refuses raises :class:`MetricsPageError` (the client names the engine);
values are kept as sent, NaN and infinities included: the reader of a counter judges it
(:mod:`kvcal.engines.vllm_measure`), and :func:`delta` leaves non-finite changes out.

Parsing uses prometheus_client's own text parser (the format has escaping, comments
and type lines that a hand-written split gets wrong).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families


class MetricsPageError(ValueError):
    """A /metrics page that is not Prometheus text."""


class Snapshot(dict[str, float]):
    """Sample key -> value, and ``declared``: the sample names of every monotonic family the page declares.

    A labelled counter has no sample until its first increment (vLLM 0.33's tier counters
    appear with their first read), but its ``# TYPE`` line is there from the start.
    """

    declared: frozenset[str] = frozenset()


_ANY_POSITION = "*:"
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="([^"]*)"')

# "unknown": a sample without a TYPE line still counts if its name ends like a counter's.
_MONOTONIC_TYPES = {"counter", "histogram", "summary", "gaugehistogram", "unknown"}
_MONOTONIC_SUFFIXES = ("_total", "_sum", "_count")
_ENGINE_LABELS = {"engine", "model_name"}


def sample_key(name: str, labels: Mapping[str, str]) -> str:
    """``name{a="1",b="2"}`` with labels sorted and per-engine labels dropped."""
    kept = sorted((k, v) for k, v in labels.items() if k not in _ENGINE_LABELS)
    if not kept:
        return name
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in kept) + "}"


def _kept_line(line: str) -> bool:
    if line.startswith("#"):
        return True
    return not line.split("{", 1)[0].split(" ", 1)[0].endswith(("_bucket", "_created"))


def _families(text: str):
    """The parser's families, its failures (of any kind on a hostile page) as MetricsPageError."""
    try:
        yield from text_string_to_metric_families(text)
    except Exception as err:
        raise MetricsPageError(f"{type(err).__name__}: {err}") from None


def parse_metrics(text: str) -> Snapshot:
    """Every monotonic sample in a Prometheus text page, keyed by :func:`sample_key`.

    Samples whose keys collide after dropping per-engine labels (several engines
    behind one server) are summed.
    """
    # Bucket and _created lines are most of vLLM's page and never used; dropping them
    # before the parser cuts a parse from ~9 ms to ~3 ms (it runs 2-4 times per leg).
    text = "\n".join(line for line in text.splitlines() if _kept_line(line)) + "\n"
    snapshot = Snapshot()
    declared: set[str] = set()
    for family in _families(text):
        if family.type not in _MONOTONIC_TYPES:
            continue
        declared.update(family.name + suffix for suffix in ("", *_MONOTONIC_SUFFIXES))
        for sample in family.samples:
            if not sample.name.endswith(_MONOTONIC_SUFFIXES):
                continue  # buckets, quantiles, _created
            key = sample_key(sample.name, sample.labels)
            snapshot[key] = snapshot.get(key, 0.0) + float(sample.value)
    snapshot.declared = frozenset(declared)
    return snapshot


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """Labels of the first sample of an info-style gauge (e.g. ``vllm:cache_config_info``), or None."""
    for family in _families(text):
        for sample in family.samples:
            if sample.name == name:
                return dict(sample.labels)
    return None


def delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """``after - before`` for every key in ``after`` whose value changed by a finite amount
    (a new key counts from 0)."""
    out: dict[str, float] = {}
    for key, value in after.items():
        change = value - before.get(key, 0.0)
        if change != 0.0 and math.isfinite(change):
            out[key] = change
    return out


def _name_of(key: str) -> str:
    return key.split("{", 1)[0]


def exposes(snapshot: Snapshot, name: str) -> bool:
    """True if any sample of ``name`` is in the snapshot."""
    return any(_name_of(key) == name for key in snapshot)


def label_matches(actual: str, wanted: str) -> bool:
    """``wanted`` equals ``actual``; ``*:type`` also matches a tier named by position, ``<n>:type`` (vLLM 0.33)."""
    if not wanted.startswith(_ANY_POSITION):
        return actual == wanted
    kind = wanted[len(_ANY_POSITION) :]
    position, _, found = actual.rpartition(":")
    return found == kind and (not position or position.isdigit())


def key_matches(key: str, name: str, labels: Mapping[str, str]) -> bool:
    """Whether sample ``key`` is a sample of ``name`` carrying every one of ``labels`` (see :func:`label_matches`)."""
    if _name_of(key) != name:
        return False
    have = dict(_LABEL.findall(key))
    return all(k in have and label_matches(have[k], v) for k, v in labels.items())


def matching_keys(values: Mapping[str, float], name: str, **labels: str) -> list[str]:
    return sorted(key for key in values if key_matches(key, name, labels))


def total(values: Mapping[str, float], name: str, **labels: str) -> float:
    """Sum of every sample of ``name`` whose labels match ``labels`` (0 if none match)."""
    return sum(values[key] for key in matching_keys(values, name, **labels))


def first_exposed(snapshot: Snapshot, names: tuple[str, ...]) -> str | None:
    """The first of ``names`` the engine exposes (names drift between versions), else None."""
    return next((name for name in names if exposes(snapshot, name)), None)


def poll_until(
    read: Callable[[], Snapshot],
    settled: Callable[[Snapshot], bool],
    *,
    timeout_s: float,
    interval_s: float = 0.01,
) -> tuple[Snapshot, bool]:
    """Read until ``settled(snapshot)`` holds or ``timeout_s`` passes; return the last reading and whether it settled.

    The first read happens at once: when the engine has already counted what the caller
    waits for, this costs one scrape and no sleep.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        snapshot = read()
        if settled(snapshot):
            return snapshot, True
        if time.monotonic() >= deadline:
            return snapshot, False
        time.sleep(interval_s)


def gauge_total(text: str, name: str) -> float | None:
    """Sum of a gauge's samples (e.g. ``vllm:num_requests_waiting``) in a metrics page; None if absent."""
    found: float | None = None
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            try:
                value = float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
            if math.isfinite(value):  # an engine's NaN is no reading
                found = (found or 0.0) + value
    return found
