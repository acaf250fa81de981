"""Hostile variants of the fake Prometheus' fleet (tests/fake_prometheus.py), by mode: text, numbers, protocol.

Each mode is the fleet of fake_prometheus.py with one thing made hostile, as a server or an
exporter could send it (issue 55):

- ``labels``: a pod label holding ESC/OSC sequences, a NUL, a CR, a newline that forges a
  table row, a bidi override and a C1 control;
- ``errtext``: the server refuses every query with an error text holding the same;
- ``huge``-valued counters (``near_max``): every counter near 1e308, so that sums overflow a float;
- ``neg_inf_bucket``: the TTFT histogram gains a ``le="-Inf"`` bucket;
- ``negative``: the request counter holds negative values (a broken exporter);
- ``nan_counter``: a counter sample is NaN; ``inf_gauge``: a queue reading is +Inf;
- ``nan_gauge``: queue readings that are NaN (no reading: left out, the rest counts);
- ``nohttp``: the server answers bytes without an HTTP status line and closes;
- ``notanumber``: a sample's value is a word.
"""

from __future__ import annotations

import json
import math

HOSTILE_POD = "pod-\x1b[31mred\x1b]0;title\x07\x00nul\rcr\nfleet  99.9  0.0\u202eevil\x85"
ERROR_TEXT = "bad\x1b[2J\x1b]8;;http://x\x07link\nkvcal: forged line\r\u202e"
SERIES_MODES = ("labels", "near_max", "neg_inf_bucket", "negative", "nan_counter", "inf_gauge", "nan_gauge",
                "notanumber")
RAW_MODES = ("errtext", "nohttp")


def variant(series: list, mode: str) -> list:
    """The fleet's series (labels, samples) with ``mode``'s hostility; samples' values may become strings."""
    out = []
    for labels, samples in series:
        name = labels["__name__"]
        if mode == "labels" and labels.get("pod") == "pod-a":
            labels = {**labels, "pod": HOSTILE_POD}
        elif mode == "near_max" and not name.endswith("waiting"):
            samples = [(t, 1.7e308 - 1e300 * i) if i % 2 else (t, 1.7e308) for i, (t, _) in enumerate(samples)]
        elif mode == "negative" and "request_success" in name:
            samples = [(t, -v) for t, v in samples]
        elif mode == "nan_counter" and name.endswith("prompt_tokens_total"):
            samples = [(t, math.nan if i == 2 * len(samples) // 3 - 1 else v) for i, (t, v) in enumerate(samples)]
        elif mode == "inf_gauge" and name.endswith("waiting"):
            samples = [(t, math.inf if i == 2 * len(samples) // 3 - 1 else v) for i, (t, v) in enumerate(samples)]
        elif mode == "nan_gauge" and name.endswith("waiting"):
            samples = [(t, math.nan if i % 2 else v) for i, (t, v) in enumerate(samples)]
        elif mode == "notanumber" and name.endswith("prompt_tokens_total"):
            samples = [(t, "many" if i == 2 * len(samples) // 3 - 1 else v) for i, (t, v) in enumerate(samples)]
        out.append((labels, samples))
    if mode == "neg_inf_bucket":
        out += [({**labels, "le": "-Inf"}, samples) for labels, samples in series
                if labels["__name__"].endswith("_bucket") and labels.get("le") == "0.1"]
    return out


def raw_answer(mode: str) -> tuple[int | None, bytes]:
    """What a RAW_MODES server sends: an HTTP status and a JSON body, or (None, bytes) for no HTTP at all."""
    if mode == "errtext":
        return 400, json.dumps({"status": "error", "errorType": "bad_data", "error": ERROR_TEXT}).encode()
    return None, b"SSH-2.0-OpenSSH_9.6\r\nProtocol mismatch.\n"


def value_text(value: object) -> str:
    """A sample's value as Prometheus writes it: NaN, +Inf, -Inf, or the number (a word stays a word)."""
    if isinstance(value, str):
        return value
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)
