"""`kvcal k8s-job`: the rendered Job manifest and its validation."""

from __future__ import annotations

import shlex

import pytest
import yaml

from kvcal.k8s import job as k8s
from kvcal.errors import InputError

BASE = dict(image="ghcr.io/example/kvcal:0.1.0", producer_url="http://10.0.3.17:8200",
            consumer_url="http://10.0.4.22:8200", model="openai/gpt-oss-120b")


def spec(**kw) -> k8s.JobSpec:
    return k8s.JobSpec(**{**BASE, **kw})


def container(manifest: dict) -> dict:
    (c,) = manifest["spec"]["template"]["spec"]["containers"]
    return c


def script_lines(text: str) -> list[list[str]]:
    """The script's commands; the sweep as a fresh run does it (the else branch of `if [ -d RUN ]; then ... --resume`)."""
    job = yaml.safe_load(text)
    lines = []
    for line in container(job)["args"][0].strip().split("\n"):
        words = shlex.split(line)
        if words[:2] == ["if", "["]:
            resumed, fresh = words[words.index("then") + 1:words.index("else")], words[words.index("else") + 1:-1]
            fresh[-1] = fresh[-1].removesuffix(";")
            assert resumed == [*fresh, "--resume;"]  # a rerun resumes the same sweep
            words = fresh
        lines.append(words)
    return lines


def test_job_shape() -> None:
    job = yaml.safe_load(k8s.render_job(spec(namespace="llm-d", ttl_seconds=600, cpu="500m", memory="1Gi")))
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job"
    assert job["metadata"] == {"name": "kvcal-calibrate", "namespace": "llm-d", "labels": job["metadata"]["labels"]}
    assert job["spec"]["backoffLimit"] == 0 and job["spec"]["ttlSecondsAfterFinished"] == 600
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["volumes"] == [{"name": "results", "emptyDir": {}}]
    c = container(job)
    assert c["image"] == BASE["image"] and c["command"] == ["/bin/sh", "-c"]
    assert c["resources"] == {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "1Gi"}}
    assert c["volumeMounts"] == [{"name": "results", "mountPath": "/results"}]


def test_pvc_volume() -> None:
    job = yaml.safe_load(k8s.render_job(spec(pvc="kvcal-results")))
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "results", "persistentVolumeClaim": {"claimName": "kvcal-results"}}]


def test_script_runs_sweep_fit_and_emit_json() -> None:
    s = spec(transport="p2p-tier", prefix_lengths=(1024, 2048), reps=5, producer_p2p_host="10.0.3.17",
             producer_p2p_port=7777, extra_args=("--max-attempts", "5", "--seed=3"), run_name="calib-1")
    lines = script_lines(k8s.render_job(s))
    assert lines[0] == ["set", "-eu"]
    assert lines[1] == k8s.sweep_command(s) == [
        "kvcal", "sweep", "--engine", "vllm", "--transport", "p2p-tier", "--producer-url", "http://10.0.3.17:8200",
        "--consumer-url", "http://10.0.4.22:8200", "--model", "openai/gpt-oss-120b", "--producer-p2p-host", "10.0.3.17",
        "--producer-p2p-port", "7777", "--prefix-lengths", "1024,2048", "--reps", "5", "--output-dir", "/results",
        "--name", "calib-1", "--max-attempts", "5", "--seed=3"]
    assert lines[2] == ["kvcal", "fit", "/results/calib-1"]
    # -o: replaced whole, so a refused emit (exit 3) leaves the last emit.json as it was (before: `> emit.json` emptied it)
    assert lines[3] == ["kvcal", "emit-config", "/results/calib-1", "--format", "json", "-o", "/results/calib-1/emit.json"]
    assert lines[4] == ["cat", "/results/calib-1/emit.json"]


def test_extra_args_with_spaces_are_quoted() -> None:
    lines = script_lines(k8s.render_job(spec(extra_args=("--config", "/cfg/my campaign.yaml"))))
    assert lines[1][-2:] == ["--config", "/cfg/my campaign.yaml"]


def _command(name: str):
    import typer

    from kvcal.cli.app import app

    group = typer.main.get_command(app)
    return group.commands.get(name)


def test_sweep_argv_is_accepted_by_the_real_sweep_command() -> None:
    """The flags the Job passes exist in `kvcal sweep` (catches a renamed flag)."""
    cmd = _command("sweep")
    argv = k8s.sweep_command(spec(prefix_lengths=(1024,), reps=2, producer_p2p_host="10.0.3.17", producer_p2p_port=7777))
    ctx = cmd.make_context("sweep", argv[2:])
    assert ctx.params["producer_url"] == BASE["producer_url"] and ctx.params["output_dir"].as_posix() == "/results"


def test_fit_and_emit_lines_are_accepted() -> None:
    emit = _command("emit-config")
    assert emit.make_context("emit-config", ["/results/r", "--format", "json"]).params["format"] == "json"
    fit = _command("fit")
    if fit is None:
        pytest.skip("`kvcal fit` is not registered yet")
    fit.make_context("fit", ["/results/r"])


@pytest.mark.parametrize("kw, match", [
    ({"producer_url": "10.0.3.17:8200"}, "http://"),
    ({"producer_url": "ftp://10.0.3.17"}, "http://"),
    ({"producer_url": "http://"}, "no host"),
    ({"producer_url": "http://localhost:8200"}, "own pod"),
    ({"consumer_url": "http://127.0.0.1:8200"}, "own pod"),
    ({"consumer_url": "http://[::1]:8200"}, "own pod"),
    ({"producer_url": "http://10.0.3.17:99999"}, "not a valid URL"),
    ({"producer_url": "http://u:p@10.0.3.17:8200"}, "plain base URL"),
    ({"producer_url": "http://10.0.3.17:8200/?x=1"}, "plain base URL"),
    ({"consumer_url": "http://10.0.3.17:8200"}, "same engine"),
    ({"name": "Bad_Name"}, "--name"),
    ({"name": "x" * 64}, "--name"),
    ({"namespace": "llm d"}, "--namespace"),
    ({"image": ""}, "--image"),
    ({"transport": "tcp"}, "--transport"),
    ({"reps": 0}, "--reps"),
    ({"prefix_lengths": (1024, 0)}, "--prefix-lengths"),
    ({"producer_p2p_port": 70000}, "--producer-p2p-port"),
    ({"producer_p2p_host": "bad host"}, "--producer-p2p-host"),
    ({"pvc": "Results_PVC"}, "--pvc"),
    ({"memory": "2 GB"}, "--memory"),
    ({"ttl_seconds": -1}, "--ttl"),
    ({"extra_args": ("--model", "x")}, "set by k8s-job"),
    ({"extra_args": ("--transport=nixl-pd",)}, "set by k8s-job"),
    ({"extra_args": ("--producer-gpus", "0")}, "attaches"),
])
def test_invalid_specs_are_one_line_input_errors(kw: dict, match: str) -> None:
    with pytest.raises(InputError, match=match) as err:
        spec(**kw)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("url", ["http://vllm-producer.llm-d.svc.cluster.local:8200", "https://10.0.3.17",
                                 "http://[fd00::17]:8200", "http://10.0.3.17:8200/"])
def test_valid_urls(url: str) -> None:
    assert k8s.JobSpec(**{**BASE, "producer_url": url}).producer_url == url


def test_cli_writes_file_and_passes_extra_args(tmp_path, capsys) -> None:
    from kvcal.cli.app import main

    out = tmp_path / "job.yaml"
    rc = main(["k8s-job", "--image", BASE["image"], "--model", BASE["model"], "--producer-url", BASE["producer_url"],
               "--consumer-url", BASE["consumer_url"], "--prefix-lengths", "2048,8192", "--pvc", "res", "-o", str(out),
               "--", "--max-attempts", "4"])
    stdout, err = capsys.readouterr()
    assert rc == 0 and stdout == "" and "kubectl apply" in err
    lines = script_lines(out.read_text())
    assert lines[1][-2:] == ["--max-attempts", "4"] and "2048,8192" in lines[1]


def test_cli_bad_url_one_line(capsys) -> None:
    from kvcal.cli.app import main

    rc = main(["k8s-job", "--image", "img", "--model", "m", "--producer-url", "http://localhost:8200",
               "--consumer-url", BASE["consumer_url"]])
    stdout, err = capsys.readouterr()
    assert rc == 2 and stdout == "" and err.count("\n") == 1 and "own pod" in err


def test_p2p_tier_names_the_producer_pods_listener_by_default() -> None:
    argv = k8s.sweep_command(spec(transport="p2p-tier"))
    assert argv[argv.index("--producer-p2p-host") + 1] == "10.0.3.17"
    assert "--producer-p2p-host" not in k8s.sweep_command(spec(transport="nixl-pd"))
    argv = k8s.sweep_command(spec(transport="p2p-tier", producer_p2p_host="10.9.9.9"))
    assert argv[argv.index("--producer-p2p-host") + 1] == "10.9.9.9"


def _kubernetes_expansion(text: str, env: dict[str, str]) -> str:
    """What the kubelet does to a container's args (k8s.io/kubernetes third_party/forked/golang/expansion)."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "$" and i + 1 < len(text) and text[i + 1] == "$":
            out.append("$")
            i += 2
        elif text[i] == "$" and i + 1 < len(text) and text[i + 1] == "(" and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2:end]
            out.append(env.get(name, text[i:end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


@pytest.mark.parametrize("model", ["a$(PYTHONUNBUFFERED)b", "m$$(HOME)", "cost$5"])
def test_kubernetes_expansion_of_args_hands_the_shell_the_model_byte_for_byte(model) -> None:
    job = yaml.safe_load(k8s.render_job(spec(model=model)))
    expanded = _kubernetes_expansion(container(job)["args"][0], {"PYTHONUNBUFFERED": "1", "HOME": "/root"})
    sweep = shlex.split(expanded.strip().split("\n")[1])
    assert sweep[sweep.index("--model") + 1] == model
