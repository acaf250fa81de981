#!/usr/bin/env python3
"""A snapshot of what the kvcal CLI shows its users, to diff before and after a refactor.

Usage (from a checkout, with that checkout's kvcal first on the path):

    PYTHONPATH=$PWD .venv/bin/python scripts/cli_snapshot.py --out /tmp/snap-NAME
    diff -r tests/fixtures/cli-snapshot /tmp/snap-NAME

tests/fixtures/cli-snapshot/ is the snapshot of main, committed on its own whenever a change moves what
the CLI shows (the commit names the cases that changed); a refactor leaves it identical.

It writes, under --out:

* ``help/``: ``--help`` of the app, of every command group and every command (read from the
  Typer app, as tests/cli_corpus.py walks it), each from a fresh ``kvcal`` process with
  COLUMNS=100, NO_COLOR=1, TERM=dumb;
* ``outputs/``: for each command that prints or writes a machine-readable output (fit --json,
  every emit-config format, predict, profiles, plan, fleet, observe --json, export, compare's and
  history's Markdown, k8s-job, a simulated sweep's records), run on the committed fixtures
  (results/baselines/cpu-tiny, tests/fixtures) and on the corpus' simulated run: the exit code,
  stdout and the text files it wrote; ``stderr/`` holds the same runs' stderr (a change
  there is worth a look but is not part of the contract);
* ``corpus.tsv``: every case of the bad-input corpus (tests/cli_corpus.py, as
  tests/unit/cli/test_cli_corpus.py runs it) and every command's base invocation: the exit code and
  the first line of stderr (with the ``Error`` line when the first is typer's ``Usage:``).

What varies from run to run is masked: the temporary workspace ({WS}, {TMP}), the checkout
({REPO}) and its commit ({COMMIT}), the fake Prometheus' port ({PROM}), wall-clock times ({TIME}, {EPOCH}) and the run
record's schema version (kvcal.run/{N}; issue 41 excepts it). The corpus and the output runs go
in-process (kvcal.cli.app.main, the same entry point as the console script), in --jobs forked
workers; --via subprocess runs them through a fresh interpreter each instead (slow; to check
that in-process gives the same).

The fixtures, the corpus and its helpers are read from the checkout kvcal is imported from, so a
snapshot is of one tree throughout.
"""

from __future__ import annotations

import os

os.environ.update(COLUMNS="100", NO_COLOR="1", TERM="dumb", LINES="50")
for _name in ("FORCE_COLOR", "KVCAL_DEBUG", "TERMINAL_WIDTH"):
    os.environ.pop(_name, None)

import argparse  # noqa: E402 - the environment above must be set before rich or typer is imported
import io  # noqa: E402
import logging  # noqa: E402
import multiprocessing  # noqa: E402
import queue  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import warnings  # noqa: E402
from collections import Counter  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import kvcal  # noqa: E402

REPO = Path(kvcal.__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # cli_corpus, fake_prometheus: the same tree's

import cli_corpus  # noqa: E402

from kvcal.cli.app import app, main  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures"
TINY = REPO / "results" / "baselines" / "cpu-tiny"
CASE_TIMEOUT_S = 300
TEXT_SUFFIXES = {".json", ".jsonl", ".yaml", ".yml", ".md", ".csv", ".txt", ".log", ".env"}
SUBPROCESS_MAIN = "import sys; from kvcal.cli.app import main; sys.exit(main())"
PROMETHEUS_ERROR = None


# --- what varies from run to run ------------------------------------------------------------------

TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2})?")
EPOCH = re.compile(r"(?<![\d.])1[6-9]\d{8}\.\d{3,}(?!\d)")  # time.time() with its fraction: not a byte count
RUN_SCHEMA = re.compile(r"kvcal\.run/\d+")


@dataclass
class Masks:
    """Literal strings to replace (longest first), then the patterns above."""

    literals: dict[str, str] = field(default_factory=dict)

    def apply(self, text: str) -> str:
        for literal in sorted(self.literals, key=len, reverse=True):
            text = text.replace(literal, self.literals[literal])
        text = TIME.sub("{TIME}", text)
        text = EPOCH.sub("{EPOCH}", text)
        return RUN_SCHEMA.sub("kvcal.run/{N}", text)


def _checkout_commit() -> str | None:
    """The commit provenance stamps on a run (kvcal.files.provenance.git_commit): it differs from tree to tree."""
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None if done.returncode == 0 else None


def base_masks(tmp: Path) -> Masks:
    masks = Masks({str(REPO): "{REPO}", str(tmp): "{TMP}"})
    commit = _checkout_commit()
    if commit:
        masks.literals[commit] = "{COMMIT}"
    real = str(tmp.resolve())
    if real != str(tmp):
        masks.literals[real] = "{TMP}"
    return masks


# --- running the CLI ----------------------------------------------------------------------------


class CaseTimeout(BaseException):
    """Raised by the alarm: a BaseException, so kvcal's boundary does not report it as its own error."""


def _on_alarm(signum, frame):
    raise CaseTimeout


def _fresh_process_state() -> None:
    """What a new process would start with: logging unconfigured, every 'shown once' warning forgotten."""
    logging.root.handlers.clear()
    warnings.filterwarnings("default", message="kvcal-snapshot: bump the registries")  # forgets shown warnings
    warnings.filters.pop(0)


def run_in_process(args: list[str], cwd: Path) -> tuple[int, str, str]:
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True)
    err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="", write_through=True)
    saved = sys.stdin, sys.stdout, sys.stderr, sys.argv
    here = os.getcwd()
    _fresh_process_state()
    sys.stdin, sys.stdout, sys.stderr = io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8"), out, err
    sys.argv = ["kvcal", *args]  # provenance records the command line from it, as the console script's would
    os.chdir(cwd)
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(CASE_TIMEOUT_S)
    try:
        code = main(list(args))
    except CaseTimeout:
        code = -1
    finally:
        signal.alarm(0)
        sys.stdin, sys.stdout, sys.stderr, sys.argv = saved
        os.chdir(here)
    text = [stream.buffer.getvalue().decode("utf-8", "replace") for stream in (out, err)]
    return code, text[0], text[1]


def run_subprocess(args: list[str], cwd: Path) -> tuple[int, str, str]:
    try:
        done = subprocess.run([sys.executable, "-c", SUBPROCESS_MAIN, *args], cwd=cwd, capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=CASE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return -1, "", ""
    return done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace")


RUNNERS = {"inprocess": run_in_process, "subprocess": run_subprocess}


# --- help ---------------------------------------------------------------------------------------


def help_paths() -> list[tuple[str, ...]]:
    """The app, each group and each command, as argument prefixes."""
    paths: list[tuple[str, ...]] = [()]

    def walk(typer_app, prefix: tuple[str, ...]) -> None:
        for group in typer_app.registered_groups:
            sub = group.typer_instance
            path = (*prefix, group.name or sub.info.name)
            paths.append(path)
            walk(sub, path)

    walk(app, ())
    paths += [command.path for command in cli_corpus.commands(app)]
    return sorted(set(paths))


def snapshot_help(out: Path, tmp: Path, jobs: int) -> None:
    masks = base_masks(tmp)
    calls = [(path, [*path, "--help"]) for path in help_paths()] + [(("--version",), ["--version"])]
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(lambda call: (call[0], run_subprocess(call[1], tmp)), calls))
    for path, (code, stdout, stderr) in done:
        name = "-".join(("kvcal", *path)).replace("--", "")
        text = f"exit {code}\n--- stdout\n{stdout}--- stderr\n{stderr}"
        (out / "help" / f"{name}.txt").write_text(masks.apply(text))


# --- outputs on the fixtures --------------------------------------------------------------------

EMIT_FORMATS = ("plugin", "helm", "affinity", "costmodel", "vllm", "env", "json")
HF_CONFIGS = sorted(p.name for p in (FIXTURES / "hf_configs").glob("*.json"))


def output_cases() -> list[tuple[str, list[str], list[str]]]:
    """(name, arguments, files it writes to keep); {tiny} is a copy of cpu-tiny, {fx} the fixtures, {ws} the case."""
    values = "{fx}/values/router-p2p.yaml"
    cases: list[tuple[str, list[str], list[str]]] = [
        ("fit-tiny-json", ["fit", "{tiny}", "--json"], []),
        ("fit-good-json", ["fit", "{run}", "--json", "--resamples", "200"], []),
        ("fit-tiny-output", ["fit", "{tiny}", "-o", "{ws}/tiny.fit.json"], ["tiny.fit.json"]),
        ("export-tiny", ["export", "{tiny}", "-o", "-"], []),
        ("export-good", ["export", "{run}", "-o", "{ws}/good.csv"], ["good.csv"]),
        ("compare-tiny-good", ["compare", "{tiny}/fit.json", "{run}", "--seed", "1"], []),
        ("compare-tiny-good-force", ["compare", "{tiny}/fit.json", "{run}", "--seed", "1", "--force"], []),
        ("compare-good-good", ["compare", "{fit}", "{run}", "--seed", "1", "--deployed", "1024", "--markdown",
                               "{ws}/cmp.md"], ["cmp.md"]),
        ("compare-tiny-tiny", ["compare", "{tiny}", "{tiny}/fit.json", "--values", values], []),
        ("history-tiny-good", ["history", "{tiny}", "{fit}", "--markdown", "{ws}/history.md"], ["history.md"]),
        ("plot-tiny", ["plot", "{tiny}/fit.json", "-o", "{ws}/tiny.png"], []),
        ("report-tiny", ["report", "{tiny}", "-o", "{ws}/tiny.html"], []),
        ("predict-llama-h100", ["predict", "--model", "llama-3.1-8b", "--hardware", "h100", "--json"], []),
        ("plan-tiny", ["plan", "--from", "{tiny}", "--campaigns", "1", "--json"], []),
        ("plan-good", ["plan", "--from", "{fit}", "--campaigns", "1", "--json"], []),
        ("fleet-tiny", ["fleet", "{tiny}/fit.json", "--workload", "{workload}", "--pods", "2",
                        "--thresholds", "256,1024",
                        "--seeds", "1", "--json"], []),
        ("observe-json", ["observe", "--prometheus", "{prom}", "--since", "15m", "--json"], []),
        ("observe-fit-json", ["observe", "--prometheus", "{prom}", "--since", "15m", "--fit", "{tiny}", "--json"], []),
        ("profiles-list-json", ["profiles", "list", "--json"], []),
        ("profiles-show-h100-json", ["profiles", "show", "h100", "--json"], []),
        ("profiles-show-llama-json", ["profiles", "show", "llama-3.1-8b", "--json"], []),
        ("k8s-job", ["k8s-job", "--image", "img", "--producer-url", "http://10.0.0.1:8000", "--consumer-url",
                     "http://10.0.0.2:8000", "--model", "m", "-o", "{ws}/job.yaml"], ["job.yaml"]),
        ("sweep-sim", ["sweep", "--engine", "sim", "--prefix-lengths", "256,512", "--reps", "1", "--output-dir",
                       "{ws}/results", "--name", "snap"],
         ["results/snap/run.json", "results/snap/probes.jsonl", "results/snap/summary.csv"]),
        ("sweep-sim-dry-run", ["sweep", "--engine", "sim", "--prefix-lengths", "256,512", "--reps", "1",
                               "--output-dir", "{ws}/results", "--name", "dry", "--dry-run"], []),
    ]
    for source, where in (("tiny", "{tiny}"), ("good", "{fit}")):
        for fmt in EMIT_FORMATS:
            extra = ["--values", values] if fmt == "helm" else []
            cases.append((f"emit-{source}-{fmt}", ["emit-config", where, "--format", fmt, *extra], []))
        cases.append((f"emit-{source}-vllm-nixl", ["emit-config", where, "--format", "vllm", "--transport",
                                                   "nixl-pd"], []))
        cases.append((f"emit-{source}-json-upper", ["emit-config", where, "--format", "json", "--rule", "upper"], []))
        cases.append((f"emit-{source}-helm-diff", ["emit-config", where, "--format", "helm", "--values", values,
                                                   "--diff"], []))
        # remaining-work routing (issue 49): a budget that leaves a band on each run; tiny records no max model length
        budget = ["--ttft-penalty-ms", "100" if source == "tiny" else "1000"]
        longest = ["--max-model-len", "4096"] if source == "tiny" else []
        cases.append((f"emit-{source}-work-range", ["emit-config", where, "--format", "work-range", *budget, *longest],
                      []))
        cases.append((f"emit-{source}-json-work-range", ["emit-config", where, "--format", "json", *budget], []))
        cases.append((f"emit-{source}-helm-remaining-work", ["emit-config", where, "--format", "helm", "--values",
                                                             "{fx}/upstream/remaining-work-values.yaml", *longest,
                                                             "--diff"], []))
    glm = ["emit-config", "{fx}/llmd/glm-5.2-h200-upstream-tier.log", "--block-size", "64"]
    cases.append(("emit-glm-work-range", [*glm, "--format", "work-range", "--ttft-penalty-ms", "3500",
                                          "--max-model-len", "120000"], []))
    cases.append(("emit-glm-work-range-empty", [*glm, "--format", "work-range", "--ttft-penalty-ms", "1000",
                                                "--max-model-len", "120000"], []))
    for config in HF_CONFIGS:
        stem = config.removesuffix(".json")
        cases.append((f"profiles-from-config-{stem}", ["profiles", "from-config", f"{{fx}}/hf_configs/{config}",
                                                       "--json"], []))
        cases.append((f"predict-config-{stem}", ["predict", "-m", f"{{fx}}/hf_configs/{config}", "--hardware",
                                                 "h100", "--json"], []))
    return cases


def fill(text: str, ws: Path) -> str:
    text = text.replace("{tiny}", str(ws / "cpu-tiny")).replace("{fx}", str(FIXTURES))
    if "{prom}" in text:
        from fake_prometheus import shared

        text = text.replace("{prom}", shared().url())
    for key, rel in cli_corpus.PLACES.items():
        text = text.replace("{" + key + "}", str(ws / rel))
    return text.replace("{ws}", str(ws))


# --- the workers --------------------------------------------------------------------------------

STATE: dict[str, object] = {}


def _workspace(index: int) -> Path:
    ws = Path(STATE["tmp"]) / f"w{index}" / "ws"  # type: ignore[arg-type]
    shutil.copytree(Path(STATE["master"]), ws, symlinks=True)  # type: ignore[arg-type]
    return ws


def _masks(ws: Path) -> Masks:
    masks = base_masks(Path(STATE["tmp"]))  # type: ignore[arg-type]
    masks.literals.update({str(ws): "{WS}", str(STATE["master"]): "{WS}"})
    if "fake_prometheus" in sys.modules:
        masks.literals[sys.modules["fake_prometheus"].shared().url()] = "{PROM}"
    return masks


def _first_lines(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if not lines:
        return ""
    shown = [lines[0]]
    if lines[0].startswith("Usage:"):
        shown += [line for line in lines[1:] if line.startswith(("Error", "│ Error", "╭", "Invalid"))][:1]
    return " | ".join(shown)


def case_ids(cases: list) -> list[str]:
    """Each case's id, numbered from 0 where several share one (as pytest numbers repeated ids)."""
    ids = [case.id for case in cases]
    counts = Counter(ids)
    seen: Counter[str] = Counter()
    numbered = []
    for cid in ids:
        numbered.append(f"{cid}{seen[cid]}" if counts[cid] > 1 else cid)
        seen[cid] += 1
    return numbered


def corpus_worker(index: int) -> tuple[str, str]:
    case = STATE["cases"][index]  # type: ignore[index]
    cid = STATE["case_ids"][index]  # type: ignore[index]
    if case.needs_dropped_dac and os.geteuid() == 0:
        return cid, f"{cid}\t{case.cls}\tskipped (root reads unreadable files)\t"
    ws = _workspace(index)
    try:
        args = case.prepare(ws)
        code, _out, err = RUNNERS[STATE["via"]](args, ws)  # type: ignore[index]
        line = f"{cid}\t{case.cls}\texit {code}\t{_first_lines(err)}"
        return cid, _masks(ws).apply(line).replace("\n", "\\n")
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def base_worker(index: int) -> tuple[str, str]:
    command = STATE["commands"][index]  # type: ignore[index]
    ws = _workspace(100_000 + index)
    try:
        args = cli_corpus.render(command, cli_corpus.base_for(command), ws)
        code, _out, err = RUNNERS[STATE["via"]](args, ws)  # type: ignore[index]
        cid = "base/" + command.name.replace(" ", "-")
        return cid, _masks(ws).apply(f"{cid}\tbase\texit {code}\t{_first_lines(err)}")
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def output_worker(index: int) -> tuple[str, str, str]:
    name, args, keep = STATE["outputs"][index]  # type: ignore[index]
    ws = _workspace(200_000 + index)
    try:
        shutil.copytree(TINY, ws / "cpu-tiny")
        filled = [fill(a, ws) for a in args]
        code, out, err = RUNNERS[STATE["via"]](filled, ws)  # type: ignore[index]
        masks = _masks(ws)
        text = [f"$ kvcal {' '.join(args)}\nexit {code}\n--- stdout\n{out}"]
        for rel in keep:
            path = ws / rel
            body = path.read_text(errors="replace") if path.is_file() else "(not written)\n"
            text.append(f"--- file {rel}\n{body}")
        return name, masks.apply("".join(text)), masks.apply(err)
    finally:
        shutil.rmtree(ws.parent, ignore_errors=True)


def _serve(worker, tasks, results) -> None:
    while (index := tasks.get()) is not None:
        try:
            results.put((index, True, worker(index)))
        except Exception as err:  # the parent stops the snapshot with it
            results.put((index, False, f"{type(err).__name__}: {err}"))


def _pool_map(jobs: int, worker, count: int) -> list:
    """worker(0..count-1) in ``jobs`` forked processes. Not multiprocessing.Pool: its workers are daemons, and a
    daemon may not start processes of its own (kvcal fleet does)."""
    if jobs <= 1 or count <= 1:
        return [worker(i) for i in range(count)]
    context = multiprocessing.get_context("fork")
    tasks, results = context.Queue(), context.Queue()
    for index in [*range(count), *[None] * jobs]:
        tasks.put(index)
    processes = [context.Process(target=_serve, args=(worker, tasks, results)) for _ in range(jobs)]
    for process in processes:
        process.start()
    done: dict[int, object] = {}
    try:
        while len(done) < count:
            try:
                index, ok, value = results.get(timeout=30)
            except queue.Empty:
                dead = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                if dead:
                    raise SystemExit(f"cli_snapshot: a worker died (exit {dead[0]})") from None
                continue
            if not ok:
                raise SystemExit(f"cli_snapshot: case {index} failed: {value}")
            done[index] = value
    finally:
        for process in processes:
            process.join(timeout=5)
            if process.is_alive():
                process.kill()
    return [done[i] for i in range(count)]


# --- main ---------------------------------------------------------------------------------------


def build_master(tmp: Path) -> Path:
    """The corpus' workspace (a simulated run, its fit, the fixtures it copies), built once and copied per case."""
    def quiet_main(args: list[str]) -> int:
        code, _out, err = run_in_process(args, tmp)
        if code != 0:
            sys.stderr.write(err)
        return code

    return cli_corpus.build_workspace(tmp / "master" / "ws", quiet_main)


PARTS = ("help", "outputs", "corpus")


def write_snapshot(out: Path, jobs: int, via: str, parts: tuple[str, ...] = PARTS) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="kvcal-snap-"))
    try:
        if "help" in parts:
            (out / "help").mkdir(parents=True)
            snapshot_help(out, tmp, jobs)
        cases = cli_corpus.generated_cases(app)
        STATE.update(tmp=str(tmp), master=str(build_master(tmp)), via=via, cases=cases, case_ids=case_ids(cases),
                     commands=cli_corpus.commands(app), outputs=output_cases())
        if "outputs" in parts:
            (out / "outputs").mkdir(parents=True)
            (out / "stderr").mkdir(parents=True)
            for name, text, err in _pool_map(jobs, output_worker, len(STATE["outputs"])):  # type: ignore[arg-type]
                (out / "outputs" / f"{name}.txt").write_text(text)
                (out / "stderr" / f"{name}.txt").write_text(err)
        if "corpus" in parts:
            rows = _pool_map(jobs, base_worker, len(STATE["commands"]))  # type: ignore[arg-type]
            rows += _pool_map(jobs, corpus_worker, len(cases))
            lines = [line for _cid, line in sorted(rows)]
            (out / "corpus.tsv").write_text("id\tclass\texit\tfirst stderr line\n" + "\n".join(lines) + "\n")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main_args() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="Folder to write the snapshot into (created).")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="Worker processes (default: CPUs).")
    parser.add_argument("--via", choices=sorted(RUNNERS), default="inprocess",
                        help="How outputs and corpus cases run (help always runs in a fresh process).")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"Which parts to take, comma-separated (default: all of {','.join(PARTS)}).")
    options = parser.parse_args()
    if options.out.exists() and any(options.out.iterdir()):
        parser.error(f"{options.out} exists and is not empty")
    parts = tuple(options.parts.split(","))
    if not set(parts) <= set(PARTS):
        parser.error(f"--parts: choose from {','.join(PARTS)}")
    options.out.mkdir(parents=True, exist_ok=True)
    write_snapshot(options.out, options.jobs, options.via, parts)
    print(f"snapshot of {REPO} written to {options.out}")


if __name__ == "__main__":
    main_args()
