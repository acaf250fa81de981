"""The user boundary: one error line and an exit code for every failure, a light --help, safe writes,
locked run folders, and a property test of random bytes and random flags against every command."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cli_corpus import FIXTURES, commands, problems, snapshot
from kvcal.cli.app import EXIT_INTERNAL, app, main
from kvcal.sweep.lock import claim_run_folder, holder_pid

HEAVY = ("pandas", "scipy", "matplotlib", "numpy", "logging")  # logging: configured where a command runs, not for a help
ROOT = Path(__file__).resolve().parents[3]


def run_python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env}, cwd=ROOT)


def test_help_of_every_command_loads_no_numeric_stack():
    paths = [[]] + [list(c.path) for c in commands(app)] + [["profiles"]]
    done = run_python(f"""
        import sys
        from kvcal.cli.app import main
        for path in {paths!r}:
            assert main([*path, "--help"]) == 0, path
        print("HEAVY=" + ",".join(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
    """)
    assert done.returncode == 0, done.stderr
    loaded = [line for line in done.stderr.splitlines() if line.startswith("HEAVY=")]
    assert loaded == ["HEAVY="], f"--help imported {loaded}"


def test_emit_config_on_a_stored_fit_loads_neither_pandas_nor_scipy_stats():
    """Reading a fit.json and choosing the threshold needs numpy and scipy.special only: pandas, scipy.stats and
    scipy.optimize (the fitting code's) were about half a second of every fresh emit-config."""
    fit = ROOT / "results/baselines/cpu-tiny/fit.json"
    done = run_python(f"""
        import sys
        from kvcal.cli.app import main
        for extra in (["--format", "json"], ["--format", "vllm"], ["--format", "env"],
                      ["--format", "work-range", "--ttft-penalty-ms", "3500", "--max-model-len", "8192"]):
            assert main(["emit-config", {str(fit)!r}, *extra]) == 0, extra
        heavy = ("pandas", "scipy.stats", "scipy.optimize", "matplotlib")
        print("LOADED=" + ",".join(m for m in heavy if m in sys.modules), file=sys.stderr)
    """)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("LOADED=")] == ["LOADED="]
    assert "minCachedTokenDelta" in done.stdout or "min_cached_token_delta" in done.stdout.lower()


def test_top_level_help_imports_no_command_module():
    """The command list comes from the index: no command module, no pydantic settings, no typed records."""
    done = run_python("""
        import sys
        from kvcal.cli.app import main
        assert main(["--help"]) == 0
        assert main(["--version"]) == 0
        heavy = ("kvcal.records.run", "kvcal.records.fit", "kvcal.records.manifest", "kvcal.threshold.choose", "kvcal.settings.sweep",
                 "kvcal.sweep.validate", "kvcal.cli.sweep_cmd", "pydantic")
        print("LOADED=" + ",".join(m for m in heavy if m in sys.modules), file=sys.stderr)
    """)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("LOADED=")] == ["LOADED="]
    assert "kvcal " in done.stdout and "emit-config" in done.stdout


@pytest.mark.parametrize("width", [80, 140])
def test_the_index_renders_the_same_top_level_help_as_the_whole_app(width):
    from typer.main import get_command
    from typer.testing import CliRunner

    from kvcal.cli.app import build_app, full_app
    from kvcal.cli.commands import INDEX

    assert [name for name, _ in INDEX] == list(get_command(full_app()).commands)  # every command, in order
    runner = CliRunner()
    index = runner.invoke(build_app(index_only=True), ["--help"], prog_name="kvcal", terminal_width=width)
    whole = runner.invoke(full_app(), ["--help"], prog_name="kvcal", terminal_width=width)
    assert index.exit_code == whole.exit_code == 0
    assert index.output == whole.output


@pytest.mark.parametrize("args, index", [([], True), (["-h"], True), (["--version"], True), (["-v", "--help"], True),
                                         (["fit"], False), (["--help", "fit"], False), (["--nosuch"], False)])
def test_only_invocations_that_name_no_command_use_the_index(args, index):
    from kvcal.cli.app import lists_commands_only

    assert lists_commands_only(args) is index


def test_usage_errors_need_no_click_package():
    """typer may carry its own click; the boundary must not import the standalone one."""
    done = run_python("""
        import sys
        sys.modules["click"] = None  # as on a fresh install where typer vendors click
        from kvcal.cli.app import main
        sys.exit(main(["emit-config"]))
    """)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and "Missing argument" in done.stderr


def test_an_unexpected_error_is_one_line_and_exit_70_and_debug_shows_the_traceback(tmp_path, monkeypatch, capsys):
    import kvcal.fit.settings

    def broken(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(kvcal.fit.settings, "fit_and_write", broken)  # what kvcal fit's run_fit calls
    assert main(["fit", str(tmp_path)]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "internal error: ZeroDivisionError: boom" in err and "Traceback" not in err
    monkeypatch.setenv("KVCAL_DEBUG", "1")
    assert main(["fit", str(tmp_path)]) == EXIT_INTERNAL
    assert "Traceback" in capsys.readouterr().err


def test_an_os_error_naming_a_file_is_an_input_error(monkeypatch, capsys):
    import kvcal.fit.settings

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "/some/file")

    monkeypatch.setattr(kvcal.fit.settings, "fit_and_write", denied)  # what kvcal fit's run_fit calls
    assert main(["fit", "x"]) == 2
    assert capsys.readouterr().err.strip() == "kvcal: error: /some/file: Permission denied"


def test_non_finite_numbers_are_refused_for_every_float_flag(capsys):
    assert main(["fit", "x", "--confidence", "nan"]) == 2
    assert "--confidence must be a finite number" in capsys.readouterr().err


# --- sweep: the run folder, its lock, resume ----------------------------------------------------


def sim_sweep(out: Path, *extra: str) -> list[str]:
    return ["sweep", "--engine", "sim", "--prefix-lengths", "256,512", "--reps", "1", "--output-dir", str(out), *extra]


def test_a_held_run_folder_refuses_a_second_sweep_naming_the_holder(tmp_path, kvcal):
    assert kvcal(*sim_sweep(tmp_path, "--name", "r")).code == 0
    run = tmp_path / "r"
    before = snapshot(run)
    with claim_run_folder(run, new=False):
        assert holder_pid(run) == os.getpid()
        result = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, "--name", "r", "--resume")
    assert result.code == 2 and f"pid {os.getpid()}" in result.err
    assert snapshot(run) == before
    assert holder_pid(run) is None  # released with the holder
    assert kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, "--name", "r", "--resume").code == 0


def test_the_lock_is_held_by_a_running_sweep_process(tmp_path):
    """A real second process: its flock on RUN/.lock is seen from here while it runs."""
    run = tmp_path / "held"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from kvcal.sweep.lock import claim_run_folder
        with claim_run_folder({str(run)!r}, new=True):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        assert holder_pid(run) == holder.pid
        from kvcal.errors import InputError

        with pytest.raises(InputError, match=f"pid {holder.pid}"):
            with claim_run_folder(run, new=False):
                pass
    finally:
        holder.kill()
        holder.wait()
    assert holder_pid(run) is None  # the kernel released it with the process


def test_resume_refuses_changed_flags_naming_them(tmp_path, kvcal):
    assert kvcal(*sim_sweep(tmp_path, "--name", "r")).code == 0
    result = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, "--name", "r", "--resume", "--reps", "9")
    assert result.code == 2 and "--reps 9 (the run has 1)" in result.err


def test_dry_run_with_resume_shows_what_is_left(tmp_path, kvcal):
    assert kvcal(*sim_sweep(tmp_path, "--name", "r")).code == 0
    result = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, "--name", "r", "--resume", "--dry-run")
    assert result.code == 0 and "nothing left to run" in result.out


@pytest.mark.parametrize("flags, named", [
    (["--producer-url", "http://127.0.0.1:9", "--consumer-url", "http://127.0.0.1:10"], "--producer-url, --consumer-url"),
    (["--producer-gpus", "0"], "--producer-gpus"),
])
def test_flags_of_another_engine_are_refused(tmp_path, kvcal, flags, named):
    result = kvcal(*sim_sweep(tmp_path, *flags))
    assert result.code == 2 and named in result.err and not (tmp_path / "r").exists()


@pytest.mark.parametrize("name", ["../x", "/abs", ".", "..", "a/b", ""])
def test_run_names_are_one_folder(tmp_path, kvcal, name):
    result = kvcal(*sim_sweep(tmp_path / "out", "--name", name))
    assert result.code == 2 and "--name" in result.err
    assert not any(tmp_path.rglob("run.json"))


@pytest.mark.parametrize("lengths, message", [(",", "lists no values"), ("1", "use 64"), ("", "is empty")])
def test_length_lists_say_what_is_wrong(tmp_path, kvcal, lengths, message):
    result = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, "--prefix-lengths", lengths)
    assert result.code == 2 and message in result.err and "64 or 64" not in result.err


@pytest.mark.parametrize("url", ["not a url", "ftp://h:1", "http://:8000", "http://h:99999", "http://h:abc"])
def test_bad_attach_urls_are_input_errors_before_any_engine(tmp_path, kvcal, url):
    result = kvcal("sweep", "--output-dir", tmp_path, "--producer-url", url, "--consumer-url", "http://127.0.0.1:10")
    assert result.code == 2 and "--producer-url" in result.err


def test_the_same_engine_twice_is_refused(tmp_path, kvcal):
    result = kvcal("sweep", "--output-dir", tmp_path, "--producer-url", "http://127.0.0.1:9/",
                   "--consumer-url", "http://127.0.0.1:9")
    assert result.code == 2 and "same engine" in result.err


# --- writes -----------------------------------------------------------------------------------------


def test_outputs_never_land_on_a_runs_records(tmp_path, kvcal):
    assert kvcal(*sim_sweep(tmp_path, "--name", "r")).code == 0
    run = tmp_path / "r"
    before = snapshot(run)
    for args in (["export", run, "-o", run / "probes.jsonl"], ["fit", run, "-o", run / "run.json", "--resamples", "0"],
                 ["compare", run, run, "--markdown", run / "fit.json"], ["plot", run, "-o", run / "summary.csv"],
                 ["export", run, "-o", run]):
        result = kvcal(*args)
        assert result.code == 2 and result.err.count("\n") == 1, args
    assert snapshot(run) == before and not (run / "fit.json").exists()
    assert kvcal("fit", run, "-o", run / "fit.json", "--resamples", "0").code == 0  # fit writes the run's fit.json
    assert kvcal("fit", run, "-o", run / "fit.json", "--resamples", "0").code == 0  # and may rewrite it


def test_in_place_never_writes_a_backup_through_a_dangling_link(tmp_path, kvcal):
    fit = ROOT / "results" / "baselines" / "cpu-tiny" / "fit.json"
    values = tmp_path / "values.yaml"
    values.write_bytes((FIXTURES / "values" / "router-p2p.yaml").read_bytes())
    original = values.read_bytes()
    (tmp_path / "values.yaml.bak").symlink_to(tmp_path / "escaped")
    result = kvcal("emit-config", fit, "--format", "helm", "--values", values, "--in-place")
    assert result.code == 0, result.err
    assert not (tmp_path / "escaped").exists()
    assert (tmp_path / "values.yaml.bak.1").read_bytes() == original


def test_a_newline_in_k8s_strings_cannot_add_an_object(kvcal):
    smuggled = "m\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: x}"
    result = kvcal("k8s-job", "--image", "img", "--producer-url", "http://10.0.0.1:8000",
                   "--consumer-url", "http://10.0.0.2:8000", "--model", smuggled)
    docs = list(yaml.safe_load_all(result.out))
    assert result.code == 0 and len(docs) == 1 and docs[0]["kind"] == "Job"
    assert smuggled.replace("'", "") in docs[0]["spec"]["template"]["spec"]["containers"][0]["args"][0]


# --- property: random bytes, random flags --------------------------------------------------------

COMMANDS = commands(app)


def _flag_values(kind: str):
    return {"int": st.sampled_from(["0", "1", "-1", "64", "99999999999999999999", "x"]),
            "float": st.sampled_from(["0", "0.5", "1", "-1", "1e308", "nan", "x"]),
            "bool": st.just(None),
            "str": st.sampled_from(["", "x", "sim", "helm", "256,512", ",", "http://127.0.0.1:1", "../x"]),
            "path": st.just("{file}")}[kind]


@st.composite
def invocations(draw):
    command = draw(st.sampled_from(COMMANDS))
    args = list(command.path)
    for param in command.params:
        if param.flag is None:
            args.append("{file}")
            continue
        if not draw(st.booleans()):
            continue
        value = draw(_flag_values(param.kind))
        if param.name == "engine":
            value = "sim"  # never a real engine from a property test
        args += [param.flag] if value is None else [param.flag, value]
    if command.path == ("sweep",) and "--engine" not in args:
        args += ["--engine", "sim"]
    return args


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(args=invocations(), content=st.binary(max_size=2048))
def test_random_bytes_and_flags_never_crash_or_touch_the_input(tmp_path_factory, args, content):
    ws = tmp_path_factory.mktemp("prop")
    file = ws / "input.bin"
    file.write_bytes(content)
    argv = [a.replace("{file}", str(file)) for a in args]
    if argv[0] == "sweep" and "--output-dir" not in argv:
        argv += ["--output-dir", str(ws / "results")]
    before = snapshot(ws)
    import io
    from contextlib import redirect_stderr, redirect_stdout

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    found = [p for p in problems(code, out.getvalue(), err.getvalue(), before, snapshot(ws))
             if not (code == 0 and p == "exit 0 on bad input") and not (code == 0 and "lines of output" in p)]
    assert not found, f"kvcal {' '.join(argv)} -> {code}: {found}\n{err.getvalue()[-1000:]}"


# --- engines answering garbage mid-sweep ------------------------------------------------------------


@pytest.mark.parametrize("events", [["{not json"], ["[1, 2]"], ['"text"'], ['{"error": "plain string"}'],
                                    ['{"choices": "x"}', "[DONE]"], ["{" * 5000]])
def test_malformed_stream_events_are_engine_errors(events):
    import httpx

    from kvcal.engines.http import EngineClient
    from kvcal.errors import EngineError

    body = "".join(f"data: {e}\n\n" for e in events).encode()
    client = EngineClient("http://engine", name="consumer", model="m", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})))
    try:
        client.stream_completion([1])
    except EngineError:
        pass  # the only acceptable failure; '{"choices": "x"}' may also count as a token


def test_malformed_json_bodies_are_engine_errors():
    import httpx

    from kvcal.engines.http import EngineClient
    from kvcal.errors import EngineError

    for response in (httpx.Response(200, content=b"<html>"), httpx.Response(200, json=[1, 2])):
        client = EngineClient("http://engine", name="producer", transport=httpx.MockTransport(lambda r, resp=response: resp))
        with pytest.raises(EngineError):
            client.complete([1])
        with pytest.raises(EngineError):
            client.served_model()


@pytest.mark.parametrize("name", ["sweep", "fit", "emit-config", "fleet", "profiles", "k8s-job"])
def test_one_commands_app_renders_its_help_as_the_whole_app_does(name):
    from typer.testing import CliRunner

    from kvcal.cli.app import build_app, full_app

    runner = CliRunner()
    alone = runner.invoke(build_app(only=name), [name, "--help"], prog_name="kvcal", terminal_width=100)
    whole = runner.invoke(full_app(), [name, "--help"], prog_name="kvcal", terminal_width=100)
    assert alone.exit_code == whole.exit_code == 0
    assert alone.output == whole.output


def test_a_commands_help_imports_no_other_command_module():
    """`kvcal fit --help` builds the fit command alone (issue 45): the other commands' imports are not paid for."""
    done = run_python("""
        import sys
        from kvcal.cli.app import main
        assert main(["fit", "--help"]) == 0
        print("LOADED=" + ",".join(sorted(m for m in sys.modules if m.endswith("_cmd"))), file=sys.stderr)
    """)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("LOADED=")] == ["LOADED=kvcal.cli.fit_cmd"]


@pytest.mark.parametrize("args, named", [(["fit", "x"], "fit"), (["-v", "emit-config"], "emit-config"),
                                         (["fitt"], None), (["--help"], None)])
def test_the_named_command_is_the_first_word_that_is_not_a_flag(args, named):
    from kvcal.cli.commands import MODULE_OF, MODULES, named_command

    assert sorted(MODULE_OF.values()) == sorted(MODULES)
    assert named_command(args) == named
