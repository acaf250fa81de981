"""How long and how much memory ``kvcal observe`` takes over a long window (issue 55: linear in samples, a stated bound).

A fake Prometheus (this script run with ``--serve``, in its own process so that its CPU is
not kvcal's) serves N pods of vLLM 0.33 series scraped every 15 s: the prompt-token
counters by source and cached by source, the P2P tier's read bytes, the TTFT histogram's
23 buckets, the waiting queue, request successes by finished reason, and a ``_created``
series for every counter, as prometheus_client exports them. Every pod restarts once in
the middle of the window (its counters begin again at 0 and its ``_created`` moves), and
a second restart lands between two scrapes with the count already past the old one
(only ``_created`` shows it). 46 series a pod, 178,560 samples each over 31 days.

The installed ``kvcal observe --json`` runs as a child over the window; the script prints its
wall time, its CPU time and its peak resident memory (``wait4``'s rusage: kvcal's own, not
the server's), the samples it read, and checks its figures against what the pods counted
(pull share, request rate and the TTFT count exactly).

    PYTHONPATH=. .venv/bin/python benchmarks/observe_month.py --pods 1 --days 31

``--real`` serves the same series from Debian's Prometheus instead (scripts/prometheus_env.sh
installs it), backfilled with ``promtool tsdb create-blocks-from openmetrics``: the spans'
edges as a real server draws them (closed ranges in 2.x). promtool reads its whole input
once per 2-hour block, so use it for a few days (2 days: half a minute); a month takes hours.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # the fake's query parsing lives with the tests
from fake_prometheus import _MATCHER, _QUERY, _matches  # noqa: E402
from prometheus_server import free_port, get_json  # noqa: E402

STEP_S = 15.0
END = 1_796_000_000.0  # a fixed instant (2026-11-30): the window ends here
LOOKBACK_S = 600.0  # the server holds samples this far before the window (kvcal reaches back 5 minutes)
BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
           80.0, 160.0, 640.0, 2560.0, float("inf"))  # vLLM's TTFT buckets (../shared/reference/llm-d-upstream.md)
PER_SCRAPE = {"local_compute": 60, "local_cache_hit": 25, "external_kv_transfer": 15}
P2P_PER_SCRAPE = 10
REQUESTS_PER_SCRAPE = 4  # 2 finish by length, 1 by stop, 1 aborted; each observes one TTFT of 0.3 s
KV_BYTES = 2048
BOUND_CPU_S = (4.0, 10.0)  # start-up, and per pod-month: the bound docs/observe.md states
BOUND_RSS_MIB = (250.0, 150.0)


def _counter(k: np.ndarray, per: float, restart: int, silent: int) -> np.ndarray:
    """A counter at scrape k: ``per`` a scrape from a long-running start, from 0 after ``restart`` and ``silent``."""
    value = per * (k + 100_000.0)
    value = np.where(k >= restart, per * (k - restart + 1), value)
    # the second restart: between two scrapes, the new process counted past the old total
    return np.where(k >= silent, per * (k - silent + 1) + per * (silent - restart + 5), value)


def pod_series(pod: int, start: float, end: float) -> tuple[np.ndarray, list[tuple[dict, np.ndarray]]]:
    """One pod's scrape times and its series (labels with __name__, values at those times)."""
    times = np.arange(start - LOOKBACK_S, end + STEP_S / 2, STEP_S) + 0.125 * pod
    k = np.arange(times.size, dtype=float)
    restart, silent = int(times.size * 0.4), int(times.size * 0.7)
    base = {"job": "vllm", "engine": "0", "model_name": "m", "pod": f"pod-{pod}", "instance": f"10.0.0.{pod}:8200"}
    created_at = np.where(k >= silent, times[silent] - 1, np.where(k >= restart, times[restart] - 1, start - 9e5))
    out: list[tuple[dict, np.ndarray]] = []

    def counter(name: str, extra: dict, per: float) -> None:
        out.append(({"__name__": name, **base, **extra}, _counter(k, per, restart, silent)))
        family = name.removesuffix("_total").removesuffix("_bucket")
        if name.endswith("_bucket") and extra.get("le") != "+Inf":
            return  # one _created per histogram (prometheus_client), kept with its +Inf bucket
        created = {key: value for key, value in extra.items() if key != "le"}
        out.append(({"__name__": f"{family}_created", **base, **created}, created_at))

    counter("vllm:prompt_tokens_total", {}, sum(PER_SCRAPE.values()))
    for source, per in PER_SCRAPE.items():
        counter("vllm:prompt_tokens_by_source_total", {"source": source}, per)
    for source, per in (("device", 20), ("host", 5), ("p2p", P2P_PER_SCRAPE)):
        counter("vllm:prompt_tokens_cached_by_source_total", {"source": source}, per)
    counter("vllm:kv_offload_tiering_read_bytes_total", {"tier": "1:p2p"}, P2P_PER_SCRAPE * KV_BYTES)
    counter("vllm:kv_offload_tiering_read_bytes_total", {"tier": "0:cpu"}, 999)
    for reason, per in (("length", 2), ("stop", 1), ("abort", 1)):
        counter("vllm:request_success_total", {"finished_reason": reason}, per)
    for le in BUCKETS:
        counter("vllm:time_to_first_token_seconds_bucket", {"le": "+Inf" if le == float("inf") else repr(le)},
                REQUESTS_PER_SCRAPE if le >= 0.5 else 0)
    out.append(({"__name__": "vllm:num_requests_waiting", **base}, (k % 5).astype(float)))
    return times, out


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        params = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
        body = self.server.answer(params.get("query", ""), float(params.get("time", END)))  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class MonthServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pods: int, start: float, end: float) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pods = [pod_series(p, start, end) for p in range(pods)]

    def answer(self, query: str, at: float) -> bytes:
        if query == "vector(1)":
            return json.dumps({"status": "success", "data": {"resultType": "vector",
                                                             "result": [{"metric": {}, "value": [at, "1"]}]}}).encode()
        found = _QUERY.match(query)
        if not found:
            return json.dumps({"status": "error", "errorType": "bad_data", "error": "cannot parse"}).encode()
        matchers = _MATCHER.findall(found.group(1))
        since = at - float(found.group(2))
        parts = []
        for times, series in self.pods:
            low, high = np.searchsorted(times, since, "right"), np.searchsorted(times, at, "right")
            stamps = [f'[{t:.3f},"' for t in times[low:high].tolist()]
            for labels, values in series:
                if high > low and _matches(labels, matchers):
                    samples = ",".join(s + f'{v:.17g}"]' for s, v in zip(stamps, values[low:high].tolist()))
                    parts.append(f'{{"metric":{json.dumps(labels)},"values":[{samples}]}}')
        return ('{"status":"success","data":{"resultType":"matrix","result":[' + ",".join(parts) + "]}}").encode()


def serve(pods: int, start: float, end: float) -> None:
    server = MonthServer(pods, start, end)
    print(server.server_address[1], flush=True)
    server.serve_forever()


def _run_kvcal(kvcal: str, url: str, start: float, end: float) -> tuple[dict, float, float, float]:
    """kvcal observe's JSON, its wall and CPU seconds and its peak RSS in MiB (the child's own rusage, from wait4)."""
    command = [kvcal, "observe", "--prometheus", url, "--start", f"{start:.3f}", "--end", f"{end:.3f}", "--json"]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        wall = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - wall
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode != 0:
            sys.exit(f"kvcal observe exited {child.returncode}: {err.read().decode()[-2000:]}")
        return json.loads(out.read()), wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def scrapes_counted(start: float, end: float) -> float:
    """What one pod's counters counted over the window, in scrapes: one a scrape, plus what the process that
    replaced the old one between two scrapes (the silent restart) had counted before its first scrape."""
    times, _ = pod_series(0, start, end)
    inside = int(np.count_nonzero((times > start) & (times <= end)))
    restart, silent = int(times.size * 0.4), int(times.size * 0.7)
    return inside + (silent - restart + 5)


def _check(result: dict, pods: int, start: float, end: float) -> list[str]:
    """What the pods counted against what kvcal observe says (the counters' arithmetic, restarts included)."""
    fleet = result["fleet"]
    scrapes = scrapes_counted(start, end)
    problems = []
    expected = {"pull_share": P2P_PER_SCRAPE / sum(PER_SCRAPE.values()),
                "requests_per_s": pods * REQUESTS_PER_SCRAPE * scrapes / (end - start),
                "bytes_per_pulled_token": float(KV_BYTES)}
    for name, value in expected.items():
        got = fleet[name]["value"]
        if got is None or abs(got - value) > 1e-9 * max(1.0, value):
            problems.append(f"{name}: {got} against {value}")
    requests = fleet["ttft_p50_ms"]["samples"]
    if requests != pods * REQUESTS_PER_SCRAPE * scrapes:
        problems.append(f"TTFT observations {requests} against {pods * REQUESTS_PER_SCRAPE * scrapes:.0f}")
    return problems


def write_openmetrics(pods: int, start: float, end: float, path: Path) -> None:
    """The same series as OpenMetrics text with timestamps, for ``promtool tsdb create-blocks-from openmetrics``."""
    with path.open("w") as out:
        families: dict[str, list[tuple[dict, np.ndarray, list[str]]]] = {}
        for pod in range(pods):
            times, series = pod_series(pod, start, end)
            stamps = [f"{t:.3f}" for t in times.tolist()]
            for labels, values in series:
                families.setdefault(labels["__name__"], []).append((labels, values, stamps))
        for name, members in families.items():  # each name its own untyped family: samples named as stored
            out.write(f"# TYPE {name} unknown\n")
            for labels, values, stamps in members:
                head = name + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__") + "} "
                out.writelines(f"{head}{v:.17g} {t}\n" for t, v in zip(stamps, values.tolist()))
        out.write("# EOF\n")


@contextmanager
def real_prometheus(pods: int, start: float, end: float) -> Iterator[str]:
    """Debian's Prometheus (scripts/prometheus_env.sh) on the series backfilled by promtool; its URL."""
    with tempfile.TemporaryDirectory() as folder:
        data, tsdb = Path(folder) / "data.om", Path(folder) / "tsdb"
        write_openmetrics(pods, start, end, data)
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", str(data), str(tsdb)], check=True,
                       stdout=subprocess.DEVNULL)
        data.unlink()
        (Path(folder) / "prometheus.yml").write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
        port = free_port()
        server = subprocess.Popen(["prometheus", f"--config.file={folder}/prometheus.yml", f"--storage.tsdb.path={tsdb}",
                                   "--storage.tsdb.retention.time=100y", f"--web.listen-address=127.0.0.1:{port}"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(120):
                try:
                    get_json(f"http://127.0.0.1:{port}/api/v1/query?query=vector(1)")
                    break
                except OSError:
                    time.sleep(0.5)
            yield f"http://127.0.0.1:{port}"
        finally:
            server.terminate()
            server.wait()


@contextmanager
def fake_prometheus(pods: int, days: float) -> Iterator[str]:
    """The fake of this script in its own process (its CPU is not kvcal's); its URL."""
    server = subprocess.Popen([sys.executable, __file__, "--serve", "--pods", str(pods), "--days", str(days)],
                              stdout=subprocess.PIPE, text=True)
    try:
        yield f"http://127.0.0.1:{int(server.stdout.readline())}"  # type: ignore[union-attr]
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=1)
    parser.add_argument("--days", type=float, default=31.0)
    parser.add_argument("--kvcal", default=str(Path(sys.executable).with_name("kvcal")),
                        help="the kvcal script to time (default: the installed one; another checkout's for a before)")
    parser.add_argument("--real", action="store_true",
                        help="serve the series from Debian's Prometheus, backfilled with promtool (slow to build)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    start = END - args.days * 86_400
    if args.serve:
        return serve(args.pods, start, END)
    serving = real_prometheus(args.pods, start, END) if args.real else fake_prometheus(args.pods, args.days)
    with serving as url:
        result, wall, cpu, rss = _run_kvcal(args.kvcal, url, start, END)
    samples = 46 * args.pods * (args.days * 86_400 / STEP_S)
    problems = _check(result, args.pods, start, END)
    months = args.pods * args.days / 31
    cpu_bound, rss_bound = (BOUND_CPU_S[0] + BOUND_CPU_S[1] * months, BOUND_RSS_MIB[0] + BOUND_RSS_MIB[1] * months)
    met = "met" if cpu <= cpu_bound and rss <= rss_bound else "MISSED"
    print(f"{'Prometheus' if args.real else 'fake'}: {args.pods} pods, {args.days:g} days at {STEP_S:g} s, "
          f"{samples:,.0f} samples: wall {wall:.1f} s, "
          f"kvcal cpu {cpu:.1f} s ({cpu / samples * 1e6:.2f} us a sample), peak RSS {rss:,.0f} MiB; bound "
          f"(cpu {cpu_bound:.0f} s, RSS {rss_bound:,.0f} MiB) {met}; figures "
          + ("exact" if not problems else "WRONG: " + "; ".join(problems)))


if __name__ == "__main__":
    main()
