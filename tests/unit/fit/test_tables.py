"""Loading probe tables: run folders, the interchange CSV and the llm-d Job table, and every bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit_record import FitSource
from kvcal.records import ProbeRecord, RunSetup
from kvcal.run_manifest import RunManifest

import factories
from kvcal.fit.tables import load_probe_table
from factories import sim_table

SETUP = {"model": "tiny-llama", "engine": "sim", "transport": "ucx", "block_size": 64, "kv_bytes_per_token": 2048,
         "accelerator": "x86"}
JOB_LOG = (Path(__file__).parents[2] / "fixtures" / "llmd" / "gpt-oss-120b-job.log").read_text()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def manifest(**overrides) -> RunManifest:
    return factories.make_manifest(**{"setup": SETUP, **overrides})


probe = factories.make_probe


def write_run(folder: Path, records: list[ProbeRecord], run: RunManifest | None = None, tail: str = "") -> Path:
    return factories.write_run_folder(folder, records, manifest=run or manifest(), tail=tail)


# --- CSV --------------------------------------------------------------------------------------


def test_csv_minimal_columns_numbers_reps_in_file_order(tmp_path):
    path = write(tmp_path, "p.csv", "prefix_tokens,leg,ttft_ms\n1024,recompute,10.5\n1024,recompute,11\n2048,pull,7\n")
    table = load_probe_table(path)
    assert list(table.probes.columns) == ["prefix_tokens", "leg", "ttft_ms", "rep", "bytes_moved", "order", "pair", "link_class"]
    assert table.probes["link_class"].tolist() == [None, None, None] and table.link_classes() == []
    assert table.probes["rep"].tolist() == [0, 1, 0]
    assert table.probes["bytes_moved"].isna().all()
    assert table.origin == FitSource(path=str(path), kind="probe-csv") and table.setup == RunSetup()
    assert table.block_size is None


def test_csv_optional_columns_and_valid_flag_excluded_and_counted(tmp_path):
    text = ("leg,prefix_tokens,ttft_ms,rep,bytes_moved,valid\n"
            "pull,1000,5.0,0,2048000,true\npull,1000,99.0,1,,false\nrecompute,1000,9.0,0,0,true\n")
    table = load_probe_table(write(tmp_path, "p.csv", text))
    assert table.n_invalid_excluded == 1
    assert len(table.probes) == 2
    pull = table.leg("pull")
    assert pull["bytes_moved"].tolist() == [2048000]
    assert any("valid=false" in w for w in table.warnings)


def test_csv_accepts_lengths_that_are_not_block_multiples(tmp_path):
    table = load_probe_table(write(tmp_path, "p.csv", "prefix_tokens,leg,ttft_ms\n1000,recompute,9\n1001,pull,5\n"))
    assert table.lengths == [1000, 1001]


@pytest.mark.parametrize(
    "text, message",
    [
        ("prefix_tokens,leg,ttft_ms\n1024,recompute,abc\n", "row 2: ttft_ms 'abc' is not a number"),
        ("prefix_tokens,leg,ttft_ms\n1024,recompute,-1\n", "must be positive"),
        ("prefix_tokens,leg,ttft_ms\n1024,recompute,NaN\n", "NaN"),
        ("prefix_tokens,leg,ttft_ms\n1024,recompute,inf\n", "NaN or infinite"),
        ("prefix_tokens,leg,ttft_ms\n0,recompute,3\n", "prefix_tokens must be positive"),
        ("prefix_tokens,leg,ttft_ms\n10.5,recompute,3\n", "not a whole number"),
        ("prefix_tokens,leg,ttft_ms\n1024,decode,3\n", "leg 'decode'"),
        ("prefix_tokens,leg,ttft_ms,ttft_ms\n1024,pull,3,4\n", "duplicate column 'ttft_ms'"),
        ("prefix_tokens,leg,rep\n1024,pull,0\n", "missing column(s) ttft_ms"),
        ("prefix_tokens,leg,ttft_ms\n", "header only"),
        ("prefix_tokens,leg,ttft_ms,valid\n1024,pull,3,false\n", "no valid probes"),
    ],
)
def test_csv_bad_input_is_one_line_input_error(tmp_path, text, message):
    with pytest.raises(InputError) as err:
        load_probe_table(write(tmp_path, "bad.csv", text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


# --- llm-d Job table --------------------------------------------------------------------------


def test_llmd_job_log_with_chatter_is_read_as_two_probes_per_row(tmp_path):
    table = load_probe_table(write(tmp_path, "job.txt", JOB_LOG))
    assert table.origin.kind == "llmd-table"
    assert table.lengths == [2048, 8192, 16384, 32768, 49152]
    rec, pull = table.leg("recompute"), table.leg("pull")
    assert rec["ttft_ms"].tolist() == [70.6, 205.4, 426.3, 983.0, 1695.0]
    assert pull["ttft_ms"].tolist() == [49.0, 120.1, 196.2, 376.3, 550.5]
    assert pull["bytes_moved"].tolist() == [75_500_000, 301_900_000, 603_800_000, 1_207_700_000, 1_811_500_000]
    assert rec["bytes_moved"].isna().all()  # the Job does not report the control's bytes
    assert table.warnings == ()


def test_llmd_job_log_with_kubectl_timestamps(tmp_path):
    stamped = "".join(f"2026-03-01T10:00:{i:02d}.123456789Z {line}\n" for i, line in enumerate(JOB_LOG.splitlines()))
    table = load_probe_table(write(tmp_path, "job.txt", stamped))
    assert table.lengths == [2048, 8192, 16384, 32768, 49152]
    assert table.leg("pull")["ttft_ms"].iloc[0] == 49.0


def test_llmd_table_without_header_percent_or_bytes(tmp_path):
    table = load_probe_table(write(tmp_path, "t.txt", "2048 70.6 49.0 -30.6\n8192 205.4 120.1\n"))
    assert table.lengths == [2048, 8192]
    assert table.leg("pull")["bytes_moved"].isna().all()


def test_llmd_table_header_with_delta_percent_and_repeated_lengths(tmp_path):
    text = "tokens recompute_ms pull_ms delta% pulled_MB\n2048 70 49 -30% 1\n2048 72 50 -30.6% 1\n4096 140 80 -42.9% 2\n"
    table = load_probe_table(write(tmp_path, "t.txt", text))
    assert table.leg("recompute")["rep"].tolist() == [0, 1, 0]


def test_llmd_table_delta_that_contradicts_the_times_warns(tmp_path):
    table = load_probe_table(write(tmp_path, "t.txt", "2048 70.6 49.0 +30.6% 1\n4096 140 80 -42.9% 2\n"))
    assert any("columns swapped" in w for w in table.warnings)


@pytest.mark.parametrize(
    "text, message",
    [
        ("tokens recompute_ms pull_ms delta pulled_MB\n2048 70.6 x -30.6% 1\n", "line 2: pull_ms 'x'"),
        ("2048 70.6 49 -30% 1 7\n", "got 6 fields"),
        ("tokens recompute_ms pull_ms\n2048 70 49\ntokens recompute_ms pull_ms\n", "second table header"),
        ("tokens recompute_ms pull_ms delta pulled_MB\n", "header but no rows"),
        ("2048 -70.6 49 -30% 1\n", "recompute_ms must be positive"),
        ("2048 70.6 nan -30% 1\n", "NaN"),
        ("2048 70.6 49 -30% -1\n", "pulled_MB must be non-negative"),
    ],
)
def test_llmd_table_bad_input(tmp_path, text, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        load_probe_table(write(tmp_path, "t.txt", text))


# --- detection and file-level errors ----------------------------------------------------------


@pytest.mark.parametrize("text", ["", "   \n\n"])
def test_empty_file(tmp_path, text):
    with pytest.raises(InputError, match="empty"):
        load_probe_table(write(tmp_path, "e.csv", text))


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_probe_table(tmp_path / "nope.csv")


@pytest.mark.parametrize("text", ["hello world\nthis is not a table\n", '{"schema": "kvcal.fit/1"}\n', "a,b,c\n1,2,3\n"])
def test_unrecognised_format(tmp_path, text):
    with pytest.raises(InputError, match="unrecognised format"):
        load_probe_table(write(tmp_path, "x.txt", text))


def test_csv_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes("prefix_tokens,leg,ttft_ms\r\n1024,pull,5\r\n".encode("utf-8-sig"))
    assert load_probe_table(path).lengths == [1024]


def test_binary_file_is_rejected(tmp_path):
    path = tmp_path / "b.bin"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe\x00")
    with pytest.raises(InputError, match="not a text file"):
        load_probe_table(path)


# --- run folder -------------------------------------------------------------------------------


def test_run_folder_valid_attempt_counts_and_invalid_are_counted(tmp_path):
    records = [
        probe(0, 1024, "recompute", 30.0),
        probe(1, 1024, "pull", None, valid=False, probe_id="p1"),
        probe(1, 1024, "pull", 22.0, attempt=1, probe_id="p1"),
        probe(2, 2048, "recompute", 60.0),
        probe(3, 2048, "pull", 25.0),
        probe(4, 4096, "pull", 31.0, valid=False),
    ]
    table = load_probe_table(write_run(tmp_path / "run", records))
    assert table.n_invalid_excluded == 2
    assert sorted(table.probes["ttft_ms"].tolist()) == [22.0, 25.0, 30.0, 60.0]
    assert table.block_size == 64 and table.kv_bytes_per_token == 2048
    assert table.origin.kind == "run-folder" and table.origin.run == "sim-run"
    assert table.setup == RunSetup(**SETUP)
    assert any("2 invalid probe record(s) excluded" in w for w in table.warnings)


def test_run_folder_warns_on_lengths_off_the_block_size(tmp_path):
    records = [probe(0, 1000, "recompute", 30.0), probe(1, 1000, "pull", 20.0)]
    table = load_probe_table(write_run(tmp_path / "run", records))
    assert table.lengths == [1000]
    assert any("not multiples of the block size 64" in w for w in table.warnings)


def test_run_folder_torn_last_line_is_skipped_with_a_warning(tmp_path):
    records = [probe(0, 1024, "recompute", 30.0), probe(1, 1024, "pull", 20.0)]
    table = load_probe_table(write_run(tmp_path / "run", records, tail='{"schema": "kvcal.probe/1", "probe_'))
    assert len(table.probes) == 2
    assert any("torn" in w for w in table.warnings)


def test_run_folder_corrupt_middle_line_is_an_error(tmp_path):
    folder = write_run(tmp_path / "run", [probe(0, 1024, "recompute", 30.0)])
    good = (folder / "probes.jsonl").read_text()
    (folder / "probes.jsonl").write_text('{"oops": 1}\n' + good)
    with pytest.raises(InputError, match="line 1 is corrupt"):
        load_probe_table(folder)


def test_folder_without_probes_or_manifest(tmp_path):
    (tmp_path / "run").mkdir()
    with pytest.raises(InputError, match="not a run folder"):
        load_probe_table(tmp_path / "run")
    (tmp_path / "run" / "run.json").write_text(manifest().model_dump_json(by_alias=True))
    with pytest.raises(InputError, match="no probes recorded"):
        load_probe_table(tmp_path / "run")


def test_bad_manifest(tmp_path):
    folder = write_run(tmp_path / "run", [probe(0, 1024, "recompute", 30.0)])
    (folder / "run.json").write_text(json.dumps({"schema": "kvcal.run/1", "name": "x"}))
    with pytest.raises(InputError, match="not a valid run manifest"):
        load_probe_table(folder)


def test_run_folder_with_only_invalid_probes(tmp_path):
    folder = write_run(tmp_path / "run", [probe(0, 1024, "recompute", 30.0, valid=False)])
    with pytest.raises(InputError, match="no valid probes"):
        load_probe_table(folder)


# --- synthetic ---------------------------------------------------------------------------------


def test_sim_table_shape_and_medians():
    table = sim_table(SimCosts(noise_cv=0.0), [512, 1024], 3, seed=1)
    assert len(table.probes) == 12
    med = table.medians()
    assert isinstance(med, pd.DataFrame)
    costs = SimCosts()
    assert med["recompute_ms"].tolist() == pytest.approx([costs.recompute_ms(512), costs.recompute_ms(1024)])
    assert med["pull_ms"].tolist() == pytest.approx([costs.pull_ms(512), costs.pull_ms(1024)])
