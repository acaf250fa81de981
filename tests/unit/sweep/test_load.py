"""Load states in the sweep: plan, records, background streams owned like engines, resume."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

from kvcal.engines.base import LoadTarget
from kvcal.engines.sim import SimCosts, SimPair
from kvcal.errors import EngineError, InputError
from kvcal.records.run import Leg, ProbeRecord
from kvcal.settings.sweep import SweepConfig
from kvcal.sweep.validate import resolve_config
from kvcal.sweep.load import BackgroundStream, LOAD_STATES, build_loaded_plan, parse_load_states
from kvcal.records.run_folder import RunFolder
from kvcal.sweep.runner import run_sweep

DELAYS = {"source_wait_ms": 30.0, "requeue_ms": 50.0, "busy_computing_ms": 80.0}


def loaded_config(tmp_path, **overrides) -> SweepConfig:
    base = dict(engine="sim", prefix_lengths=[256, 1024], reps=2, output_dir=tmp_path, name="run",
                load_states=list(LOAD_STATES), sim=DELAYS)
    base.update(overrides)
    return SweepConfig.model_validate(base)


class Crash(RuntimeError):
    pass


OPENING_CALLS = 2  # the consumer's first request and the cold first pull (kvcal/sweep/coldstart.py)


def planned(records):
    """The plan's probes: the cold first pulls (the session cost's samples) left out."""
    return [r for r in records if r.session != "cold"]


def owned_pairs(fail_after: int | None = None, error: BaseException = Crash("engine died")):
    """A factory of sim pairs that remembers them; measure raises ``error`` after ``fail_after`` calls."""
    pairs: list[SimPair] = []

    def factory(config, run):
        pair = SimPair(SimCosts(**DELAYS), block_size=config.engine.block_size, seed=config.probe.seed)
        original, calls = pair.measure, {"n": 0}

        def measure(leg, ids):
            calls["n"] += 1
            if fail_after is not None and calls["n"] > fail_after:
                raise error
            return original(leg, ids)

        pair.measure = measure
        pairs.append(pair)
        return pair

    return factory, pairs


def background_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("kvcal-load-")]


def test_loaded_plan_visits_every_state_per_rep_in_blocks_with_every_cell():
    plan = build_loaded_plan([256, 1024], 2, 7, list(LOAD_STATES))
    assert len(plan) == 2 * 2 * 4 * 2
    assert len({p.probe_id for p in plan}) == len(plan)
    cells = Counter((p.load_state, p.prefix_tokens, p.leg) for p in plan)
    assert set(cells.values()) == {2}
    blocks = [plan[i].load_state for i in range(0, len(plan), 4)]
    assert all(len({p.load_state for p in plan[i:i + 4]}) == 1 for i in range(0, len(plan), 4))
    assert sorted(blocks[:4]) == sorted(LOAD_STATES) and sorted(blocks[4:]) == sorted(LOAD_STATES)
    assert plan == build_loaded_plan([256, 1024], 2, 7, list(LOAD_STATES))
    assert plan != build_loaded_plan([256, 1024], 2, 8, list(LOAD_STATES))


@pytest.mark.parametrize("text", ["busy", "idle,,nope", ","])
def test_unknown_load_states_are_one_line_errors(text):
    with pytest.raises(InputError, match="--load-states"):
        parse_load_states(text)


def test_config_rejects_repeated_states_and_keeps_idle_by_default():
    assert SweepConfig().load.load_states == ["idle"]
    with pytest.raises(InputError, match="twice"):
        resolve_config({}, {"load_states": ["idle", "idle"]})


def test_loaded_sim_records_state_and_measured_queues(tmp_path):
    outcome = run_sweep(loaded_config(tmp_path, busy_queue_threshold=2))
    records = planned(RunFolder(outcome.run_dir).read_probes())
    assert len(records) == 32 and all(r.valid for r in records)
    for r in records:
        assert r.load_state in LOAD_STATES
        source_busy = r.load_state in ("source-busy", "both-busy")
        computing_busy = r.load_state in ("computing-busy", "both-busy")
        # default concurrency threshold + 2 streams: the simulated queue is one waiting request per stream
        assert r.source_waiting == (4 if source_busy else 0)
        assert r.computing_waiting == (4 if computing_busy else 0)
    idle_pull = [r.ttft_ms for r in records if r.load_state == "idle" and r.leg is Leg.PULL]
    both_pull = [r.ttft_ms for r in records if r.load_state == "both-busy" and r.leg is Leg.PULL]
    assert min(both_pull) > max(idle_pull) + 100  # 30 + 50 + 80 ms of simulated load
    assert not background_threads()


def test_idle_only_run_is_todays_plan_with_idle_records(tmp_path):
    outcome = run_sweep(loaded_config(tmp_path, load_states=["idle"]))
    records = planned(RunFolder(outcome.run_dir).read_probes())
    assert {r.load_state for r in records} == {"idle"}
    assert {(r.source_waiting, r.computing_waiting) for r in records} == {(None, None)}
    assert all(not r.probe_id.startswith("idle-") for r in records)


def test_background_streams_stop_when_a_probe_fails(tmp_path):
    factory, pairs = owned_pairs(fail_after=6)
    with pytest.raises(Crash):
        run_sweep(loaded_config(tmp_path), pair_factory=factory)
    assert pairs[0].streams == {"producer": 0, "consumer": 0}
    assert not background_threads()


def test_background_streams_stop_on_ctrl_c(tmp_path):
    factory, pairs = owned_pairs(fail_after=9, error=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        run_sweep(loaded_config(tmp_path), pair_factory=factory)
    assert pairs[0].streams == {"producer": 0, "consumer": 0} and not pairs[0].started
    assert not background_threads()


class FailingTarget(LoadTarget):
    role = "producer"

    def __init__(self) -> None:
        self.calls = 0
        self.active = 0

    def waiting_requests(self) -> int:
        return 5

    def serve_background(self, token_ids, max_tokens, stop) -> None:
        self.calls += 1
        raise RuntimeError("HTTP 500 from the engine")

    def stream_started(self) -> None:
        self.active += 1

    def stream_stopped(self) -> None:
        self.active -= 1


def test_a_failing_background_stream_ends_the_run_and_every_stream_stops(tmp_path):
    def factory(config, run):
        pair = SimPair(SimCosts(**DELAYS), seed=config.probe.seed)
        target = FailingTarget()
        pair.load_target = lambda role: target if role == "producer" else SimPair.load_target(pair, role)
        factory.target = target
        return pair

    with pytest.raises(EngineError, match="background stream .* failed: HTTP 500"):
        run_sweep(loaded_config(tmp_path, load_states=["source-busy"]), pair_factory=factory)
    assert factory.target.calls >= 1 and factory.target.active == 0
    assert not background_threads()
    kept = RunFolder(tmp_path / "run").read_probes()
    assert all(isinstance(r, ProbeRecord) for r in kept)


def test_stream_join_detaches_even_when_never_started():
    target = FailingTarget()
    stream = BackgroundStream(target, lambda: [1, 2, 3], 1, "kvcal-load-test")
    stream.start()
    stream.join(timeout_s=2)
    assert target.active == 0 and not stream.alive and "HTTP 500" in str(stream.error)


def test_resume_with_load_states_repeats_nothing_and_finishes_every_state(tmp_path):
    config = loaded_config(tmp_path)
    factory, _ = owned_pairs(fail_after=OPENING_CALLS + 11)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=factory)
    run = RunFolder(tmp_path / "run")
    before = planned(run.read_probes())
    assert len(before) == 11
    outcome = run_sweep(config, resume=True)
    after = planned(run.read_probes())
    assert after[:11] == before and outcome.done_before == 11 and outcome.measured == 21
    assert len({r.probe_id for r in after}) == len(after) == 32
    assert Counter(r.load_state for r in after) == {s: 8 for s in LOAD_STATES}
    plan_states = [p.load_state for p in run.manifest().plan]
    assert [r.load_state for r in after] == plan_states
    assert not background_threads()


def test_cli_loaded_sim_sweep_and_dry_run(tmp_path, kvcal):
    campaign = tmp_path / "c.yaml"
    campaign.write_text("sim: {source_wait_ms: 30, requeue_ms: 50, busy_computing_ms: 80}\n")
    dry = kvcal("sweep", "--engine", "sim", "--load-states", "idle,computing-busy", "--prefix-lengths", "256",
                "--reps", "1", "--config", campaign, "--output-dir", tmp_path, "--dry-run")
    assert dry.code == 0 and "computing-busy" in dry.out
    res = kvcal("sweep", "--engine", "sim", "--load-states", "idle,source-busy,computing-busy,both-busy",
                "--prefix-lengths", "256,1024", "--reps", "1", "--config", campaign, "--output-dir", tmp_path,
                "--name", "cli", "--background-concurrency", "2", "--busy-queue-threshold", "2")
    assert res.code == 0, res.err
    records = planned(RunFolder(tmp_path / "cli").read_probes())
    assert {r.computing_waiting for r in records if r.load_state == "computing-busy"} == {2}
    bad = kvcal("sweep", "--engine", "sim", "--load-states", "idle,busy", "--output-dir", tmp_path)
    assert bad.code != 0 and "--load-states" in bad.err and "Traceback" not in bad.err


class StuckTarget(LoadTarget):
    """A target whose request only ends when aborted (a request queued behind others streams nothing)."""

    role = "consumer"

    def __init__(self) -> None:
        self.released = threading.Event()
        self.active = 0

    def waiting_requests(self) -> int:
        return self.active

    def serve_background(self, token_ids, max_tokens, stop) -> None:
        self.released.wait(30)

    def abort(self) -> None:
        self.released.set()

    def stream_started(self) -> None:
        self.active += 1

    def stream_stopped(self) -> None:
        self.active -= 1


def test_switching_state_aborts_requests_in_flight(tmp_path):
    stuck = StuckTarget()

    def factory(config, run):
        pair = SimPair(SimCosts(**DELAYS), seed=config.probe.seed)
        pair.load_target = lambda role: stuck if role == "consumer" else SimPair.load_target(pair, role)
        return pair

    outcome = run_sweep(loaded_config(tmp_path, load_states=["computing-busy", "idle"], reps=1), pair_factory=factory)
    assert outcome.measured == 8 and stuck.released.is_set() and stuck.active == 0
    assert not background_threads()


def test_export_of_a_loaded_run_keeps_its_idle_probes(tmp_path, kvcal):
    outcome = run_sweep(loaded_config(tmp_path))
    res = kvcal("export", outcome.run_dir, "-o", tmp_path / "probes.csv")
    assert res.code == 0, res.err
    lines = (tmp_path / "probes.csv").read_text().splitlines()
    assert len(lines) == 1 + 8  # header + the idle state's 2 lengths x 2 legs x 2 reps


class DrainingTarget(LoadTarget):
    """An engine that admits up to ``capacity`` background requests at once: only streams beyond it wait."""

    role = "consumer"

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.active = 0

    def waiting_requests(self) -> int:
        return max(self.active - self.capacity, 0)

    def serve_background(self, token_ids, max_tokens, stop) -> None:
        stop.wait(0.05)

    def stream_started(self) -> None:
        self.active += 1

    def stream_stopped(self) -> None:
        self.active -= 1


def test_streams_are_added_until_a_busy_queue_reaches_the_threshold(tmp_path):
    target = DrainingTarget(capacity=5)
    seen = {}

    def factory(config, run):
        pair = SimPair(SimCosts(**DELAYS), seed=config.probe.seed)
        pair.load_target = lambda role: target if role == "consumer" else SimPair.load_target(pair, role)
        return pair

    outcome = run_sweep(loaded_config(tmp_path, load_states=["computing-busy"], reps=1), pair_factory=factory)
    records = planned(RunFolder(outcome.run_dir).read_probes())
    assert all(r.computing_waiting >= 1 for r in records)  # 3 streams would leave the queue empty
    seen["max"] = max(r.computing_waiting for r in records)
    assert seen["max"] < 10 and target.active == 0
