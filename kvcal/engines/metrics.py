"""Read an engine's Prometheus ``/metrics`` and turn two readings into deltas.

A :data:`Snapshot` maps a sample key to its value for every monotonic sample the engine
exposes: counters (``*_total``) and the ``_sum`` / ``_count`` of histograms and
summaries. Gauges, buckets and ``_created`` stamps are left out: a delta of them means
nothing. The key is the sample name plus its labels, sorted, without the labels that
are the same on every sample of one engine (``engine``, ``model_name``), e.g.
``vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}``.

Metric names drift between vLLM versions, so nothing here hard-codes one: callers ask
:func:`total` for a name and get ``None`` when the engine does not expose it.

Parsing uses prometheus_client's own text parser (the format has escaping, comments
and type lines that a hand-written split gets wrong).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from prometheus_client.parser import text_string_to_metric_families

Snapshot = dict[str, float]

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


def parse_metrics(text: str) -> Snapshot:
    """Every monotonic sample in a Prometheus text page, keyed by :func:`sample_key`.

    Samples whose keys collide after dropping per-engine labels (several engines
    behind one server) are summed.
    """
    # Bucket and _created lines are most of vLLM's page and never used; dropping them
    # before the parser cuts a parse from ~9 ms to ~3 ms (it runs 2-4 times per leg).
    text = "\n".join(line for line in text.splitlines() if _kept_line(line)) + "\n"
    snapshot: Snapshot = {}
    for family in text_string_to_metric_families(text):
        if family.type not in _MONOTONIC_TYPES:
            continue
        for sample in family.samples:
            if not sample.name.endswith(_MONOTONIC_SUFFIXES):
                continue  # buckets, quantiles, _created
            key = sample_key(sample.name, sample.labels)
            snapshot[key] = snapshot.get(key, 0.0) + float(sample.value)
    return snapshot


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """Labels of the first sample of an info-style gauge (e.g. ``vllm:cache_config_info``), or None."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return dict(sample.labels)
    return None


def delta(before: Snapshot, after: Snapshot) -> dict[str, float]:
    """``after - before`` for every key in ``after`` whose value changed (a new key counts from 0)."""
    out: dict[str, float] = {}
    for key, value in after.items():
        change = value - before.get(key, 0.0)
        if change != 0.0:
            out[key] = change
    return out


def _name_of(key: str) -> str:
    return key.split("{", 1)[0]


def exposes(snapshot: Snapshot, name: str) -> bool:
    """True if any sample of ``name`` is in the snapshot."""
    return any(_name_of(key) == name for key in snapshot)


def total(values: Mapping[str, float], name: str, **labels: str) -> float:
    """Sum of every sample of ``name`` whose labels include ``labels`` (0 if none match)."""
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        value for key, value in values.items() if _name_of(key) == name and all(w in key for w in wanted)
    )


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
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            try:
                found = (found or 0.0) + float(line.rsplit(" ", 1)[-1])
            except ValueError:
                continue
    return found
