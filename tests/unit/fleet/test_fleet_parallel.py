"""`kvcal fleet --jobs/--ray`'s executor (issue 45): the same results in the same order whoever runs them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from factories import sim_table
from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit import fit_table
from kvcal.fleet.parallel import Executor, default_jobs
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.fit_record import FitSettings

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet-workload.yaml"


def _square_with_pid(shared: int, task: int) -> tuple[int, int]:
    if task < 0:
        raise InputError(f"task {task} refused")
    return shared + task * task, os.getpid()


def test_a_pool_returns_results_in_task_order_and_counts_every_finished_run():
    finished = []
    out = Executor(jobs=2).map(_square_with_pid, 100, list(range(40)), lambda n, t: finished.append((n, t)))
    assert [value for value, _ in out] == [100 + t * t for t in range(40)]
    assert {pid for _, pid in out} - {os.getpid()}, "no run went to a worker process"
    assert [n for n, _ in finished] == list(range(1, 41)) and sorted(t for _, t in finished) == list(range(40))


def test_an_error_in_a_worker_is_raised_as_it_was():
    with pytest.raises(InputError, match="task -3 refused"):
        Executor(jobs=2).map(_square_with_pid, 0, [1, 2, -3, 4], lambda *a: None)


def test_jobs_are_bounded_and_default_to_the_usable_cores():
    assert default_jobs() == len(os.sched_getaffinity(0))
    assert FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE).executor().jobs == default_jobs()
    with pytest.raises(InputError, match="--jobs must lie within"):
        Executor(jobs=0).check()


def test_without_ray_the_flag_is_one_input_error_naming_the_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(InputError, match=r"pip install 'kvcal\[ray\]'"):
        Executor(ray_address="local").check()


@pytest.mark.parametrize("address", ["ray://u:Zq9pw@h:10001", "ray://a..b:10001", "ray://1.2.3.999:1", "http://h:1",
                                     "ray://h:0", "h", " "])
def test_a_ray_address_is_checked_before_any_work_and_never_echoes_a_secret(address):
    with pytest.raises(InputError, match="--ray") as err:
        Executor(ray_address=address).check()
    assert "Zq9pw" not in str(err.value)


def test_a_study_on_two_processes_is_byte_identical_to_one():
    fit = fit_table(sim_table(SimCosts(), [256, 512, 1024, 2048], 3), settings=FitSettings(n_resamples=200))

    def study(jobs: int) -> str:
        config = FleetConfig(fit_path=Path("fit.json"), workload_path=EXAMPLE,
                             pods=3, thresholds=[256, 1024], rate=0.4, duration_s=60,
                             loads=[0.8], seeds=2, resamples=3, jobs=jobs)
        return run_fleet(config, fit, lambda *a: None).model_dump_json()

    assert study(2) == study(1)
