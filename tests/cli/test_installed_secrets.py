"""Secrets in URLs never echoed, other systems' text never raw on a terminal, hosts the HTTP client would refuse
refused first: every command that takes a URL, through the INSTALLED ``kvcal`` script (issue 55).

Each case feeds a URL holding a secret in several places (a password or a token as the user
name, a ``?token=`` or signature value, an access token in the fragment; with a good host and
with one the resolver would refuse, with and without a scheme) through one place a URL enters: ``observe --prometheus``, the engine URL flags of
``sweep`` (attach mode, real and ``--dry-run``) and ``k8s-job`` (to stdout and to a file), and
the ``--pairs`` files of both, and ``fleet --ray``'s cluster address. Every case must refuse with one line and an exit code that is
not 70, and the secret must appear nowhere: not on stdout or stderr (with ``--verbose``'s log
lines on), not in any file the command left.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).with_name("kvcal")
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason=f"no installed kvcal script at {SCRIPT}")
SECRET = "Zq9SECRETvalue"
URLS = {  # each URL carries the secret in several places at once: one refusal must mask them all
    "userinfo-query-fragment": f"http://kvcal:{SECRET}@10.0.0.1:8200/v1?model=m&token={SECRET}#access_token={SECRET}",
    "token-user-bad-host": f"http://{SECRET}@a..b:8200/?X-Amz-Signature={SECRET}",
    "no-scheme-bad-port": f"kvcal:{SECRET}@10.0.0.1:99999/?password={SECRET}",
}
OTHER = "http://10.0.0.2:8200"
WORKLOAD = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fleet-workload.yaml"


def _pairs(folder: Path, url: str) -> Path:
    path = folder / "pairs.yaml"
    path.write_text(f'pairs:\n  - {{name: p1, class: c, producer_url: "{url}", consumer_url: "{OTHER}"}}\n')
    return path


def _commands(folder: Path, url: str) -> dict[str, list[str]]:
    out = str(folder / "out")
    k8s = ["k8s-job", "--image", "img", "--model", "m"]
    attach = ["sweep", "--engine", "vllm", "--model", "m", "--output-dir", out, "--name", "r"]
    return {
        "observe": ["observe", "--prometheus", url, "--since", "1m"],
        "sweep-producer": [*attach, "--producer-url", url, "--consumer-url", OTHER],
        "sweep-consumer": [*attach, "--producer-url", OTHER, "--consumer-url", url],
        "sweep-dry-run": [*attach, "--producer-url", url, "--consumer-url", OTHER, "--dry-run"],
        "sweep-pairs": ["sweep", "--pairs", str(_pairs(folder, url)), "--model", "m", "--output-dir", out],
        "sweep-pairs-dry-run": ["sweep", "--pairs", str(_pairs(folder, url)), "--model", "m", "--output-dir", out,
                                "--dry-run"],
        "k8s-job": [*k8s, "--producer-url", url, "--consumer-url", OTHER],
        "k8s-job-file": [*k8s, "--producer-url", OTHER, "--consumer-url", url, "-o", str(folder / "job.yaml")],
        "k8s-job-pairs": [*k8s, "--pairs", str(_pairs(folder, url)), "--pvc", "res"],
        "fleet-ray": ["fleet", str(folder / "fit.json"), "--workload", str(WORKLOAD), "--ray",
                      url.replace("http://", "ray://")],
    }


def _leaked(folder: Path, inputs: set[Path]) -> list[str]:
    return [str(p) for p in folder.rglob("*") if p.is_file() and p not in inputs and SECRET.encode() in p.read_bytes()]


@pytest.mark.parametrize("kind", sorted(URLS))
def test_a_secret_in_any_url_is_refused_without_being_repeated_anywhere(kind, tmp_path):
    failures = []
    for name, args in _commands(tmp_path, URLS[kind]).items():
        done = subprocess.run([str(SCRIPT), "--verbose", *args], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, cwd=tmp_path)
        problems = []
        if done.returncode in (0, 70) or "Traceback" in done.stderr:
            problems.append(f"exit {done.returncode}")
        if SECRET in done.stdout + done.stderr:
            problems.append("echoed")
        if leaked := _leaked(tmp_path, {tmp_path / "pairs.yaml"}):
            problems.append(f"left in {leaked}")
        if len([line for line in done.stderr.splitlines() if line.startswith("kvcal: error:")]) != 1:
            problems.append("not one error line")
        if problems:
            failures.append(f"{name}: {', '.join(problems)}: {done.stderr.strip()[-300:]}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("url, words, everywhere", [
    ("http://a..b:8200", "label", True), (f"http://{'a' * 64}.svc:8200", "label", False),
    ("http://1.2.3.999:8200", "IPv4", False),
])
def test_a_host_the_http_client_would_refuse_is_exit_2_in_every_command_before_a_job_is_rendered(
    url, words, everywhere, tmp_path
):
    for name, args in _commands(tmp_path, url).items():
        if not everywhere and name not in ("observe", "sweep-dry-run", "k8s-job-pairs", "fleet-ray"):
            continue
        done = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                              stdin=subprocess.DEVNULL, cwd=tmp_path)
        assert done.returncode == 2 and words in done.stderr, (name, done.stderr)
        assert not done.stdout.strip() and not (tmp_path / "job.yaml").exists(), name
