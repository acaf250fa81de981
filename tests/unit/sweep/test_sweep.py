"""The sweep runner on the simulated pair: plan order, gates, records, resume, bad input."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvcal.settings import SweepConfig
from kvcal.sweep.validate import resolve_config
from kvcal.engines.base import LegMeasurement
from kvcal.engines.sim import SimPair
from kvcal.errors import GateError, InputError
from kvcal.sweep.lengths.probe_plan import build_plan, default_prefix_lengths, validate_prefix_lengths
from kvcal.runfolder import RunFolder
from kvcal.sweep.summary import summarize
from kvcal.records import Leg
from kvcal.sweep.runner import gate, run_sweep


def sim_config(tmp_path, **overrides) -> SweepConfig:
    base = dict(engine="sim", prefix_lengths=[256, 512, 1024, 2048], reps=2, output_dir=tmp_path, name="run")
    base.update(overrides)
    return SweepConfig.model_validate(base)


def test_plan_covers_every_cell_once_in_a_seeded_shuffle():
    plan = build_plan([256, 512, 1024], reps=3, seed=7)
    cells = Counter((p.prefix_tokens, p.leg, p.rep) for p in plan)
    assert len(plan) == 18 and set(cells.values()) == {1}
    assert [p.probe_id for p in plan] == [p.probe_id for p in build_plan([256, 512, 1024], 3, 7)]
    assert [p.probe_id for p in plan] != [p.probe_id for p in build_plan([256, 512, 1024], 3, 8)]
    in_grid_order = sorted(plan, key=lambda p: (p.prefix_tokens, p.leg.value, p.rep))
    assert [p.probe_id for p in plan] != [p.probe_id for p in in_grid_order]


def test_default_ladder_fits_the_model_and_the_blocks():
    lengths = default_prefix_lengths(64, 8192)
    assert lengths[0] == 256 and lengths[-1] == 8128
    assert all(n % 64 == 0 for n in lengths) and lengths == sorted(set(lengths))


@pytest.mark.parametrize(
    "lengths, message",
    [([300], "not a multiple of the block size 64"), ([8192], "does not fit the model's max length"), ([], "no prefix lengths")],
)
def test_bad_lengths_are_named(lengths, message):
    with pytest.raises(InputError, match=message):
        validate_prefix_lengths(lengths, 64, 8192)


def test_gates_reject_empty_pulls_and_busy_controls():
    assert gate(Leg.PULL, LegMeasurement(10.0, 0), 1000, 0.5).startswith("pull moved no bytes")
    assert "under 50%" in gate(Leg.PULL, LegMeasurement(10.0, 100), 1000, 0.5)
    assert "could not be counted" in gate(Leg.PULL, LegMeasurement(10.0, None), 1000, 0.5)
    assert gate(Leg.PULL, LegMeasurement(10.0, 990), 1000, 0.5) is None
    assert "recompute control moved 64 bytes" in gate(Leg.RECOMPUTE, LegMeasurement(10.0, 64), 0, 0.5)
    assert gate(Leg.RECOMPUTE, LegMeasurement(10.0, 0), 0, 0.5) is None


def test_sweep_records_every_probe_with_proof_of_bytes(tmp_path):
    outcome = run_sweep(sim_config(tmp_path))
    run = RunFolder(outcome.run_dir)
    everything = run.read_probes()
    cold = [r for r in everything if r.session == "cold"]  # the first pull on the fresh session, measured (coldstart.py)
    assert [r.probe_id for r in cold] == ["cold0-L256-pull-r0"] and everything[0] is cold[0] and cold[0].valid
    records = [r for r in everything if r.session != "cold"]
    assert len(records) == outcome.total == 16
    assert all(r.valid for r in records)
    assert {r.session for r in records if r.leg is Leg.PULL} == {"warm"}
    assert {r.session for r in records if r.leg is Leg.RECOMPUTE} == {None} and {r.pair for r in everything} == {None}
    for r in records:
        assert (r.bytes_moved > 0) if r.leg is Leg.PULL else (r.bytes_moved == 0)
        if r.leg is Leg.PULL:
            assert r.bytes_moved == r.prefix_tokens * 2048 == r.expected_bytes
    assert [r.plan_index for r in records] == sorted(r.plan_index for r in records)
    manifest = run.manifest()
    assert manifest.setup.engine == "sim" and len(manifest.plan) == 16 and manifest.settings.probe.reps == 2
    assert manifest.setup.python_hash_seed == 0 and manifest.setup.created_at == manifest.created_at
    assert manifest.provenance["kvcal_version"]
    summary = summarize(records)
    assert set(summary["n_valid"]) == {2} and len(summary) == 8


def test_flaky_pulls_are_retried_and_recorded(tmp_path):
    config = sim_config(tmp_path, sim={"fail_pull_rate": 0.3}, seed=3, max_attempts=10)
    outcome = run_sweep(config)
    records = RunFolder(outcome.run_dir).read_probes()
    invalid = [r for r in records if not r.valid]
    assert invalid, "a 30% failure rate over 8 pulls should fail at least once"
    assert all(r.leg is Leg.PULL and "moved no bytes" in r.invalid_reason for r in invalid)
    assert outcome.invalid_attempts == len([r for r in invalid if r.session != "cold"])  # the plan's own retries
    assert len({r.probe_id for r in records if r.valid and r.session != "cold"}) == 16
    cold = [r for r in records if r.session == "cold"]  # a failed first pull is retried, still cold (coldstart.py)
    assert cold[-1].valid and all(not r.valid for r in cold[:-1]) and [r.attempt for r in cold] == list(range(len(cold)))


def test_persistent_gate_failure_fails_the_run_and_keeps_probes(tmp_path):
    config = sim_config(tmp_path, sim={"fail_pull_rate": 1.0}, max_attempts=2)
    with pytest.raises(GateError, match="failed its gate 2 times"):
        run_sweep(config)
    records = RunFolder(tmp_path / "run").read_probes()
    first_pull = next(i for i, r in enumerate(records) if r.leg is Leg.PULL)
    assert all(r.valid for r in records[:first_pull])
    assert [r.attempt for r in records[first_pull:]] == [0, 1]


class Crash(Exception):
    pass


def faulty_factory(fails, error):
    """A sim pair whose ``measure`` raises ``error`` on the calls where ``fails(call_number)`` holds."""

    def factory(config, run):
        pair = SimPair(block_size=config.engine.block_size, seed=config.probe.seed)
        original, calls = pair.measure, {"n": 0}

        def measure(leg, ids):
            calls["n"] += 1
            if fails(calls["n"]):
                raise error
            return original(leg, ids)

        pair.measure = measure
        return pair

    return factory


def crashing_factory(after: int):
    """A pair that dies after ``after`` measurements, as a killed engine would."""
    return faulty_factory(lambda n: n > after, Crash("engine died"))


OPENING_CALLS = 2  # the consumer's first request (discarded) and the cold first pull (recorded): coldstart.py


def planned_records(records):
    return [r for r in records if r.session != "cold"]


def test_resume_repeats_no_finished_probe(tmp_path):
    config = sim_config(tmp_path)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=crashing_factory(OPENING_CALLS + 5))
    run = RunFolder(tmp_path / "run")
    before = run.read_probes()
    assert len(planned_records(before)) == 5 and before[0].probe_id == "cold0-L256-pull-r0"
    outcome = run_sweep(config, resume=True)
    after = run.read_probes()
    assert outcome.done_before == 5 and outcome.measured == 11
    assert after[:6] == before
    ids = [r.probe_id for r in after]
    assert len(ids) == len(set(ids)) == 16 + 2  # the restarted pair's fresh session is a new cold sample
    assert [r.probe_id for r in after if r.session == "cold"] == ["cold0-L256-pull-r0", "cold1-L256-pull-r0"]


def test_resume_drops_a_torn_last_line_but_rejects_corruption(tmp_path):
    config = sim_config(tmp_path)
    with pytest.raises(Crash):
        run_sweep(config, pair_factory=crashing_factory(OPENING_CALLS + 3))
    run = RunFolder(tmp_path / "run")
    with open(run.probes_path, "a") as handle:
        handle.write('{"schema": "kvcal.probe/1", "probe_id": "L2')
    outcome = run_sweep(config, resume=True)
    assert outcome.done_before == 3 and len(planned_records(run.read_probes())) == 16

    lines = run.probes_path.read_text().splitlines()
    lines[4] = "this is not json"
    run.probes_path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError, match="line 5 is corrupt"):
        run_sweep(config, resume=True)


def test_existing_run_needs_resume_and_resume_needs_a_run(tmp_path):
    run_sweep(sim_config(tmp_path))
    with pytest.raises(InputError, match="already exists; add --resume"):
        run_sweep(sim_config(tmp_path))
    with pytest.raises(InputError, match="no run to resume"):
        run_sweep(sim_config(tmp_path, name="other"), resume=True)


def test_flags_override_the_campaign_file_and_unknown_keys_fail():
    config = resolve_config({"reps": 5, "seed": 9, "prefix_lengths": [256]}, {"reps": 2, "seed": None})
    assert (config.probe.reps, config.probe.seed, config.probe.prefix_lengths) == (2, 9, [256])
    with pytest.raises(InputError, match="unknown setting"):
        resolve_config({"repz": 3}, {})
    with pytest.raises(InputError, match="reps"):
        resolve_config({}, {"reps": 0})


def test_cli_sweep_export_and_dry_run(tmp_path, kvcal):
    campaign = tmp_path / "campaign.yaml"
    campaign.write_text("engine: sim\nprefix-lengths: [256, 512]\nreps: 1\n")
    dry = kvcal("sweep", "--config", campaign, "--output-dir", tmp_path, "--dry-run")
    assert dry.code == 0 and "4 probes over lengths 256,512" in dry.out
    assert not any(tmp_path.glob("*/run.json"))
    done = kvcal("sweep", "--config", campaign, "--output-dir", tmp_path, "--name", "r", "--reps", "2")
    assert done.code == 0, done.err
    assert len(planned_records(RunFolder(tmp_path / "r").read_probes())) == 8
    exported = kvcal("export", tmp_path / "r", "-o", tmp_path / "p.csv")
    assert exported.code == 0
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0] == "prefix_tokens,leg,ttft_ms,rep,bytes_moved,started_at" and len(rows) == 9


@pytest.mark.parametrize(
    "args, message",
    [
        (["--prefix-lengths", "256,300"], "not a multiple of the block size"),
        (["--prefix-lengths", "256,abc"], "comma-separated integers"),
        (["--reps", "0"], "reps"),
        (["--config", "/nonexistent.yaml"], "does not exist"),
        (["--engine", "gpu-magic"], "engine"),
    ],
)
def test_cli_bad_input_is_one_line(tmp_path, kvcal, args, message):
    result = kvcal("sweep", "--engine", "sim", "--output-dir", tmp_path, *args)
    assert result.code != 0
    assert message in result.err
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1


def test_cli_export_of_a_non_run(tmp_path, kvcal):
    result = kvcal("export", tmp_path, "-o", tmp_path / "x.csv")
    assert result.code == 2 and "not a kvcal run folder" in result.err


def test_probe_lines_are_valid_json_objects(tmp_path):
    outcome = run_sweep(sim_config(tmp_path, reps=1))
    for line in (outcome.run_dir / "probes.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert record["schema"] == "kvcal.probe/1" and isinstance(record["ttft_ms"], float)


def refusing_factory(refusals: int):
    """A pair whose engine refuses the first ``refusals`` requests (e.g. a failed KV load)."""
    from kvcal.errors import EngineError

    return faulty_factory(lambda n: n <= refusals, EngineError("consumer answered HTTP 500"))


def test_a_refused_request_is_an_invalid_attempt_that_is_retried(tmp_path):
    from kvcal.errors import EngineError

    refused = faulty_factory(lambda n: n == OPENING_CALLS + 1, EngineError("consumer answered HTTP 500"))
    outcome = run_sweep(sim_config(tmp_path), pair_factory=refused)
    records = planned_records(RunFolder(outcome.run_dir).read_probes())
    assert records[0].valid is False and records[0].ttft_ms is None
    assert "request failed: consumer answered HTTP 500" in records[0].invalid_reason
    assert records[1].probe_id == records[0].probe_id and records[1].valid


def test_an_engine_that_keeps_refusing_ends_the_run_as_an_engine_error(tmp_path):
    from kvcal.errors import EngineError

    with pytest.raises(EngineError, match="failed 3 times in a row"):
        run_sweep(sim_config(tmp_path), pair_factory=refusing_factory(100))
    assert len(RunFolder(tmp_path / "run").read_probes()) == 3


def test_cli_attach_to_unreachable_engines_names_the_engine(tmp_path, kvcal):
    pytest.importorskip("vllm")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096}')
    result = kvcal("sweep", "--producer-url", "http://127.0.0.1:9", "--consumer-url", "http://127.0.0.1:10",
                   "--model", model, "--output-dir", tmp_path, "--prefix-lengths", "256")
    assert result.code == 4
    assert "producer at http://127.0.0.1:9: unreachable" in result.err and "Traceback" not in result.err


def test_the_live_display_prints_engine_errors_and_paths_as_they_are():
    import io

    from kvcal.cli.progress_view import RichProgress
    from factories import make_probe

    shown = io.StringIO()
    view = RichProgress(file=shown)
    view.on_phase("launching /models/[run]/tiny")
    view.on_start(total=2, already_done=0)
    bad = make_probe(0, 256, "pull", None, valid=False).model_copy(update={"invalid_reason": "HTTP 500: [/oops] [bold]"})
    view.on_probe(bad, 1, 2)
    view.on_complete(1, 2)
    text = " ".join(shown.getvalue().split())
    assert "/models/[run]/tiny" in text and "HTTP 500: [/oops] [bold]" in text


def test_a_sweep_refused_before_any_record_leaves_no_folder_behind(tmp_path, kvcal):
    runs = tmp_path / "runs"
    bad = kvcal("sweep", "--engine", "sim", "--output-dir", runs, "--name", "r", "--prefix-lengths", "100,200")
    assert bad.code == 2 and "block size" in bad.err
    assert not (runs / "r").exists()  # its .lock once kept the name taken, and --resume found no run
    good = kvcal("sweep", "--engine", "sim", "--output-dir", runs, "--name", "r", "--prefix-lengths", "128,256", "--reps", "2")
    assert good.code == 0, good.err
    assert (runs / "r" / "run.json").is_file()


def test_a_failed_new_run_keeps_whatever_it_wrote(tmp_path):
    from kvcal.sweep.lock import claim_run_folder

    folder = tmp_path / "r"
    with pytest.raises(RuntimeError):
        with claim_run_folder(folder, new=True):
            (folder / "logs").mkdir()
            (folder / "logs" / "producer.log").write_text("engine died: ...")
            raise RuntimeError("launch failed")
    assert (folder / "logs" / "producer.log").read_text() == "engine died: ..."


def _medians_at(lengths_ms: dict[int, tuple[float, float]]) -> list:
    """Probe records whose per-length medians are (recompute, pull) as given."""
    from factories import make_probe

    records, i = [], 0
    for n, (recompute_ms, pull_ms) in lengths_ms.items():
        for leg, ms in (("recompute", recompute_ms), ("pull", pull_ms)):
            records.append(make_probe(i, n, leg, ms))
            i += 1
    return records


def test_a_default_plan_of_one_length_grows_an_octave_whoever_wins_there():
    # A model limit of 257-320 tokens leaves the default ladder 256 alone: no fit can use one length.
    from kvcal.sweep.lengths import grow_below

    one = build_plan([256], reps=2, seed=0)
    grown, why = grow_below.grown_probes(one, _medians_at({256: (20.0, 30.0)}), block_size=64, reps=2, seed=0)
    assert sorted({p.prefix_tokens for p in grown}) == [128, 192] and len(grown) == 2 * 2 * 2
    assert "only length" in why and "recompute won at 256" in why
    _, why = grow_below.grown_probes(one, _medians_at({256: (30.0, 20.0)}), block_size=64, reps=2, seed=0)
    assert "the pull won at 256" in why
    two = build_plan([256, 384], reps=2, seed=0)
    assert grow_below.grown_probes(two, _medians_at({256: (20.0, 30.0), 384: (40.0, 35.0)}), block_size=64, reps=2,
                              seed=0) is None  # two lengths and recompute wins at the shortest: done, as before


def test_a_dry_run_of_one_length_says_the_octave_below_will_be_added():
    from kvcal.sweep.lengths.grow_below import dry_run_note

    assert "one length, which no fit can use" in dry_run_note([256], 64)
    assert dry_run_note([256, 384], 64).startswith("default design: if the pull wins at 256 tokens")
    assert dry_run_note([128, 192], 64) is None  # at the floor: nothing below


def test_the_run_records_the_context_its_pair_serves_and_older_records_read_without_it(tmp_path):
    """run.json's setup (and so fit.json's) carries the pair's max model length: emit-config's work-range labels
    end there. A pair that cannot tell records None; a run.json or fit.json written before reads as None."""
    from pathlib import Path

    from kvcal.errors import EngineError
    from kvcal.fit.inputs import load_fit_input
    from kvcal.fit_record import load_fit
    from kvcal.sweep.runner import _served_length

    outcome = run_sweep(sim_config(tmp_path, sim={"max_model_len": 32768}))
    assert RunFolder(outcome.run_dir).manifest().setup.max_model_len == 32768
    assert load_fit_input(outcome.run_dir).fitted().setup.max_model_len == 32768

    class Unknown(SimPair):
        @property
        def max_model_len(self) -> int:
            raise EngineError("max model length unknown")

    assert _served_length(Unknown(None)) is None
    baseline = Path(__file__).resolve().parents[3] / "results" / "baselines" / "cpu-tiny"
    assert "max_model_len" not in json.loads((baseline / "run.json").read_text())["setup"]
    assert load_fit(baseline / "fit.json").setup.max_model_len is None
