"""A generated corpus of bad inputs for every kvcal command, by class.

The commands and their parameters are read from the Typer app itself (names, flags,
types, which are required), so a command or flag added later is covered without
editing this file. Each case is one valid invocation of a command (its *base*) with
exactly one ingredient made bad:

* an unknown flag, or one required parameter left out;
* a number flag given text, a fraction for an integer, nan or inf;
* a path the command reads, replaced by one of the FILE_KINDS (missing, empty, binary,
  not UTF-8, a directory, a FIFO, unreadable, a dangling link, a path under a file,
  ragged or overflowing tables, truncated or foreign JSON, hostile YAML, damaged run
  folders...);
* a path the command writes, pointed at one of its inputs, at the run's own records,
  at a directory or under a file;
* the TARGETED cases: values that are bad for one flag only (run names that leave the
  output folder, empty or unaligned length lists, URLs, flags of another engine,
  --resume with changed flags...).

Every case must exit non-zero (but not with the internal-error code 70), print a few
lines at most and no traceback, finish quickly, and leave every file that existed
before byte-identical. ``Case.prepare(workspace)`` builds what the case needs in its own
copy of the workspace and returns the argument list.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import typer

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MAX_LINES = 8
INTERNAL = 70


# --- the app's commands ------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    name: str
    flag: str | None          # None: a positional argument
    kind: str                 # path | int | float | bool | str
    required: bool
    multiple: bool
    output: bool              # a path the command writes


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Param, ...]

    @property
    def name(self) -> str:
        return " ".join(self.path)

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)


OUTPUT_NAMES = {"output", "markdown", "plot", "output_dir", "html", "dashboard"}


def _kind(annotation: str) -> str:
    text = str(annotation)
    for kind, marks in (("path", ("Path",)), ("bool", ("bool",)), ("float", ("float",)), ("int", ("int",))):
        if any(m in text for m in marks):
            return kind
    return "str"


def _command(path: tuple[str, ...], callback: Callable) -> Command:
    params = []
    for p in inspect.signature(callback).parameters.values():
        info = p.default
        decls = tuple(getattr(info, "param_decls", None) or ())
        is_argument = type(info).__name__ == "ArgumentInfo"
        longs = [d for d in decls if d.startswith("--")] or [d for d in decls if d.startswith("-")]
        flag = None if is_argument else (longs[0] if longs else "--" + p.name.replace("_", "-"))
        annotation = str(p.annotation)
        params.append(Param(
            name=p.name, flag=flag, kind=_kind(annotation), required=getattr(info, "default", None) is ...,
            multiple="list[" in annotation or "List[" in annotation, output=p.name in OUTPUT_NAMES,
        ))
    return Command(path, tuple(params))


def commands(app: typer.Typer, prefix: tuple[str, ...] = ()) -> list[Command]:
    """Every leaf command of the app, with its parameters, in registration order."""
    found = []
    for info in app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        found.append(_command((*prefix, name), info.callback))
    for group in app.registered_groups:
        sub = group.typer_instance
        found += commands(sub, (*prefix, group.name or sub.info.name))
    return found


# --- the workspace: good inputs every base uses -------------------------------------------------


def build_workspace(root: Path, run_cli: Callable[[list[str]], int]) -> Path:
    """Good inputs: a simulated run folder with fit.json, a probe CSV, an llm-d table, values, a campaign, a HF config."""
    root.mkdir(parents=True, exist_ok=True)
    results = root / "results"
    code = run_cli(["sweep", "--engine", "sim", "--prefix-lengths", "256,512,1024,2048", "--reps", "2",
                    "--output-dir", str(results), "--name", "good"])
    assert code == 0, "the simulated sweep of the corpus workspace failed"
    assert run_cli(["fit", str(results / "good"), "--resamples", "200"]) == 0
    assert run_cli(["export", str(results / "good"), "-o", str(root / "probes.csv")]) == 0
    shutil.copy(FIXTURES / "llmd" / "gpt-oss-120b-job.log", root / "job.log")
    shutil.copy(FIXTURES / "values" / "router-p2p.yaml", root / "values.yaml")
    shutil.copy(FIXTURES / "hf_configs" / "llama-3.1-8b.json", root / "config.json")
    (root / "campaign.yaml").write_text("engine: sim\nprefix-lengths: [256, 512]\nreps: 1\n")
    (root / "workload.yaml").write_text(FLEET_WORKLOAD)
    (root / "afile").write_text("a plain file\n")
    (root / "adir").mkdir()
    return root


FLEET_WORKLOAD = """duration_s: 20
warmup_s: 5
arrival: {rate: 1}
sessions: {system_prompt_tokens: 512, turns: 2, input_tokens: 200, output_tokens: 4}
"""

PLACES = {
    "workload": "workload.yaml",
    "run": "results/good", "fit": "results/good/fit.json", "csv": "probes.csv", "table": "job.log",
    "values": "values.yaml", "campaign": "campaign.yaml", "hfconfig": "config.json",
}

# One valid invocation per command, by parameter name; "{run}" etc. name PLACES in the workspace.
BASES: dict[str, dict[str, object]] = {
    "sweep": {"engine": "sim", "prefix_lengths": "256,512", "reps": "1", "output_dir": "{ws}/results", "name": "new"},
    "export": {"run": "{run}", "output": "{ws}/out.csv"},
    "fit": {"input": "{run}", "output": "{ws}/out.fit.json", "resamples": "0"},
    "plot": {"input": "{fit}", "output": "{ws}/out.png"},
    "emit-config": {"input_path": "{fit}"},
    "compare": {"baseline": "{fit}", "current": "{run}", "seed": "1"},
    "history": {"inputs": ["{run}", "{fit}"]},
    "report": {"inputs": ["{run}"], "output": "{ws}/out.html"},
    "predict": {"model": "llama-3.1-8b", "hardware": "h100"},
    "plan": {"source": "{fit}", "campaigns": "1"},
    "fleet": {"fit_path": "{fit}", "workload": "{workload}", "pods": "2", "thresholds": "256,1024", "seeds": "1"},
    "observe": {"prometheus": "{prom}", "since": "15m"},  # a fake Prometheus in this process (fake_prometheus.py)
    "profiles list": {},
    "profiles show": {"name": "h100"},
    "profiles from-config": {"file": "{hfconfig}"},
    "k8s-job": {"image": "img", "producer_url": "http://10.0.0.1:8000", "consumer_url": "http://10.0.0.2:8000",
                "model": "m", "output": "{ws}/job.yaml"},
}

# Where a path parameter is exercised with the good file of this kind when it is not in the base.
GOOD_FOR_KIND = {"path": "{csv}"}


def base_for(command: Command) -> dict[str, object]:
    """The command's base, or one filled in from its parameter types when it has none (a new command)."""
    if command.name in BASES:
        return dict(BASES[command.name])
    filler = {"path": "{run}", "int": "1", "float": "1", "str": "x", "bool": True}
    return {p.name: ([filler[p.kind]] if p.multiple else filler[p.kind]) for p in command.params if p.required}


def render(command: Command, values: dict[str, object], ws: Path) -> list[str]:
    """Argument list: the command path, positional arguments in order, then options."""
    def fill(text: object) -> str:
        out = str(text).replace("{ws}", str(ws))
        if "{prom}" in out:
            from fake_prometheus import shared

            out = out.replace("{prom}", shared().url())
        for key, rel in PLACES.items():
            out = out.replace("{" + key + "}", str(ws / rel))
        return out

    args: list[str] = list(command.path)
    for p in command.params:
        if p.flag is None and values.get(p.name) is not None:
            value = values[p.name]
            args += [fill(v) for v in (value if isinstance(value, list) else [value])]
    for p in command.params:
        if p.flag is None or p.name not in values:
            continue
        value = values[p.name]
        if value is None:
            continue
        if p.kind == "bool":
            if value:
                args.append(p.flag)
            continue
        for v in (value if isinstance(value, list) else [value]):
            args += [p.flag, fill(v)]
    args += [fill(v) for v in values.get("__extra__", [])]  # type: ignore[union-attr]
    return args


# --- bad files, by kind ---------------------------------------------------------------------------

BILLION_LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]\n" for i in range(9))


def _write(path: Path, data: bytes | str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


def _damaged_run(ws: Path, name: str, edit: Callable[[Path], None]) -> Path:
    """A copy of the good run with ``edit`` applied and no fit.json (so every reader must read the damage)."""
    target = ws / "damaged" / name
    shutil.copytree(ws / PLACES["run"], target, symlinks=True)
    _unlink(target / "fit.json")
    edit(target)
    return target


def _good_fit_text(ws: Path) -> str:
    return (ws / PLACES["fit"]).read_text()


FILE_KINDS: dict[str, Callable[[Path], Path]] = {
    "missing": lambda ws: ws / "no-such-file",
    "empty": lambda ws: _write(ws / "bad" / "empty.csv", b""),
    "binary": lambda ws: _write(ws / "bad" / "binary.bin", bytes(range(256)) * 8),
    "not-utf8": lambda ws: _write(ws / "bad" / "latin1.csv", "prefix_tokens,leg,ttft_ms\n256,recompute,1\n# caf\xe9\n".encode("latin-1") + b"\xff\xfe\n"),
    "empty-dir": lambda ws: (ws / "bad" / "emptydir").mkdir(parents=True) or ws / "bad" / "emptydir",
    "fifo": lambda ws: (ws / "bad").mkdir(exist_ok=True) or os.mkfifo(ws / "bad" / "fifo") or ws / "bad" / "fifo",
    "unreadable": lambda ws: _chmod(_write(ws / "bad" / "unreadable.csv", (ws / PLACES["csv"]).read_bytes()), 0),
    "dangling-link": lambda ws: _symlink(ws / "bad" / "dangling", ws / "nowhere"),
    "under-a-file": lambda ws: ws / "afile" / "x.csv",
    "ragged-csv": lambda ws: _write(ws / "bad" / "ragged.csv", "prefix_tokens,leg,ttft_ms\n256,recompute,1\n512,pull,2,3,4,5\n"),
    "huge-lengths": lambda ws: _write(ws / "bad" / "huge.csv", "prefix_tokens,leg,ttft_ms\n" + "".join(
        f"{n},{leg},{t}\n" for n in ("10000000000000000000", "20000000000000000000") for leg, t in (("recompute", 5), ("pull", 3)))),
    "huge-ttft": lambda ws: _write(ws / "bad" / "hugettft.csv", "prefix_tokens,leg,ttft_ms\n" + "".join(
        f"{n},{leg},{t}\n" for n in (256, 512, 1024) for leg, t in (("recompute", "1e200"), ("pull", "1e-200"))) * 2),
    "header-only": lambda ws: _write(ws / "bad" / "header.csv", "prefix_tokens,leg,ttft_ms\n"),
    "truncated-fit": lambda ws: _write(ws / "bad" / "trunc.fit.json", _good_fit_text(ws)[: len(_good_fit_text(ws)) // 2]),
    "foreign-json": lambda ws: _write(ws / "bad" / "foreign.json", json.dumps({"schema": "something-else/1", "x": 1})),
    "deep-json": lambda ws: _write(ws / "bad" / "deep.json", "[" * 100_000 + "]" * 100_000),
    "yaml-aliases": lambda ws: _write(ws / "bad" / "laughs.yaml", BILLION_LAUGHS),
    "yaml-python-object": lambda ws: _write(ws / "bad" / "object.yaml", "engine: !!python/object/apply:os.system ['true']\n"),
    "yaml-list": lambda ws: _write(ws / "bad" / "list.yaml", "- a\n- b\n"),
    "yaml-broken": lambda ws: _write(ws / "bad" / "broken.yaml", "a: [1, 2\nb: {\n"),
    "run-json-truncated": lambda ws: _damaged_run(ws, "trunc", lambda r: _write(r / "run.json", (r / "run.json").read_text()[:100])),
    "run-json-binary": lambda ws: _damaged_run(ws, "binmanifest", lambda r: _write(r / "run.json", bytes(range(256)))),
    "run-json-foreign": lambda ws: _damaged_run(ws, "foreign", lambda r: _write(r / "run.json", '{"name": 1}')),
    "probes-binary": lambda ws: _damaged_run(ws, "binprobes", lambda r: (_write(r / "probes.jsonl", bytes(range(256)) + b"\n"), _unlink(r / "fit.json"))),
    "probes-missing": lambda ws: _damaged_run(ws, "noprobes", lambda r: (_unlink(r / "probes.jsonl"), _unlink(r / "fit.json"))),
    "probes-dir": lambda ws: _damaged_run(ws, "probesdir", lambda r: (_unlink(r / "probes.jsonl"), (r / "probes.jsonl").mkdir(), _unlink(r / "fit.json"))),
}

# Kinds that are only bad when the process cannot override file permissions (root without CAP_DAC_*).
NEEDS_DROPPED_DAC = {"unreadable"}


def _chmod(path: Path, mode: int) -> Path:
    os.chmod(path, mode)
    return path


def _symlink(link: Path, target: Path) -> Path:
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target)
    return link


def _unlink(path: Path) -> None:
    if path.exists():
        path.unlink()


# --- cases ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    id: str
    cls: str                        # the class the case belongs to, for counting and sampling
    command: Command
    values: dict[str, object]
    setup: Callable[[Path], dict[str, object]] | None = None  # more values, built in the workspace
    drop: tuple[str, ...] = ()
    needs_dropped_dac: bool = False
    check_inputs: bool = True

    def prepare(self, ws: Path) -> list[str]:
        values = {k: v for k, v in self.values.items() if k not in self.drop}
        if self.setup is not None:
            values.update(self.setup(ws))
        return render(self.command, values, ws)


def _set(name: str, maker: Callable[[Path], Path]) -> Callable[[Path], dict[str, object]]:
    return lambda ws: {name: str(maker(ws))}


def _set_list(name: str, maker: Callable[[Path], Path]) -> Callable[[Path], dict[str, object]]:
    return lambda ws: {name: [str(maker(ws))]}


def generated_cases(app: typer.Typer) -> list[Case]:
    cases: list[Case] = []
    for command in commands(app):
        base = base_for(command)
        cid = command.name.replace(" ", "-")
        cases.append(Case(f"{cid}/unknown-flag", "unknown-flag", command, {**base, "__extra__": ["--no-such-flag"]}))
        for p in command.params:
            if p.required:
                cases.append(Case(f"{cid}/missing-{p.name}", "missing-required", command, base, drop=(p.name,)))
            if p.flag is not None and p.kind in ("int", "float"):
                bad_numbers = ["abc", "1x", ""] + (["1.5"] if p.kind == "int" else ["nan", "inf", "-inf"])
                for i, text in enumerate(bad_numbers):
                    cases.append(Case(f"{cid}/{p.name}-not-a-number-{i}", f"bad-{p.kind}", command, {**base, p.name: text}))
            if p.kind != "path":
                continue
            if p.output:
                cases += _output_cases(cid, command, base, p)
                continue
            for kind, maker in FILE_KINDS.items():
                setter = _set_list if p.multiple else _set
                cases.append(Case(f"{cid}/{p.name}={kind}", f"file:{kind}", command, base, setup=setter(p.name, maker),
                                  needs_dropped_dac=kind in NEEDS_DROPPED_DAC))
    cases += targeted_cases(app)
    return cases


def _output_cases(cid: str, command: Command, base: dict[str, object], p: Param) -> list[Case]:
    """An output pointed at an input of the same command, at the run's records, at a folder, under a file."""
    inputs = [v for q in command.params if q.kind == "path" and not q.output and q.name in base
              for v in (base[q.name] if isinstance(base[q.name], list) else [base[q.name]])]
    places = {"a-directory": "{ws}/adir", "under-a-file": "{ws}/afile/out"}
    if p.name != "output_dir":
        places.update({"run-records": "{run}/probes.jsonl", "run-manifest": "{run}/run.json"})
        for i, value in enumerate(inputs):
            if str(value) in ("{run}",):
                continue  # a folder: covered by a-directory and the records above
            if command.path == ("fit",) and value == "{fit}":
                continue
            places[f"an-input-{i}"] = str(value)
    else:
        places = {"a-file": "{ws}/afile", "under-a-file": "{ws}/afile/out"}
    cases = [Case(f"{cid}/{p.name}={where}", f"output:{where.split('-')[0] if where.startswith('an-input') else where}",
                  command, {**base, p.name: value}) for where, value in places.items()]
    if p.name != "output_dir":  # a link named like any output, pointing at the run's probes
        cases.append(Case(f"{cid}/{p.name}=link-to-run-records", "output:link-to-run-records", command, base,
                          setup=_set(p.name, _link_to_probes)))
    return cases


def _values_with_duplicate(ws: Path) -> Path:
    """The good values file with its EPP config's minCachedTokenDelta given twice (the router reads the last)."""
    text = (FIXTURES / "values" / "router-p2p.yaml").read_text()
    line = next(line for line in text.splitlines() if "minCachedTokenDelta" in line)
    return _write(ws / "bad" / "dup-values.yaml", text.replace(line, line + "\n" + line, 1))


def _values_folded(ws: Path) -> Path:
    """The good values file with its embedded config as a folded block ('>'): one long line to the router."""
    text = (FIXTURES / "values" / "router-p2p.yaml").read_text()
    assert ": |" in text, "the router-p2p fixture no longer embeds its config as a literal block"
    return _write(ws / "bad" / "folded-values.yaml", text.replace(": |", ": >", 1))


def _link_to_probes(ws: Path) -> Path:
    link = ws / "out-link"
    link.symlink_to(ws / PLACES["run"] / "probes.jsonl")
    return link


def targeted_cases(app: typer.Typer) -> list[Case]:
    """Values that are bad for one flag of one command (the generic classes cannot know them)."""
    by_name = {c.name: c for c in commands(app)}
    cases: list[Case] = []

    def add(cid: str, cls: str, name: str, values: dict[str, object], **kw: object) -> None:
        if name in by_name:
            cases.append(Case(f"{name.replace(' ', '-')}/{cid}", cls, by_name[name], {**base_for(by_name[name]), **values}, **kw))

    for i, run_name in enumerate(["../escape", "/tmp/kvcal-abs-run", ".", "..", "a/b", "", "x\ny", " ", "x ", " x"]):
        add(f"name-{i}", "run-name", "sweep", {"name": run_name})
    for i, lengths in enumerate([",", " , ", "1", "0", "-64", "abc", "256,abc", "10000000000000000000", "1e19", "256,,x", "100",
                                 "256,512,256"]):
        add(f"prefix-lengths-{i}", "length-list", "sweep", {"prefix_lengths": lengths})
        add(f"prefix-lengths-{i}", "length-list", "k8s-job", {"prefix_lengths": lengths})
    urls = ["not a url", "ftp://10.0.0.1:8000", "http://", "http://:8000", "http://10.0.0.1:99999", "http://10.0.0.1:abc",
            "10.0.0.1:8000", "http://10.0.0.1:8000/\n", "http://[::1", "http://user@:8000",
            # hosts httpx or the resolver would refuse later (exit 70 once), and URLs carrying secrets (issue 55)
            "http://a..b:8000", f"http://{'a' * 64}.svc:8000", "http://1.2.3.999:8000", "http://xn--zz.com:8000",
            "http://user:pw@10.0.0.1:8000", "http://10.0.0.1:8000/?token=pw"]
    for i, url in enumerate(urls):
        add(f"prometheus-{i}", "url", "observe", {"prometheus": url})
        for flag in ("producer_url", "consumer_url"):
            add(f"{flag}-{i}", "url", "sweep", {"engine": "vllm", "producer_url": "http://127.0.0.1:9", "consumer_url": "http://127.0.0.1:10", flag: url})
            add(f"{flag}-{i}", "url", "k8s-job", {flag: url})
    add("same-url", "url", "sweep", {"engine": "vllm", "producer_url": "http://127.0.0.1:9", "consumer_url": "http://127.0.0.1:9"})
    add("same-url", "url", "k8s-job", {"producer_url": "http://10.0.0.1:8000", "consumer_url": "http://10.0.0.1:8000"})
    add("sim-with-urls", "engine-flags", "sweep", {"producer_url": "http://127.0.0.1:9", "consumer_url": "http://127.0.0.1:10"})
    add("sim-with-gpus", "engine-flags", "sweep", {"producer_gpus": "0"})
    add("sim-with-engine-arg", "engine-flags", "sweep", {"__extra__": ["--engine-arg=--enforce-eager"]})
    add("engine-bogus", "choice", "sweep", {"engine": "bogus"})
    # numbers inside a flag's type but past what the command can do (once: exit 70, or a 300-digit threshold)
    for name in ("plan", "compare", "fit", "plot"):
        add("seed-negative", "out-of-range", name, {"seed": "-1"})
    add("margin-huge", "out-of-range", "emit-config", {"margin": "1e308"})
    add("block-size-huge", "out-of-range", "emit-config", {"block_size": "99999999999999999999"})
    add("resamples-huge", "out-of-range", "fit", {"resamples": "99999999999"})
    for flag, value in (("target_width", "0.2"), ("max_probes", "50"), ("max_engine_seconds", "60")):
        add(f"{flag}-without-adaptive", "engine-flags", "sweep", {flag: value})  # once ignored: a ladder ran
    add("transport-bogus", "choice", "sweep", {"transport": "bogus"})
    add("reps-zero", "range", "sweep", {"reps": "0"})
    add("block-zero", "range", "sweep", {"block_size": "0"})
    add("exists", "run-exists", "sweep", {"name": "good"})
    add("resume-none", "resume", "sweep", {"name": "none", "resume": True})
    add("resume-changed-reps", "resume", "sweep", {"name": "good", "resume": True, "reps": "9"})
    add("resume-changed-lengths", "resume", "sweep", {"name": "good", "resume": True, "prefix_lengths": "256"})
    add("resume-changed-seed", "resume", "sweep", {"name": "good", "resume": True, "seed": "5", "prefix_lengths": None})
    add("dry-run-resume-missing", "resume", "sweep", {"name": "none", "resume": True, "dry_run": True})
    add("config-unknown-key", "campaign", "sweep", {}, setup=_set("config", lambda ws: _write(ws / "bad" / "c.yaml", "nope: 1\n")))
    add("config-bad-type", "campaign", "sweep", {}, setup=_set("config", lambda ws: _write(ws / "bad" / "c.yaml", "block-size: many\n")))
    add("config-deep", "campaign", "sweep", {}, setup=_set("config", lambda ws: _write(ws / "bad" / "c.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n")))
    # YAML that loads but does not say one thing: a repeated key (the last silently won), a local
    # tag, a boolean or nan where a number goes (yes/no/on/off read as true/false)
    for cid, text in (("config-duplicate-key", "engine: sim\nreps: 1\nreps: 3\n"), ("config-local-tag", "reps: !mine 2\n"),
                      ("config-bool-reps", "reps: yes\n"), ("config-bool-length", "prefix-lengths: [256, on]\n"),
                      ("config-bool-sim", "sim:\n  noise-cv: true\n"), ("config-nan-sim", "sim:\n  noise-cv: .nan\n"),
                      ("config-nan-width", "adaptive: true\ntarget-width: .nan\n")):
        add(cid, "campaign-value", "sweep", {"reps": None, "prefix_lengths": None},
            setup=_set("config", lambda ws, text=text: _write(ws / "bad" / "c.yaml", text)))
    add("helm-duplicate-key", "yaml-duplicate-key", "emit-config", {"format": "helm"}, setup=_set("values", _values_with_duplicate))
    add("helm-folded-config", "yaml-shape", "emit-config", {"format": "helm"}, setup=_set("values", _values_folded))
    add("values-duplicate-key", "yaml-duplicate-key", "compare", {}, setup=_set("values", _values_with_duplicate))
    add("helm-laughs", "yaml-aliases", "emit-config", {"format": "helm"}, setup=_set("values", FILE_KINDS["yaml-aliases"]))
    add("helm-object", "yaml-object", "emit-config", {"format": "helm"}, setup=_set("values", FILE_KINDS["yaml-python-object"]))
    add("helm-list", "yaml-shape", "emit-config", {"format": "helm"}, setup=_set("values", FILE_KINDS["yaml-list"]))
    add("helm-binary", "yaml-shape", "emit-config", {"format": "helm"}, setup=_set("values", FILE_KINDS["binary"]))
    add("helm-no-values", "flag-combination", "emit-config", {"format": "helm", "in_place": True})
    add("format-bogus", "choice", "emit-config", {"format": "bogus"})
    # --format work-range (issue 49): its budget is required, its two flags belong to three formats, MAX must be known
    add("work-range-no-budget", "flag-combination", "emit-config", {"format": "work-range"})
    add("ttft-penalty-other-format", "flag-combination", "emit-config", {"ttft_penalty_ms": "3500"})
    add("max-model-len-other-format", "flag-combination", "emit-config", {"format": "env", "max_model_len": "131072"})
    add("ttft-penalty-zero", "range", "emit-config", {"format": "json", "ttft_penalty_ms": "0"})
    add("ttft-penalty-negative", "range", "emit-config", {"format": "work-range", "ttft_penalty_ms": "-5"})
    add("max-model-len-zero", "range", "emit-config", {"format": "json", "max_model_len": "0"})
    add("work-range-no-max", "flag-combination", "emit-config",
        {"input_path": "{table}", "format": "work-range", "ttft_penalty_ms": "3500"})
    add("work-range-max-below-boundary", "range", "emit-config",
        {"format": "work-range", "ttft_penalty_ms": "1e6", "max_model_len": "64"})
    add("margin-negative", "range", "emit-config", {"margin": "-1"})
    add("tolerance-negative", "range", "compare", {"tolerance": "-0.1"})
    add("values-laughs", "yaml-aliases", "compare", {}, setup=_set("values", FILE_KINDS["yaml-aliases"]))
    add("values-object", "yaml-object", "compare", {}, setup=_set("values", FILE_KINDS["yaml-python-object"]))
    add("confidence-one", "range", "fit", {"confidence": "1"})
    add("resamples-few", "range", "fit", {"resamples": "5"})
    add("seed-negative", "range", "fit", {"seed": "-1"})
    add("plot-bad-extension", "output-kind", "plot", {"output": "{ws}/out.txt"})
    # `-` as an output is stdout for every command (tests/cli/test_installed_streams.py), no longer a bad input
    # kvcal observe --dashboard (issue 54): it queries nothing, so the flags of a query need --prometheus; with
    # --prometheus, stdout holds one document; --prometheus itself is required unless --dashboard is given
    add("no-server-nor-dashboard", "missing-required", "observe", {"prometheus": None})
    for cid, values in (("dashboard-json-no-server", {"json": True}), ("dashboard-since-no-server", {}),
                        ("dashboard-propose-no-server", {"since": None, "propose": True})):
        add(cid, "flag-combination", "observe", {"prometheus": None, "dashboard": "{ws}/dash.json", **values})
    add("dashboard-stdout-and-table", "flag-combination", "observe", {"dashboard": "-"})
    add("dashboard-stdout-and-json", "flag-combination", "observe", {"dashboard": "-", "json": True})
    add("dashboard-onto-fit", "output:an", "observe", {"prometheus": None, "since": None, "dashboard": "{fit}",
                                                       "fit": "{fit}"})
    add("dashboard-bad-window", "flag-combination", "observe", {"dashboard": "{ws}/dash.json", "since": "5x"})
    add("show-unknown", "unknown-name", "profiles show", {"name": "no-such-profile"})
    add("predict-unknown-model", "unknown-name", "predict", {"model": "no-such-model"})
    add("predict-devices-zero", "range", "predict", {"devices": "0"})
    for flag in ("block_size", "max_model_len"):  # 0 once ran as if the flag were not given, -64 was exit 70
        for i, value in enumerate(("0", "-64")):
            add(f"{flag}-{i}", "range", "plan", {flag: value})
    add("max-model-len-below-shortest", "range", "plan", {"max_model_len": "200"})
    add("k8s-bad-name", "k8s-name", "k8s-job", {"name": "Not_A_DNS_Label"})
    return cases


# --- checks ---------------------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every regular file under root (links and FIFOs are not followed or opened)."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames:
            path = Path(dirpath) / name
            try:
                mode = path.lstat().st_mode
            except OSError:
                continue
            if not stat.S_ISREG(mode):
                out[str(path)] = f"mode {stat.S_IFMT(mode)}"
                continue
            os.chmod(path, mode | stat.S_IRUSR) if not mode & stat.S_IRUSR else None
            out[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
            if not mode & stat.S_IRUSR:
                os.chmod(path, mode)
    return out


def problems(code: int, out: str, err: str, before: dict[str, str], after: dict[str, str]) -> list[str]:
    """What is wrong with how a bad-input case ended (empty: nothing)."""
    found = []
    if code == 0:
        found.append("exit 0 on bad input")
    if code == INTERNAL:
        found.append("internal error (exit 70)")
    text = out + err
    if "Traceback" in text:
        found.append("a traceback")
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_LINES:
        found.append(f"{len(lines)} lines of output (at most {MAX_LINES})")
    changed = [p for p, digest in before.items() if after.get(p) != digest]
    if changed:
        found.append(f"changed or removed input files: {changed[:3]}")
    return found
