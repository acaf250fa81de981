"""What the INSTALLED ``kvcal`` script says about YAML and values that load but do not mean one thing.

tests/cli_corpus.py checks that such input is refused cleanly; here the one-line error
must also name the problem, because each of these once ran on: a repeated key (PyYAML
keeps the last), a local tag, ``yes``/``on`` where a number goes (YAML 1.1 booleans, which
pydantic took as 1), nan, a folded embedded router config, a run name with a trailing
space, a length listed twice, a simulated leg that costs nothing (every probe 0 ms,
then all refused by the fit).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
INTERNAL = 70


def _kvcal(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def _refused(done: subprocess.CompletedProcess, *phrases: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode not in (0, INTERNAL), done.stdout + done.stderr
    assert len(lines) == 1 and lines[0].startswith("kvcal: error: "), done.stderr
    for phrase in phrases:
        assert phrase in lines[0], lines[0]


CAMPAIGNS = {
    "duplicate-key": ("engine: sim\nreps: 1\nreps: 3\n", ("'reps' appears twice", "lines 2 and 3")),
    "local-tag": ("engine: sim\nreps: !mine 2\n", ("tag !mine", "line 2")),
    "bool-reps": ("engine: sim\nreps: yes\n", ("'reps'", "true/false where a number is wanted")),
    "bool-length": ("engine: sim\nprefix-lengths: [256, on]\n", ("'prefix_lengths'", "true/false")),
    "bool-sim-noise": ("engine: sim\nsim:\n  noise-cv: true\n", ("'sim.noise_cv'", "true/false")),
    "nan-sim-noise": ("engine: sim\nsim:\n  noise-cv: .nan\n", ("'sim.noise_cv'", "finite")),
    "inf-target": ("engine: sim\nadaptive: true\ntarget-width: .inf\n", ("'target_width'", "finite")),
    "zero-pull-curve": ("engine: sim\nsim:\n  pull-intercept-ms: 0\n  pull-per-token-us: 0\n",
                        ("'sim'", "pull curve is 0 ms at every length")),
    "repeated-length": ("engine: sim\nprefix-lengths: [256, 512, 256]\n", ("256 listed more than once", "--reps")),
}


@pytest.mark.parametrize("case", sorted(CAMPAIGNS))
def test_a_campaign_file_that_does_not_say_one_thing_is_refused_by_name(case, tmp_path):
    text, phrases = CAMPAIGNS[case]
    (tmp_path / "campaign.yaml").write_text(text)
    done = _kvcal("sweep", "--config", "campaign.yaml", "--output-dir", "runs", "--name", "r", cwd=tmp_path)
    _refused(done, *phrases)
    assert not (tmp_path / "runs" / "r").exists()


@pytest.mark.parametrize("name, phrase", [(" ", "not blank"), ("r ", "ends with a space"), (" r", "starts or ends")])
def test_a_run_name_with_edge_spaces_is_refused(name, phrase, tmp_path):
    done = _kvcal("sweep", "--engine", "sim", "--output-dir", "runs", "--name", name, cwd=tmp_path)
    _refused(done, phrase)
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_k8s_job_refuses_a_length_listed_twice(tmp_path):
    done = _kvcal("k8s-job", "--image", "img", "--producer-url", "http://10.0.0.1:8000", "--consumer-url",
                  "http://10.0.0.2:8000", "--model", "m", "--prefix-lengths", "256,512,256", "--output", "job.yaml",
                  cwd=tmp_path)
    _refused(done, "--prefix-lengths", "256 listed more than once")
    assert not (tmp_path / "job.yaml").exists()


@pytest.mark.parametrize("flag, value, phrase", [("--max-model-len", "200", "leaves too short a range to search"),
                                                 ("--max-model-len", "0", "must be a positive number of tokens"),
                                                 ("--block-size", "-64", "must be a positive number of tokens")])
def test_plan_names_a_limit_that_leaves_nothing_to_search(flag, value, phrase, fitted_run, tmp_path):
    done = _kvcal("plan", "--from", str(fitted_run), "--campaigns", "1", flag, value, cwd=tmp_path)
    _refused(done, flag, phrase)


@pytest.fixture(scope="module")
def fitted_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fitted")
    sweep = _kvcal("sweep", "--engine", "sim", "--prefix-lengths", "256,1024,4096", "--reps", "2", "--output-dir",
                   str(root), "--name", "r", cwd=root)
    assert sweep.returncode == 0, sweep.stderr
    assert _kvcal("fit", str(root / "r"), "--resamples", "200", cwd=root).returncode == 0
    return root / "r"


def _values(tmp_path: Path, edit) -> Path:
    text = (FIXTURES / "values" / "router-p2p.yaml").read_text()
    path = tmp_path / "values.yaml"
    path.write_text(edit(text))
    return path


def _repeat_line_holding(marker: str):
    def edit(text: str) -> str:
        line = next(line for line in text.splitlines() if marker in line)
        return text.replace(line, line + "\n" + line, 1)
    return edit


VALUES = {
    "inner-duplicate": (_repeat_line_holding("minCachedTokenDelta"), ("embedded config", "'minCachedTokenDelta' appears twice")),
    "outer-tag": (lambda text: text + "extra: !local 1\n", ("tag !local",)),
    "folded-config": (lambda text: text.replace(": |", ": >", 1), ("folded block", "literal block ('|')")),
}


@pytest.mark.parametrize("case", sorted(VALUES))
@pytest.mark.parametrize("command", ["emit-helm", "compare"])
def test_a_values_file_that_does_not_say_one_thing_is_refused_and_left_as_it_was(case, command, fitted_run, tmp_path):
    edit, phrases = VALUES[case]
    values = _values(tmp_path, edit)
    before = values.read_bytes()
    if command == "emit-helm":
        done = _kvcal("emit-config", str(fitted_run), "--format", "helm", "--values", str(values), "--in-place",
                      cwd=tmp_path)
    else:
        done = _kvcal("compare", str(fitted_run), str(fitted_run), "--values", str(values), cwd=tmp_path)
    _refused(done, str(values.name), *phrases)
    assert values.read_bytes() == before



def _ladder_csv(path: Path, reps: int) -> Path:
    """4 lengths x ``reps`` reps a leg, smooth curves with a little rep-to-rep spread."""
    lines = ["prefix_tokens,leg,ttft_ms,rep"]
    for rep in range(reps):
        for n in (256, 1024, 4096, 8192):
            lines += [f"{n},recompute,{2 + 0.05 * n + 1e-6 * n * n + (rep % 2) * 0.3},{rep}",
                      f"{n},pull,{20 + 0.02 * n + (rep % 2) * 0.2},{rep}"]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize("reps, warned", [(2, 1), (3, 0)])
def test_a_leg_too_small_for_the_slow_mode_test_is_warned_about_once(reps, warned, tmp_path):
    """8 probes a leg are below the 10 the slow-mode test needs (kvcal.fit.modes.MIN_PROBES); 12 are not."""
    _ladder_csv(tmp_path / "ladder.csv", reps)
    done = _kvcal("fit", "ladder.csv", "-o", "fit.json", "--resamples", "200", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("the slow-mode test needs at least 10 probes on a leg") == warned, done.stderr
    if warned:
        assert "(recompute 8, pull 8 probes)" in done.stderr
