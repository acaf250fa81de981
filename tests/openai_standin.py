"""A loopback OpenAI-compatible stand-in for an llm-d deployment, to run real inference-perf against.

It streams ``/v1/completions`` and ``/v1/chat/completions`` the way vLLM does behind
the llm-d router (a chat stream opens with a role-only delta; ids are
``cmpl-<request id>`` and ``chatcmpl-<request id>``; a trailing usage chunk reports
``prompt_tokens``) and writes, for every request, the router's ``p2p decision`` line
to an EPP log, so that inference-perf's per-request file and the log join as they do
in production. A few requests stop after one token (inference-perf gives those no
TTFT) and a few fail with HTTP 500 (an error record). Its TTFTs follow a made-up
cost curve; nothing here is a measurement. It binds 127.0.0.1 only.

Also here: a word-level tokenizer folder (plain JSON, loaded by transformers inside
inference-perf) so that inference-perf needs no download, and the inference-perf
config that the tests run. ``python tests/openai_standin.py INFERENCE_PERF`` regenerates
``tests/fixtures/llmd/loaded/`` (each folder: inference-perf's per-request file, the
stand-in's EPP log and the config inference-perf ran).
"""

from __future__ import annotations

import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

MODEL = "standin/llm-d"
VOCAB = [f"w{i}" for i in range(200)]
OUTCOMES = ("pulled", "self", "no-best-match")
ONE_TOKEN_EVERY = 7  # every 7th request answers one token (finish_reason "stop" early)
FAIL_EVERY = 11  # every 11th request fails with HTTP 500 after the router decided
MAX_TOKENS = 4
CHAT_SYSTEM_TOKENS = 120


def write_tokenizer(folder: Path) -> Path:
    """A word-level tokenizer over ``VOCAB`` (one token per whitespace-separated word)."""
    folder.mkdir(parents=True, exist_ok=True)
    special = {"id": 0, "content": "[UNK]", "single_word": False, "lstrip": False, "rstrip": False,
               "normalized": False, "special": True}
    vocab = {"[UNK]": 0, **{word: i + 1 for i, word in enumerate(VOCAB)}}
    spec = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [special], "normalizer": None,
            "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": None,
            "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": False},
            "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "[UNK]"}}
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]", "model_max_length": 100000}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def inference_perf_config(base_url: str, tokenizer: Path, reports: Path, *, api: str, streaming: bool = True,
                          response_chunks: bool = True, computed_metrics: bool = False, requests_per_s: float = 12.0,
                          seconds: float = 2.0) -> dict[str, Any]:
    """inference-perf 0.7.0's config: a constant rate, per-request records on.

    Completions take shared-prefix prompts; inference-perf 0.7.0's shared-prefix generator
    sends completions only, so chat takes its mock prompts (the stand-in counts a
    system prompt of ``CHAT_SYSTEM_TOKENS`` for them, as a chat template would add).
    """
    shared = {"num_groups": 2, "num_prompts_per_group": 4, "system_prompt_len": 48, "question_len": 16,
              "output_len": 4, "seed": 7}
    return {
        "api": {"type": api, "streaming": streaming},
        "data": {"type": "shared_prefix", "shared_prefix": shared} if api == "completion" else {"type": "mock"},
        "load": {"type": "constant", "stages": [{"rate": requests_per_s, "duration": seconds}], "num_workers": 1},
        "server": {"type": "vllm", "model_name": MODEL, "base_url": base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer)},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": True,
                                         "per_request_fields": {"response_chunks": response_chunks,
                                                                "computed_metrics": computed_metrics}}},
        "storage": {"local_storage": {"path": str(reports)}},
    }


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


class StandIn:
    """The server and its EPP log; a context manager that owns the serving thread."""

    def __init__(self, epp_log: Path, seed: int = 0) -> None:
        self.epp_log = epp_log
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._count = 0
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"  # the stream ends when the connection closes

            def log_message(self, *args: Any) -> None:  # quiet: tests read the EPP log, not access lines
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                body = json.dumps({"object": "list", "data": [{"id": MODEL, "object": "model"}]}).encode()
                self._send(200, "application/json", body)

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                chat = self.path.endswith("/chat/completions")
                standin.serve(self, request, chat)

            def _send(self, status: int, kind: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._handler = Handler
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="openai-standin", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> StandIn:
        self.epp_log.write_text("I1203 09:00:00.000000 1 main.go:80] starting EPP (not a decision line)\n", encoding="utf-8")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def _decide(self, prompt_tokens: int) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self._count += 1
            number = self._count
            # Coprime cycles: any dozen consecutive requests meet every outcome with a busy and an
            # idle computing pod, so even a short run gives the cost model a design it can solve.
            outcome = OUTCOMES[number % 3]
            source_waiting = (0, 1, 0, 0, 3)[number % 5]
            computing_waiting = (0, 2, 0, 1)[number % 4]
            tag = self._rng.getrandbits(32)
        cached = min(96, prompt_tokens)
        decision = {"level": "info", "ts": time.time(), "logger": "p2p-source-producer", "msg": "p2p decision",
                    "requestID": f"{number:06d}-{tag:08x}", "outcome": outcome,
                    "bestCachedTokens": cached if outcome != "no-best-match" else 0,
                    "computingCachedTokens": cached if outcome == "self" else 0,
                    "deltaTokens": cached if outcome == "pulled" else 0,
                    "sourceWaiting": source_waiting, "computingWaiting": computing_waiting}
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        with self._lock, self.epp_log.open("a", encoding="utf-8") as log:
            log.write(f"{stamp} {json.dumps(decision)}\n")
        return number, decision

    @staticmethod
    def _first_token_s(prompt_tokens: int, decision: dict[str, Any]) -> float:
        pulled = decision["outcome"] == "pulled"
        cached = decision["bestCachedTokens"] if pulled else decision["computingCachedTokens"]
        ms = 8.0 + 0.1 * (prompt_tokens - cached) + (6.0 + 0.02 * decision["deltaTokens"] if pulled else 0.0)
        ms += 10.0 * (decision["computingWaiting"] > 0) + 5.0 * (pulled and decision["sourceWaiting"] > 0)
        return ms / 1e3

    def serve(self, handler: BaseHTTPRequestHandler, request: dict[str, Any], chat: bool) -> None:
        if chat:
            text = " ".join(str(m.get("content", "")) for m in request.get("messages", []))
        else:
            text = str(request.get("prompt", ""))
        prompt_tokens = len(text.split()) + (CHAT_SYSTEM_TOKENS if chat else 0)
        number, decision = self._decide(prompt_tokens)
        time.sleep(self._first_token_s(prompt_tokens, decision))
        if number % FAIL_EVERY == 0:
            body = json.dumps({"object": "error", "message": "stand-in engine failure", "code": 500}).encode()
            handler._send(500, "application/json", body)  # type: ignore[attr-defined]
            return
        n_tokens = 1 if number % ONE_TOKEN_EVERY == 0 else min(MAX_TOKENS, int(request.get("max_tokens") or MAX_TOKENS))
        rid = ("chatcmpl-" if chat else "cmpl-") + decision["requestID"]
        words = [VOCAB[(number + k) % len(VOCAB)] for k in range(n_tokens)]
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": n_tokens, "total_tokens": prompt_tokens + n_tokens}
        if not request.get("stream"):
            choice = ({"index": 0, "message": {"role": "assistant", "content": " ".join(words)}, "finish_reason": "stop"}
                      if chat else {"index": 0, "text": " ".join(words), "finish_reason": "stop"})
            body = json.dumps({"id": rid, "object": "chat.completion" if chat else "text_completion", "model": MODEL,
                               "choices": [choice], "usage": usage}).encode()
            handler._send(200, "application/json", body)  # type: ignore[attr-defined]
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(choices: list[dict[str, Any]], **extra: Any) -> None:
            payload = {"id": rid, "object": kind, "created": int(time.time()), "model": MODEL, "choices": choices, **extra}
            handler.wfile.write(f"data: {json.dumps(payload)}\n\n".encode())
            handler.wfile.flush()

        if chat:  # vLLM opens a chat stream with the role alone; inference-perf keeps no chunk for it
            event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
        for k, word in enumerate(words):
            last = k == len(words) - 1
            piece = (" " if k else "") + word
            choice = ({"index": 0, "delta": {"content": piece}} if chat else {"index": 0, "text": piece})
            event([{**choice, "finish_reason": "stop" if last else None}])
            if not last:
                time.sleep(0.004)
        event([], usage=usage)
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()


def run_inference_perf(executable: Path, folder: Path, *, api: str, timeout_s: float = 120.0, seed: int = 0,
                       **config: Any) -> tuple[Path, Path, Path]:
    """Run inference-perf against a fresh stand-in; (per-request file, EPP log, config file) under ``folder``."""
    import subprocess

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = write_tokenizer(folder / "tokenizer")
    reports = folder / "reports"
    with StandIn(folder / "epp.log", seed=seed) as standin:
        path = write_config(folder / "config.yml",
                            inference_perf_config(standin.base_url, tokenizer, reports, api=api, **config))
        done = subprocess.run([str(executable), "--config_file", str(path)], cwd=folder, capture_output=True, text=True,
                              timeout=timeout_s, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                                      "PATH": "/usr/bin:/bin", "HOME": str(folder)})
    if done.returncode != 0:
        raise RuntimeError(f"inference-perf exited {done.returncode}:\n{done.stderr[-3000:]}")
    return reports / "per_request_lifecycle_metrics.json", folder / "epp.log", path


# name -> (seed, api, config): every shape the import must handle, each from a real run
FIXTURE_RUNS: dict[str, tuple[int, str, dict[str, Any]]] = {
    "completion": (1, "completion", {"requests_per_s": 8.0}),
    "chat": (2, "chat", {"requests_per_s": 8.0}),
    "chat-computed": (3, "chat", {"requests_per_s": 4.0, "computed_metrics": True}),
    "no-chunks": (4, "completion", {"requests_per_s": 2.0, "response_chunks": False}),
    "unary": (5, "chat", {"requests_per_s": 2.0, "streaming": False}),
}

SUMMARIES = ("completion", "chat")  # inference-perf's own TTFT summary, to check the import against


def regenerate(executable: Path, fixtures: Path) -> None:
    import shutil
    import tempfile

    for name, (seed, api, config) in FIXTURE_RUNS.items():
        with tempfile.TemporaryDirectory() as work:
            per_request, epp, used = run_inference_perf(executable, Path(work), api=api, seed=seed, **config)
            target = fixtures / name
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy(per_request, target / "per_request_lifecycle_metrics.json")
            shutil.copy(epp, target / "epp.log")
            if name in SUMMARIES:
                shutil.copy(per_request.with_name("summary_lifecycle_metrics.json"), target)
            text = used.read_text(encoding="utf-8").replace(str(Path(work)), "WORK")  # no temp paths in git
            (target / "inference-perf.yml").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    import sys

    regenerate(Path(sys.argv[1]).resolve(), Path(__file__).resolve().parent / "fixtures" / "llmd" / "loaded")
