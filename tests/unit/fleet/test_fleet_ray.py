"""`kvcal fleet --ray` on a local Ray instance (issue 45): one ray.init for the module, the same JSON as --jobs 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from factories import sim_table
from kvcal.engines.sim import SimCosts
from kvcal.errors import InputError
from kvcal.fit import fit_table
from kvcal.fleet.run import FleetConfig, run_fleet
from kvcal.records.fit import FitSettings

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'kvcal[ray]'; the test extra brings it)")
pytestmark = pytest.mark.ray
EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet-workload.yaml"


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    # Two CPUs and a small object store: the CI machine is shared; kvcal joins this instance instead of starting one.
    ray.init(address="local", num_cpus=2, object_store_memory=80 * 1024**2, include_dashboard=False,
             log_to_driver=False, logging_level="ERROR")
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def fit():
    return fit_table(sim_table(SimCosts(), [256, 512, 1024, 2048], 3), settings=FitSettings(n_resamples=200))


def test_a_study_on_ray_is_byte_identical_to_one_process(fit):

    def study(**where) -> str:
        config = FleetConfig(fit_path=Path("fit.json"), workload_path=EXAMPLE,
                             pods=3, thresholds=[256, 1024], rate=0.4, duration_s=60,
                             seeds=2, resamples=2, **where)
        return run_fleet(config, fit, lambda *a: None).model_dump_json()

    assert study(ray_address="local") == study(jobs=1)


def test_an_error_in_a_ray_task_is_the_runs_own_one_line(fit):
    # No session arrives in a 31 s run (30 s warm-up) at 0.001/s: the run's InputError, not Ray's wrapper of it.
    config = FleetConfig(fit_path=Path("fit.json"), workload_path=EXAMPLE,
                         pods=2, thresholds=[256], rate=0.001, duration_s=31, seeds=1,
                         ray_address="local")
    with pytest.raises(InputError, match="no request arrived"):
        run_fleet(config, fit, lambda *a: None)
