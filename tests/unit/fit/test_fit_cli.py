"""`kvcal fit` and `kvcal plot` through the CLI entry point: outputs, files, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcal.cli.app import main
from kvcal.engines.sim import SimCosts
from kvcal.records.fit import FitResult
from factories import sim_table

import factories

# The job log minus its first chatter line: the table as users paste it.
JOB_TABLE = "".join((Path(__file__).parents[2] / "fixtures" / "llmd" / "gpt-oss-120b-job.log").read_text().splitlines(keepends=True)[1:])


@pytest.fixture()
def csv(tmp_path) -> Path:
    path = tmp_path / "probes.csv"
    sim_table(SimCosts(), [256, 512, 1024, 2048, 4096, 8192], 3, seed=4).probes.to_csv(path, index=False)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_fit_prints_the_report_and_writes_fit_json_beside_the_input(capsys, csv):
    code, out, err = run(capsys, "fit", str(csv), "--resamples", "300")
    assert code == 0, err
    assert "break-even:" in out and "status: crossover" in out and "us/token" in out and "90% interval" in out
    written = csv.with_name("probes.fit.json")
    assert written.exists() and f"wrote {written}" in out
    assert FitResult.model_validate_json(written.read_text()).status == "crossover"


def test_fit_json_prints_only_the_object(capsys, csv, tmp_path):
    target = tmp_path / "elsewhere" / "fit.json"
    code, out, err = run(capsys, "fit", str(csv), "--json", "--confidence", "0.8", "--seed", "3", "--output", str(target),
                         "--resamples", "300")
    assert code == 0
    data = json.loads(out)  # the whole of stdout is one JSON object
    assert err.splitlines() == [f"kvcal: warning: {w}" for w in data["warnings"]]  # and each warning on stderr too
    assert data["schema"] == "kvcal.fit/2" and data["confidence"] == 0.8 and data["bootstrap"]["seed"] == 3
    for key in ("status", "break_even_tokens", "break_even_ci", "extrapolated", "measured_range", "recompute", "pull",
                "block_size", "warnings"):
        assert key in data
    assert json.loads(target.read_text()) == data


def test_same_seed_same_json(capsys, csv, tmp_path):
    outs = []
    for name in ("a.json", "b.json"):
        run(capsys, "fit", str(csv), "--json", "--seed", "9", "-o", str(tmp_path / name), "--resamples", "200")
        outs.append(json.loads((tmp_path / name).read_text()))
    for data in outs:
        data.pop("created_at")
    assert outs[0] == outs[1]


def test_fit_the_llmd_job_table(capsys, tmp_path):
    job = tmp_path / "job.txt"
    job.write_text(JOB_TABLE)
    code, out, err = run(capsys, "fit", str(job), "--json")
    data = json.loads(out)
    assert code == 0 and data["status"] == "pull-always-wins" and data["source"]["kind"] == "llmd-table"
    assert set(data["setup"].values()) == {None}  # a Job log records no setup; no flag supplied one
    assert data["break_even_tokens"] < 2048 and data["pull_bandwidth_gbps"] > 0


def test_fit_a_run_folder_writes_into_it(capsys, tmp_path):
    folder = factories.write_run_folder(tmp_path / "run", sim_table(SimCosts(), [256, 1024, 4096], 2, seed=1))
    code, out, err = run(capsys, "fit", str(folder), "--resamples", "200")
    assert code == 0, err
    written = json.loads((folder / "fit.json").read_text())
    assert written["setup"] == json.loads((folder / "run.json").read_text())["setup"]
    assert FitResult.model_validate(written).setup.model == "tiny"


BAD_INPUTS = {
    "missing": None,
    "empty.csv": "",
    "onelen.csv": "prefix_tokens,leg,ttft_ms\n1024,recompute,10\n1024,pull,20\n",
    "noleg.csv": "prefix_tokens,leg,ttft_ms\n1024,recompute,10\n2048,recompute,20\n",
    "nonnum.csv": "prefix_tokens,leg,ttft_ms\n1024,recompute,abc\n2048,pull,20\n",
    "negative.csv": "prefix_tokens,leg,ttft_ms\n1024,recompute,-3\n2048,pull,20\n",
    "nan.csv": "prefix_tokens,leg,ttft_ms\n1024,recompute,nan\n2048,pull,20\n",
    "dupheader.csv": "prefix_tokens,leg,ttft_ms,ttft_ms\n1024,recompute,3,4\n",
    "dupheader.txt": "tokens recompute_ms pull_ms\n2048 70 49\n8192 205 120\ntokens recompute_ms pull_ms\n",
    "garbage.txt": "this is\nnot a table\n",
    "fit.json": '{"schema": "kvcal.fit/1"}',
}


@pytest.mark.parametrize("name", sorted(BAD_INPUTS))
def test_bad_input_is_one_line_nonzero_no_traceback(capsys, tmp_path, name):
    path = tmp_path / name
    if BAD_INPUTS[name] is not None:
        path.write_text(BAD_INPUTS[name])
    code, out, err = run(capsys, "fit", str(path))
    assert code == 2
    assert out == ""
    assert err.startswith("kvcal: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


@pytest.mark.parametrize("flags, message", [(["--confidence", "1.2"], "between 0 and 1"), (["--seed", "-2"], "non-negative")])
def test_bad_flags(capsys, csv, flags, message):
    code, _, err = run(capsys, "fit", str(csv), *flags)
    assert code == 2 and message in err and err.count("\n") == 1


def test_plot_command_writes_png_and_svg(capsys, csv, tmp_path):
    code, out, err = run(capsys, "plot", str(csv), "-o", str(tmp_path / "p.png"), "--log-x")
    assert code == 0, err
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    code, _, _ = run(capsys, "plot", str(csv), "--output", str(tmp_path / "p.svg"))
    assert code == 0 and (tmp_path / "p.svg").exists()


def test_plot_command_bad_extension_and_missing_input(capsys, csv, tmp_path):
    code, _, err = run(capsys, "plot", str(csv), "-o", str(tmp_path / "p.jpg"))
    assert code == 2 and ".png or .svg" in err and err.count("\n") == 1
    code, _, err = run(capsys, "plot", str(tmp_path / "none.csv"), "-o", str(tmp_path / "p.png"))
    assert code == 2 and "no such file" in err


def test_help_has_examples(capsys):
    for command in ("fit", "plot"):
        code, out, _ = run(capsys, command, "--help")
        assert code == 0 and "Example" in out


def test_fit_remakes_a_damaged_fit_json_in_its_run_folder(tmp_path, kvcal):
    run = tmp_path / "runs" / "r"
    assert kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path / "runs", "--name", "r",
                 "--prefix-lengths", "256,1024,4096", "--reps", "2").code == 0
    for damage in ("", '{"schema": "kvcal.fit/9"}', '{"schema": "kvcal.fit/2", "status": 1}'):
        (run / "fit.json").write_text(damage)
        assert kvcal("emit-config", run).code == 2  # the readers still refuse it
        result = kvcal("fit", run)
        assert result.code == 0, result.err
        assert kvcal("emit-config", run, "--format", "env").code == 0
