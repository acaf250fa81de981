"""Files under faults: whole-or-nothing writes, colliding writers, stuck run folders, records that lie.

The full-disk checks, which need a small tmpfs, are in tests/cli/test_installed_faults.py.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import re
import threading
import time
from pathlib import Path

import pytest

from kvcal.emit import helm_patch
from kvcal.errors import InputError
from kvcal.outputs import replacing, write_file, writer_lock
from kvcal.records import Leg, PlannedProbe
from kvcal.sweep.lock import claim_run_folder
from kvcal.runfolder import RunFolder
from kvcal.sweep.runner import run_sweep
from tests.factories import make_manifest, make_probe, write_run_folder
from tests.unit.sweep.test_sweep import Crash, crashing_factory, sim_config

ROUTER = Path(__file__).resolve().parents[2] / "fixtures" / "values" / "router-p2p.yaml"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old\n")
    target.chmod(0o640)
    with pytest.raises(InputError, match=r"No space left on device\); the old file is unchanged"):
        with replacing(target, "-o out.json") as handle:
            handle.write(b"half of the new")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert target.read_text() == "old\n" and os.listdir(tmp_path) == ["out.json"]
    write_file(target, "new\n", "-o out.json")
    assert target.read_text() == "new\n" and (target.stat().st_mode & 0o777) == 0o640
    assert os.listdir(tmp_path) == ["out.json"]


def test_a_write_through_a_link_replaces_the_linked_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.csv"
    real.write_text("old\n")
    (tmp_path / "link.csv").symlink_to(real)
    write_file(tmp_path / "link.csv", "new\n", "-o link.csv")
    assert (tmp_path / "link.csv").is_symlink() and real.read_text() == "new\n"


def test_a_second_writer_of_a_folder_waits_and_is_refused_after_its_wait(tmp_path):
    target = tmp_path / "fit.json"
    with writer_lock(target, "fit.json"):
        with pytest.raises(InputError, match="another kvcal has been writing"):
            with writer_lock(target, "fit.json", wait_s=0.2):
                pass
    with writer_lock(target, "fit.json", wait_s=0.2):  # released: the next writer goes ahead
        pass


def _deltas(text: str) -> set[int]:
    return {int(v) for v in re.findall(r"minCachedTokenDelta: (\d+)", text)}


def test_two_in_place_patches_at_once_lose_neither_update(tmp_path, monkeypatch):
    target = tmp_path / "values.yaml"
    target.write_text(ROUTER.read_text())
    patch_text = helm_patch.patch_values_text

    def slow_patch(*args, **kwargs):  # widen the read-to-write window, as a loaded host would
        time.sleep(0.3)
        return patch_text(*args, **kwargs)

    monkeypatch.setattr(helm_patch, "patch_values_text", slow_patch)
    errors: list[BaseException] = []
    olds: dict[int, set[int]] = {}

    def patch(value: int) -> None:
        try:
            done = helm_patch.patch_values_file(target, helm_patch.PluginSpec(value), in_place=True)
            olds[value] = {int(v) for change in done.result.changes for v in change.old_values}
        except BaseException as err:  # noqa: BLE001 - reported by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=patch, args=(value,)) for value in (3200, 4096)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    # One patch read the other's result: it changed 3200 to 4096 or 4096 to 3200, not the original twice.
    assert 3200 in olds[4096] or 4096 in olds[3200]
    final = _deltas(target.read_text())
    backups = [_deltas(f.read_text()) for f in sorted(tmp_path.glob("values.yaml.bak*"))]
    assert len(backups) == 2 and final in ({3200}, {4096}) and (final ^ {3200, 4096}) <= set().union(*backups)


def test_a_complete_last_record_without_its_newline_is_kept_on_resume(tmp_path):
    config = sim_config(tmp_path)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=crashing_factory(2 + 5))  # 2: the opening calls (kvcal/sweep/coldstart.py)
    run = RunFolder(tmp_path / "run")
    run.probes_path.write_bytes(run.probes_path.read_bytes().rstrip(b"\n"))
    assert len(run.read_probes()) == 1 + 5 and not run.torn_tail()
    outcome = run_sweep(config, resume=True)
    assert outcome.done_before == 5 and outcome.measured == 11
    ids = [r.probe_id for r in run.read_probes() if r.session != "cold"]
    assert len(ids) == len(set(ids)) == 16


def _planned(index: int, n: int, leg: str) -> PlannedProbe:
    return PlannedProbe(plan_index=index, probe_id=f"L{n}-{leg}-r0", prefix_tokens=n, leg=Leg(leg), rep=0)


def test_a_probe_that_contradicts_the_stored_plan_or_its_id_is_refused(tmp_path):
    plan = [_planned(0, 256, "recompute"), _planned(1, 256, "pull")]
    lying = [make_probe(0, 256, "recompute", 10.0, probe_id="L256-recompute-r0"),
             make_probe(1, 1024, "pull", 12.0, probe_id="L256-pull-r0")]
    run = RunFolder(write_run_folder(tmp_path / "plan", lying, manifest=make_manifest(plan=plan)))
    with pytest.raises(InputError, match=r"line 2 is refused: .* run.json's plan ran it at 256 tokens on the pull leg"):
        run.read_probes()
    by_id = [make_probe(0, 512, "recompute", 10.0, probe_id="L256-recompute-r0")]
    run = RunFolder(write_run_folder(tmp_path / "id", by_id))
    with pytest.raises(InputError, match="line 1 is refused: .* contradicts its id"):
        run.read_probes()


def test_a_start_up_killed_before_run_json_is_taken_over_and_its_logs_kept(tmp_path):
    stuck = tmp_path / "run"
    (stuck / "logs").mkdir(parents=True)
    (stuck / ".lock").write_text("4242\n")
    (stuck / "logs" / "producer.log").write_text("engine log\n")
    with pytest.raises(InputError, match="start-up never finished.*without --resume"):
        run_sweep(sim_config(tmp_path), resume=True)
    outcome = run_sweep(sim_config(tmp_path))
    assert outcome.measured == 16 and (stuck / "run.json").is_file()
    assert (stuck / "logs" / "producer.log").read_text().startswith("engine log\n")


def test_a_folder_with_more_than_start_up_leftovers_is_still_refused(tmp_path):
    (tmp_path / "run" / "logs").mkdir(parents=True)
    (tmp_path / "run" / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match="already exists; add --resume"):
        run_sweep(sim_config(tmp_path))


def test_fit_of_a_run_whose_sweep_is_alive_says_so_and_how_far_it_got(tmp_path, kvcal):
    with pytest.raises(Crash):
        run_sweep(sim_config(tmp_path), pair_factory=crashing_factory(2 + 12))  # 2: the opening calls (coldstart.py)
    with claim_run_folder(tmp_path / "run", new=False):  # as a running sweep holds it
        result = kvcal("fit", tmp_path / "run", "--resamples", "0")
    assert result.code == 0, result.err
    assert f"still running (pid {os.getpid()}): 12 of the 16 planned probes are in" in result.err
    quiet = kvcal("fit", tmp_path / "run", "--resamples", "0")
    assert quiet.code == 0 and "still running" not in quiet.err


def test_export_collapses_repeated_attempts_and_warm_ups_as_fit_does(tmp_path, kvcal):
    probes = [make_probe(i, n, leg, 10.0 + i, probe_id=f"L{n}-{leg}-r0", attempt=attempt)
              for i, (n, leg) in enumerate([(256, "recompute"), (256, "pull"), (1024, "recompute"), (1024, "pull")])
              for attempt in (0, 1)]
    warm = make_probe(9, 256, "pull", 50.0, probe_id="L256-pull-r0-warmup").model_copy(update={"warmup": True})
    run = write_run_folder(tmp_path / "run", [*probes, warm])
    result = kvcal("export", run, "-o", tmp_path / "p.csv")
    assert result.code == 0, result.err
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 1 + 4


@pytest.mark.parametrize("flag", ["--name", "--output-dir"])
def test_a_name_or_folder_that_is_not_utf8_is_an_input_error(tmp_path, kvcal, flag):
    value = "bad\udcff" if flag == "--name" else str(tmp_path / "d\udcfe")
    result = kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256", "--reps", "1", "--output-dir", tmp_path, flag, value)
    assert result.code == 2 and "not UTF-8" in result.err and ("bad\\xff" in result.err or "d\\xfe" in result.err)
    assert not any(tmp_path.glob("*/run.json"))


def test_a_campaign_string_with_a_surrogate_escape_is_an_input_error(tmp_path, kvcal):
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text('engine: sim\nprefix-lengths: [256, 1024]\nreps: 1\nname: "x\\udcff"\n')
    result = kvcal("sweep", "--config", campaign, "--output-dir", tmp_path)
    assert result.code == 2 and "surrogate escape" in result.err, result.err


class _LyingPair:
    """A simulated pair whose pulls report an absurd byte count and a NaN counter, as a broken engine might."""

    def __init__(self, pair) -> None:
        self._pair = pair

    def __getattr__(self, name: str):
        return getattr(self._pair, name)

    def __enter__(self):
        self._pair.__enter__()
        return self

    def __exit__(self, *exc):
        return self._pair.__exit__(*exc)

    def measure(self, leg, tokens):
        measured = self._pair.measure(leg, tokens)
        if leg is Leg.PULL:
            return dataclasses.replace(measured, bytes_moved=10**300, metrics_delta={"kv_bytes": float("nan")})
        return measured


def test_a_measurement_beyond_the_record_bounds_is_an_invalid_attempt_not_an_internal_error(tmp_path):
    from kvcal.errors import GateError
    from kvcal.sweep.runner import make_pair

    with pytest.raises(GateError, match="implausible bytes_moved"):
        run_sweep(sim_config(tmp_path, warmup_probes=False), pair_factory=lambda c, r: _LyingPair(make_pair(c, r)))
    records = RunFolder(tmp_path / "run").read_probes()  # what was written reads back
    assert records and all(r.valid for r in records if r.leg is Leg.RECOMPUTE)
    assert all(not r.valid and r.bytes_moved is None for r in records if r.leg is Leg.PULL)


def test_load_json_escapes_every_lone_surrogate_and_keeps_the_rest():
    from kvcal.userfiles import load_json

    text = '{"a\\ud800": ["x\\udcff", {"deep": [["\\ud83d\\ude00 ok", "lone \\udbff"]]}], "n": 1}'
    data = load_json(text)
    assert data == {"a\\ud800": ["x\\udcff", {"deep": [["\U0001f600 ok", "lone \\udbff"]]}], "n": 1}
    json.dumps(data, ensure_ascii=False).encode("utf-8")  # every string encodable now
    assert load_json('"\\ud800"') == "\\ud800" and load_json('[1, "plain"]') == [1, "plain"]
    escaped = '"\\\\ud800"'  # an escaped backslash, then the text ud800: no surrogate at all
    assert load_json(escaped) == "\\ud800"
