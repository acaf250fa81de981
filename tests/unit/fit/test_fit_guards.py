"""What the fit removes or refuses before fitting: recipe failures, 0 MB rows, duplicates, warm-up; host disturbance."""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

import pytest

from kvcal.engines.sim import SimCosts
from kvcal.fit import fit_table
from kvcal.fit.hygiene import warmup_test
from kvcal.fit.tables import from_rows, load_probe_table
from factories import sim_table
from kvcal.records.fit import FitResult
from kvcal.records.run import Leg, ProbeRecord, RunSetup
from kvcal.records import disturbance_bounds
from kvcal.sweep import host_monitors
from kvcal.records.fit import FitSettings
from kvcal.settings.sweep import SweepConfig
from kvcal.records.run_folder import RunFolder
from kvcal.sweep.runner import run_sweep

JOB = (Path(__file__).parents[2] / "fixtures" / "llmd" / "gpt-oss-120b-job.log").read_text()
LADDER = [256, 512, 1024, 2048, 4096, 8192]


@pytest.mark.parametrize("line", [
    "CONTROL CONTAMINATED: the no-pull control moved 75.5 MB at 2048 tokens",
    "RUN DISCARDED: producer restarted mid-run",
    "NO PULL EVER FIRED: check PYTHONHASHSEED on every peer",
    "2026-05-01T10:00:00Z RUN DISCARDED: stamped by kubectl logs --timestamps",
])
def test_recipe_failure_lines_make_fit_refuse_with_the_recipes_reason(kvcal, tmp_path, line):
    log = tmp_path / "job.log"
    log.write_text(JOB + line + "\n")
    res = kvcal("fit", log)
    assert res.code == 2
    reason = line.split("Z ", 1)[-1]
    assert reason in res.err and "\n" == res.err[-1] and res.err.count("\n") == 1
    assert not (tmp_path / "job.fit.json").exists()


def test_no_crossover_is_a_valid_recompute_always_wins(kvcal, tmp_path):
    table = "  tokens recompute_ms pull_ms delta pulled_MB\n" + "".join(
        f"{n} {r} {p} {100 * (p - r) / r:+.1f}% {n * 0.0369:.1f}\n"
        for n, r, p in ((2048, 50.0, 80.0), (8192, 180.0, 200.0), (16384, 360.0, 380.0)))
    log = tmp_path / "job.log"
    log.write_text(table + "NO CROSSOVER in the tested range: pull never beat recompute\n")
    assert kvcal("fit", log, "-o", tmp_path / "fit.json").code == 0
    fit = FitResult.model_validate_json((tmp_path / "fit.json").read_text())
    assert fit.status == "recompute-always-wins"
    res = kvcal("emit-config", tmp_path / "fit.json", "--format", "env")
    assert res.code == 3 and res.out == ""


def test_zero_mb_rows_are_excluded_as_non_pulls_and_counted(tmp_path):
    lines = JOB.splitlines()
    lines.insert(3, "    1024          40.0       38.0   -5.0%        0.0")
    lines.insert(5, "    4096         110.0       90.0  -18.2%          0")
    log = tmp_path / "job.log"
    log.write_text("\n".join(lines) + "\n")
    fit = fit_table(load_probe_table(log), settings=FitSettings(n_resamples=200))
    assert fit.n_invalid_excluded == 2
    assert fit.measured_range == [2048, 49152] and fit.n_probes == 10
    assert any("moved 0 MB" in w for w in fit.warnings)
    data = json.loads(fit.model_dump_json(by_alias=True))
    assert data["n_invalid_excluded"] == 2


@pytest.mark.parametrize("copies", [2, 5])
def test_duplicated_rows_are_counted_warned_and_collapsed(tmp_path, copies):
    once = sim_table(SimCosts(), LADDER, 3, seed=2)
    csv = tmp_path / "probes.csv"
    text = once.probes.drop(columns=["order"]).to_csv(index=False)
    body = text.split("\n", 1)[1]
    csv.write_text(text + body * (copies - 1))
    fit = fit_table(load_probe_table(csv), settings=FitSettings(n_resamples=300, seed=1))
    single = fit_table(once, settings=FitSettings(n_resamples=300, seed=1))
    assert fit.n_duplicates_collapsed == len(once.probes) * (copies - 1)
    assert fit.n_probes == len(once.probes)
    assert fit.break_even_ci == single.break_even_ci
    assert any("duplicated row" in w for w in fit.warnings)


def test_a_csv_concatenated_with_its_header_is_collapsed_too(tmp_path):
    text = sim_table(SimCosts(), LADDER, 2, seed=2).probes.drop(columns=["order"]).to_csv(index=False)
    csv = tmp_path / "twice.csv"
    csv.write_text(text + text)
    assert load_probe_table(csv).n_duplicates == 24


def _slowed(factor: float, seed: int = 5):
    table = sim_table(SimCosts(), LADDER, 3, seed=seed)
    rows = table.probes.astype(object).to_dict("records")
    for i, row in enumerate(rows):
        row["order"] = i
        row["bytes_moved"] = None
        if row["rep"] == 0:
            row["ttft_ms"] *= factor
    return from_rows(rows, setup=RunSetup(block_size=64))


def test_a_warm_up_effect_is_detected_and_its_probes_excluded():
    fit = fit_table(_slowed(1.5), settings=FitSettings(n_resamples=300))
    assert fit.n_warmup_excluded == 12 and fit.n_probes == 24
    assert any("warm-up effect" in w and "excluded" in w for w in fit.warnings)
    clean = fit_table(_slowed(1.0), settings=FitSettings(n_resamples=300))
    assert clean.n_warmup_excluded == 0 and not any("warm-up effect" in w for w in clean.warnings)


def test_the_warm_up_test_uses_recorded_time_order_over_rep():
    table = _slowed(1.0)
    probes = table.probes.copy()
    last_in_time = probes.groupby(["prefix_tokens", "leg"])["order"].transform("max") == probes["order"]
    probes.loc[last_in_time, "order"] = -1  # rep 2 ran first
    probes.loc[last_in_time, "ttft_ms"] *= 1.5
    mask, note = warmup_test(probes)
    assert note is not None and mask.sum() == 12 and (probes.loc[mask, "rep"] == 2).all()


def test_sweep_warm_up_probes_are_recorded_and_never_fitted(tmp_path):
    config = SweepConfig(engine="sim", prefix_lengths=[256, 1024, 4096], reps=2, output_dir=tmp_path, name="run",
                         warmup_probes=True)
    run_sweep(config)
    records = RunFolder(tmp_path / "run").read_probes()
    warm = [r for r in records if r.warmup]
    assert len(warm) == 6 and all(not r.valid and r.probe_id.endswith("-warmup") for r in warm)
    assert {(r.prefix_tokens, r.leg) for r in warm} == {(n, leg) for n in (256, 1024, 4096) for leg in Leg}
    fit = fit_table(load_probe_table(tmp_path / "run"), settings=FitSettings(n_resamples=200))
    assert fit.n_probes == 12 and fit.n_invalid_excluded == 0
    off = SweepConfig(engine="sim", prefix_lengths=[256, 1024], reps=1, output_dir=tmp_path, name="off")
    run_sweep(off)
    assert not any(r.warmup for r in RunFolder(tmp_path / "off").read_probes())


# ---------------------------------------------------------------- host disturbance

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait")


def test_cpu_monitor_charges_others_not_the_pair(monkeypatch):
    state = {"t": 0.0, "busy": [0.0, 0.0], "tree": 0.0}
    monkeypatch.setattr(host_monitors.time, "monotonic", lambda: state["t"])
    monkeypatch.setattr(host_monitors.psutil, "cpu_times",
                        lambda percpu: [CpuTimes(b, 0.0, 0.0, 100.0 - b, 0.0) for b in state["busy"]])
    monkeypatch.setattr(host_monitors, "_tree_cpu_s", lambda cores: state["tree"])
    monitor = host_monitors.CpuMonitor([0, 1])
    # 1 s: the pair used 1.5 core-seconds and the cores were 1.5 busy: nobody else.
    state.update(t=1.0, busy=[0.75, 0.75], tree=1.5)
    assert monitor.after_probe() == 0.0
    # next 1 s: the cores were fully busy (2 core-s) while the pair used 1: others took half.
    state.update(t=2.0, busy=[1.75, 1.75], tree=2.5)
    assert monitor.after_probe() == 0.5


def _record(i: int, busy: float | None) -> ProbeRecord:
    return ProbeRecord(probe_id=f"p{i:04d}-L256-pull-r0", plan_index=i, attempt=0, prefix_tokens=256, leg=Leg.PULL, rep=0,
                       ttft_ms=10.0, bytes_moved=1, valid=True, started_at="2026-01-01T00:00:00Z", host_busy=busy)


def test_summary_names_the_probes_and_marks_the_run_beyond_the_bound():
    quiet = disturbance_bounds.summarise([_record(i, 0.02) for i in range(20)] + [_record(99, 0.4)], "cpu cores 0,1")
    assert not quiet.disturbed and quiet.disturbed_probes == ["p0099-L256-pull-r0 (40%)"]
    busy = disturbance_bounds.summarise([_record(i, 0.3 if i % 2 else 0.01) for i in range(20)], "cpu cores 0,1")
    assert busy.disturbed and len(busy.disturbed_probes) == 10 and busy.max == 0.3
    assert disturbance_bounds.summarise([_record(i, None) for i in range(3)]) is None


def test_a_disturbed_sweep_is_marked_in_fit_json_and_refused(kvcal, tmp_path, monkeypatch):
    class Busy:
        resource = "cpu cores 0,1"

        def before_probe(self) -> None:
            return None

        def after_probe(self) -> float:
            return 0.42

    monkeypatch.setattr(host_monitors, "monitor_for", lambda description: Busy())
    run_sweep(SweepConfig(engine="sim", prefix_lengths=[256, 1024, 4096], reps=2, output_dir=tmp_path, name="run"))
    records = RunFolder(tmp_path / "run").read_probes()
    # the cold first pull runs before the monitor is primed (kvcal/sweep/coldstart.py): not measured
    assert all(r.host_busy == 0.42 for r in records if r.session != "cold")
    res = kvcal("fit", tmp_path / "run")
    assert res.code == 0 and "DISTURBED HOST" in res.out and "42%" in res.out
    fit = FitResult.model_validate_json((tmp_path / "run" / "fit.json").read_text())
    assert fit.host_disturbance.disturbed and len(fit.host_disturbance.disturbed_probes) == 12
    refused = kvcal("emit-config", tmp_path / "run", "--format", "env")
    assert refused.code == 3 and refused.out == "" and "--allow-disturbed" in refused.err


def test_monitor_choice_follows_the_pair():
    assert host_monitors.monitor_for({"engine": "sim"}) is None
    assert host_monitors.monitor_for({"engine": "vllm", "mode": "attach"}) is None
    cpu = host_monitors.monitor_for({"engine": "vllm", "mode": "launch", "device": "cpu",
                                   "env": {"producer": {"VLLM_CPU_OMP_THREADS_BIND": "0"},
                                           "consumer": {"VLLM_CPU_OMP_THREADS_BIND": "0"}}})
    assert isinstance(cpu, host_monitors.CpuMonitor) and cpu.cores == [0]
    assert disturbance_bounds.parse_cpus("0-2,5") == [0, 1, 2, 5] and disturbance_bounds.parse_cpus("auto") == []


def test_gpu_monitor_reads_foreign_processes_from_nvidia_smi(monkeypatch):
    """Parsing only: the NVML / nvidia-smi path is not checked on GPU hardware."""
    import subprocess

    outputs = {"--query-gpu=index,uuid,utilization.gpu": "0, GPU-a, 90\n1, GPU-b, 40\n",
               "--query-compute-apps=gpu_uuid,pid": "GPU-b, 999999\n"}

    def fake_run(argv, **kw):
        return subprocess.CompletedProcess(argv, 0, stdout=outputs[argv[1]], stderr="")

    monkeypatch.setattr(host_monitors.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(host_monitors.subprocess, "run", fake_run)
    monitor = host_monitors.GpuMonitor([0, 1])
    monitor._nvml = None
    monitor.before_probe()
    assert monitor.after_probe() == 0.4  # GPU 0 is busier, but only GPU 1 runs someone else's process
    only_ours = host_monitors.GpuMonitor([0])
    only_ours._nvml = None
    only_ours.before_probe()
    assert only_ours.after_probe() == 0.0
