"""A long window asked for in spans (issue 55): samples at a span's edge counted once, an answer past the cap cut and
asked again, a window past the sample cap refused; the arithmetic linear (a month of a _created series)."""

from __future__ import annotations

import json
import re
from urllib.parse import parse_qs

import httpx
import pytest

from kvcal.errors import InputError
from kvcal.observe import client as client_module
from kvcal.observe.client import PrometheusClient, query_budget
from kvcal.observe.series import History, Window, increase

STEP = 15.0
START, END = 1_795_000_000.0, 1_795_000_000.0 + 2 * 86_400
QUERY = re.compile(r"^(\{.*\})\[(\d+)s\]$")


def _server(closed: bool, asked: list[float], *, pad: int = 0):
    """Prometheus 2.x answers a range selector over [at - N, at] (closed: ``closed``), 3.x over (at - N, at]."""

    def handle(request: httpx.Request) -> httpx.Response:
        params = {k: v[0] for k, v in parse_qs(request.url.query.decode()).items()}
        at = float(params["time"])
        if params["query"] == "vector(1)":
            return httpx.Response(200, json={"status": "success",
                                             "data": {"resultType": "vector", "result": [{"metric": {}, "value": [at, "1"]}]}})
        seconds = float(QUERY.match(params["query"]).group(2))
        asked.append(seconds)
        first = at - seconds
        times = [t for t in (START - 600 + STEP * k for k in range(int((END - START + 600) / STEP) + 1))
                 if (first <= t if closed else first < t) and t <= at]
        values = [[t, str(int((t - START) // STEP) + 1000)] for t in times]
        metric = {"__name__": "vllm:request_success_total", "pod": "p", "pad": "x" * pad}
        body = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": metric, "values": values}]}}
        return httpx.Response(200, content=json.dumps(body).encode())

    return httpx.MockTransport(handle)


@pytest.mark.parametrize("closed", [True, False])
def test_two_days_in_spans_count_every_sample_once(closed):
    asked: list[float] = []
    with PrometheusClient("http://prom:9090", transport=_server(closed, asked)) as client:
        (series,) = client.raw_samples('{__name__="x"}', START - 300, END)
    assert len(asked) > 2  # more than one span
    assert len(series) == len(set(series.times.tolist())) == int((END - START + 300) / STEP) + closed
    assert increase(series, Window(START, END), History({}, {})).value == (END - START) / STEP


def test_an_answer_past_the_cap_is_asked_again_for_a_shorter_span_and_refused_at_the_shortest(monkeypatch):
    monkeypatch.setattr(client_module, "BODY_CAP", 20_000)  # 6 hours of samples are some 43 kB
    monkeypatch.setattr(client_module, "TARGET_BYTES", 5_000)
    asked: list[float] = []
    with PrometheusClient("http://prom:9090", transport=_server(False, asked)) as client:
        (series,) = client.raw_samples('{__name__="x"}', START, END)
    assert len(series) == (END - START) / STEP and min(asked) < client_module.FIRST_SPAN_S
    monkeypatch.setattr(client_module, "BODY_CAP", 300)  # less than 5 minutes of samples
    with PrometheusClient("http://prom:9090", transport=_server(False, [])) as client:
        with pytest.raises(InputError, match="narrow --selector"):
            client.raw_samples('{__name__="x"}', START, END)


def test_a_window_past_the_sample_cap_is_refused(monkeypatch):
    monkeypatch.setattr(client_module, "MAX_SAMPLES", 1_000)
    with PrometheusClient("http://prom:9090", transport=_server(False, [])) as client:
        with pytest.raises(InputError, match="more than 1,000 raw samples"):
            client.raw_samples('{__name__="x"}', START, END)


def test_the_budget_grows_with_the_window():
    assert query_budget(900) == query_budget(86_400) == client_module.TOTAL_DEADLINE_S
    assert query_budget(31 * 86_400) == client_module.TOTAL_DEADLINE_S + 30 * client_module.DEADLINE_PER_DAY_S
