"""kvcal fleet's bounds (issue 40, items 2 and 6): the study's size said and capped before work, bad input refused
early."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from factories import make_fit
from kvcal.errors import InputError
from kvcal.fleet.costs import point_costs
from kvcal.fleet.policies.no_p2p import NoP2P
from kvcal.fleet.run import run_fleet
from kvcal.fleet.settings import DEFAULT_MAX_SIMULATED_REQUESTS, FleetConfig
from kvcal.fleet.sim import FleetSim
from kvcal.fleet.traffic import read_trace
from kvcal.fleet.workload import Workload, load_workload

EXAMPLE = Path(__file__).resolve().parents[3] / "docs" / "examples" / "fleet-workload.yaml"


def _never_run(*_):
    raise AssertionError("a run started")


def test_a_study_over_the_cap_is_refused_before_any_run_naming_the_flag_that_allows_it():
    config = FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE, thresholds=[640], rate=1e4, seeds=10)
    with pytest.raises(InputError, match="--max-simulated-requests"):
        run_fleet(config, make_fit(), _never_run)
    said = []
    small = config.model_copy(update={"rate": 0.05, "seeds": 1, "duration_s": 60.0})
    run_fleet(small, make_fit(), lambda *a: None, announce=said.append)
    assert len(said) == 1 and "3 runs" in said[0] and "simulated requests" in said[0] and "MiB" in said[0]


def test_the_cap_is_a_stated_default_and_raising_it_allows_the_study():
    default = FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE)
    assert default.max_simulated_requests == DEFAULT_MAX_SIMULATED_REQUESTS
    config = FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE, thresholds=[640], rate=0.05, duration_s=60.0,
                         seeds=1, max_simulated_requests=10)
    with pytest.raises(InputError, match="raise --max-simulated-requests to at least"):
        run_fleet(config, make_fit(), _never_run)


@pytest.mark.parametrize("values, flag", [
    ({"thresholds": [int("1" + "0" * 400)]}, "--thresholds"),
    ({"thresholds": [0]}, "--thresholds"),
    ({"seeds": 10**6}, "--seeds"),
    ({"pods": 0}, "--pods"),
    ({"loads": [1.0, -2.0]}, "--loads"),
    ({"max_simulated_requests": 0}, "--max-simulated-requests"),
])
def test_every_flag_is_bounded_by_the_settings_model_with_one_line_naming_it(values, flag):
    with pytest.raises(InputError, match=flag) as err:
        FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE, **values)
    assert "\n" not in str(err.value) and len(str(err.value)) < 200


def test_repeated_thresholds_are_simulated_once_with_a_note():
    config = FleetConfig(fit_path=Path("f"), workload_path=EXAMPLE, thresholds=[640, 128, 640], rate=0.05,
                         duration_s=60.0, seeds=1)
    result = run_fleet(config, make_fit(), lambda *a: None)
    assert [r.threshold for r in result.rows if r.policy == "threshold"] == [640, 128]
    assert any("repeated 640" in n for n in result.notes)


def _example_with(tmp_path: Path, old: str, new: str) -> Path:
    text = EXAMPLE.read_text()
    assert old in text
    path = tmp_path / "w.yaml"
    path.write_text(text.replace(old, new))
    return path


def test_a_rate_written_as_a_string_and_a_trace_beside_an_arrival_are_refused(tmp_path):
    with pytest.raises(InputError, match="arrival.rate"):
        load_workload(_example_with(tmp_path, "rate: 1.5 ", 'rate: "1.5" '))
    with pytest.raises(InputError, match="either a trace, or arrival and sessions"):
        load_workload(_example_with(tmp_path, "# trace:", "trace: {per_request: t.json}\n# "))


def test_a_run_where_nothing_completes_refuses_to_recommend(tmp_path):
    w = _example_with(tmp_path, "{dist: lognormal, mean: 400, cv: 0.8}", "1000000000")
    config = FleetConfig(fit_path=Path("f"), workload_path=w, thresholds=[640], rate=0.2, duration_s=120.0, seeds=1)
    with pytest.raises(InputError, match="no request can complete: the shortest turn"):
        run_fleet(config, make_fit(), _never_run)  # every prompt is 1e9 tokens: refused before any run
    w = _example_with(tmp_path, "{dist: lognormal, mean: 400, cv: 0.8}", "{dist: lognormal, mean: 1000000000, cv: 0.1}")
    with pytest.raises(InputError, match="no request completed in the measured window"):
        run_fleet(config.model_copy(update={"workload_path": w}), make_fit(), lambda *a: None)
    with pytest.raises(InputError, match="decode_step_ms"):
        load_workload(_example_with(tmp_path, "decode_step_ms: null", "decode_step_ms: 1e300"))


def test_a_long_run_reports_its_progress_from_inside():
    w = load_workload(EXAMPLE).with_overrides(rate=2.0, duration_s=120.0)
    seen: list[float] = []
    FleetSim(w, 4, point_costs(make_fit()), NoP2P(), 64, seed=0, on_tick=seen.append).run()
    assert seen and seen == sorted(seen) and 0 < seen[0] < 120


def test_a_trace_is_read_record_by_record_as_the_whole_file_reads(tmp_path):
    records = [{"start_time": 5.0 - i, "error": None if i != 2 else "timeout",
                "info": {"input_tokens": 100 + i, "response_metrics": {"output_token_times": [1.0] * (i + 1)}}}
               for i in range(5)]
    path = tmp_path / "t.json"
    path.write_text(" [\n" + " ,\n".join(json.dumps(r, indent=1) for r in records) + "\n]\n")
    assert read_trace(path) == ((1.0, 104, 5), (2.0, 103, 4), (4.0, 101, 2), (5.0, 100, 1))
    one = json.dumps(records[0])
    for bad, says in ((f"[{one}] x", "extra data"), (f"[{one} {one}]", "expected ','"), ("{}", "list")):
        path.write_text(bad)
        with pytest.raises(InputError, match=says):
            read_trace(path)


def test_the_workload_model_bounds_what_the_simulation_reads():
    with pytest.raises(ValueError):
        Workload.model_validate({"duration_s": 10, "warmup_s": 1, "arrival": {"rate": "3"},
                                 "sessions": {"system_prompt_tokens": 0, "turns": 1, "input_tokens": 1,
                                              "output_tokens": 1}})


def test_engine_steps_count_toward_the_cap_where_requests_are_few(tmp_path):
    # Few requests, each decoding a million tokens for a day: the steps are the work, and the cap sees them.
    w = _example_with(tmp_path, "{dist: lognormal, mean: 150, cv: 0.5}", "1000000")
    config = FleetConfig(fit_path=Path("f"), workload_path=w, pods=64, thresholds=[640], rate=0.01,
                         duration_s=86_400.0, seeds=1)
    with pytest.raises(InputError, match=r"requests and [\d.,]+ million engine steps .*--max-simulated-requests"):
        run_fleet(config, make_fit(), _never_run)
