"""kvcal history: order by run time, label by provenance change, table, plot, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcal.gate.loaded_runs import load_run
from kvcal.gate.history import build_history, plot_history, provenance_changes
from kvcal.records.fit import FitResult

import factories

PROVENANCE = {
    "kvcal_version": "0.1.0", "vllm_version": "0.32.0", "nixl_version": "1.5.1", "torch_version": "2.13.0",
    "cpu_model": "Xeon", "ucx_env": {}, "command_line": "kvcal sweep --name x",
}


def fit_of(be: float | None, *, status: str = "crossover", pull_us: float = 3.0, fitted_at: str = "2026-06-01T00:00:00+00:00") -> FitResult:
    return factories.make_fit(
        status=status, break_even_tokens=be, break_even_ci=[be * 0.9, be * 1.1] if be else None,
        measured_range=[256, 8192], pull=factories.make_curve(20.0, pull_us),
        setup={"model": "tiny", "transport": "nixl-pd"}, created_at=fitted_at,
    )


def run_folder(root: Path, name: str, created_at: str, fit: FitResult, **provenance) -> Path:
    """A run folder with run.json (its created_at orders the history) and fit.json; returns fit.json."""
    folder = root / name
    folder.mkdir(parents=True)
    manifest = factories.make_manifest(
        name=name, created_at=created_at,
        setup={"model": "tiny", "engine": "sim", "transport": provenance.pop("transport", "nixl-pd"), "block_size": 64,
               "kv_bytes_per_token": 2048, "created_at": created_at},
        provenance={**PROVENANCE, "command_line": f"kvcal sweep --name {name}", **provenance})
    (folder / "run.json").write_text(manifest.model_dump_json(by_alias=True))
    (folder / "fit.json").write_text(fit.model_dump_json(by_alias=True))
    return folder / "fit.json"


@pytest.fixture
def three_runs(tmp_path):
    # Given out of order; fitted in the opposite order from measured, so only run time can order them.
    late = run_folder(tmp_path, "c-tcp", "2026-03-01T00:00:00+00:00", fit_of(9000, pull_us=9.0, fitted_at="2026-01-01T00:00:00+00:00"),
                      vllm_version="0.33.0", ucx_env={"UCX_TLS": "tcp"})
    first = run_folder(tmp_path, "a-base", "2026-01-01T00:00:00+00:00", fit_of(1500, fitted_at="2026-03-01T00:00:00+00:00"))
    middle = run_folder(tmp_path, "b-vllm", "2026-02-01T00:00:00Z", fit_of(1600, fitted_at="2026-02-01T00:00:00+00:00"),
                        vllm_version="0.33.0")
    return [late, first, middle]


def test_runs_are_ordered_by_run_time_and_labelled_by_what_changed(three_runs):
    entries = build_history([load_run(p) for p in three_runs])
    assert [e.run.label for e in entries] == ["a-base", "b-vllm", "c-tcp"]
    assert entries[0].changes == ["first run"]
    assert entries[1].changes == ["vllm 0.32.0->0.33.0"]  # command_line differs too, but is noise
    assert entries[2].changes == ["UCX_TLS unset->tcp"]


def test_provenance_changes_put_versions_and_transport_first():
    before = {"vllm_version": "0.32", "transport": "nixl-pd", "cpu_model": "A", "zeta": 1}
    after = {"vllm_version": "0.33", "transport": "p2p-tier", "cpu_model": "B", "zeta": 2}
    assert provenance_changes(before, after) == ["vllm 0.32->0.33", "transport nixl-pd->p2p-tier", "cpu_model A->B", "zeta 1->2"]
    assert provenance_changes(before, dict(before)) == []


def test_history_plot_is_a_png_of_the_expected_size_and_series(three_runs, tmp_path):
    from matplotlib.image import imread

    entries = build_history([load_run(p) for p in three_runs])
    fig = plot_history(entries)
    ax_be, ax_slope, ax_fixed = fig.axes
    assert len(ax_be.containers) == 1  # one errorbar series: the break-even with its interval
    assert len(ax_slope.lines) == 2 and len(ax_fixed.lines) == 2  # recompute and pull, per panel
    assert list(ax_slope.lines[1].get_ydata()) == [3.0, 3.0, 9.0]  # pull us/token in run-time order
    out = tmp_path / "trend.png"
    fig.savefig(out)
    image = imread(out)
    assert image.shape[:2] == (800, 1000)


def test_runs_without_a_break_even_are_marked_not_plotted_as_numbers(tmp_path):
    paths = [run_folder(tmp_path, "a", "2026-01-01T00:00:00+00:00", fit_of(1500)),
             run_folder(tmp_path, "b", "2026-01-02T00:00:00+00:00", fit_of(None, status="recompute-always-wins"))]
    fig = plot_history(build_history([load_run(p) for p in paths]))
    errorbar = fig.axes[0].containers[0]
    assert len(errorbar.lines[0].get_xdata()) == 1  # only the crossover run has a point
    assert any("recompute-always-wins" in t.get_text() for t in fig.axes[0].texts)


def test_cli_history_table_plot_and_markdown(three_runs, tmp_path, kvcal):
    result = kvcal("history", *three_runs, "-o", tmp_path / "h.png", "--markdown", tmp_path / "h.md")
    assert result.code == 0, result.err
    assert result.out.index("a-base") < result.out.index("b-vllm") < result.out.index("c-tcp")
    assert (tmp_path / "h.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (tmp_path / "h.md").read_text()
    assert "| 3 | c-tcp |" in md and "UCX_TLS unset->tcp" in md


def test_cli_history_bad_input_exits_2(tmp_path, kvcal):
    broken = tmp_path / "fit.json"
    broken.write_text("{not json")
    for bad in (tmp_path / "missing", broken):
        result = kvcal("history", bad)
        assert result.code == 2 and result.err.startswith("kvcal: error:") and result.err.count("\n") == 1


def test_history_of_real_sweeps_fits_run_folders_and_names_the_change(tmp_path, kvcal, monkeypatch):
    """Two simulated sweeps written by the real runner (no fit.json): fitted on the spot, ordered, labelled."""
    from kvcal.sweep import runner
    from kvcal.settings.sweep import SweepConfig

    folders = []
    for name, floor_ms in (("first", 40.0), ("second", 60.0)):
        stamp = f"2026-05-0{len(folders) + 1}T00:00:00+00:00"  # run.json's created_at has one-second resolution
        monkeypatch.setattr(runner, "utc_now", lambda stamp=stamp: stamp)
        config = SweepConfig.model_validate(dict(
            engine="sim", prefix_lengths=[256, 512, 1024, 2048, 4096], reps=3, output_dir=tmp_path, name=name,
            sim={"pull_intercept_ms": floor_ms}))
        folders.append(runner.run_sweep(config).run_dir)
    result = kvcal("history", folders[1], folders[0], "--markdown", tmp_path / "h.md")
    assert result.code == 0, result.err
    rows = [line for line in (tmp_path / "h.md").read_text().splitlines() if line.startswith("| 1 ") or line.startswith("| 2 ")]
    assert "first" in rows[0] and "second" in rows[1]
    assert "pull_intercept_ms 40.0->60.0" in rows[1]
