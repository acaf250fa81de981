"""The requests a fleet simulation serves: generated multi-turn sessions, or a replayed inference-perf trace.

A session draws its system prompt, its number of turns and, per turn, its input and
output tokens and the think time before the next turn, from its own random stream
(seeded by the run's seed and the session's number): every policy of one seed sees the
same sessions, so their differences are not sampling noise (common random numbers).
A turn's prompt is the conversation so far (system prompt, every earlier input and
output) plus the new input.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from kvcal.errors import InputError
from kvcal.files.reading import read_text
from kvcal.fit.observational import LifecycleRecord
from kvcal.fleet.workload import MAX_TRACE_BYTES, Workload

ARRIVE, NEW_SESSION = 0, 4  # kvcal.fleet.sim's event kinds


class Session:
    __slots__ = ("history", "id", "key", "rng", "sys_key", "sys_tokens", "turn", "turns_left")

    def __init__(self, sid: int, sys_id: int, sys_tokens: int, turns: int, rng: np.random.Generator) -> None:
        self.id, self.key, self.sys_key = sid, ("s", sid), ("p", sys_id)
        self.sys_tokens, self.turns_left, self.history, self.rng = sys_tokens, turns, sys_tokens, rng
        self.turn = 0


class TurnRequest:
    __slots__ = (
        "admitted",
        "arrival_ms",
        "counted",
        "done",
        "hand_to",
        "met_slo",
        "output",
        "pod",
        "prompt",
        "rid",
        "session",
    )

    def __init__(self, rid: int, session: Session, arrival_ms: float, prompt: int, output: int) -> None:
        self.rid, self.session, self.arrival_ms, self.prompt, self.output = rid, session, arrival_ms, prompt, output
        self.done, self.pod, self.met_slo, self.counted, self.admitted = 0, -1, False, False, False
        self.hand_to: tuple[int, int] | None = (
            None  # a P/D hold: (computing pod, tokens it pulls) once the source is done
        )


def read_trace(path: Path) -> tuple[tuple[float, int, int], ...]:
    """(start s, input tokens, output tokens) per successful request, sorted by start; read once per file version."""
    path = Path(path)
    try:
        stat = path.stat()
    except OSError:
        stat = None
    if stat is not None and stat.st_size > MAX_TRACE_BYTES:
        raise InputError(
            f"{path}: {stat.st_size / 2**20:.0f} MiB, over the {MAX_TRACE_BYTES // 2**20} MiB a trace "
            "may hold (replay a part of it)"
        )
    key = (stat.st_mtime_ns, stat.st_size) if stat is not None else None
    return _read_trace(str(path), key)


@lru_cache(maxsize=2)
def _read_trace(name: str, _version: object) -> tuple[tuple[float, int, int], ...]:
    path = Path(name)
    text = read_text(path, f"per-request file {path}")
    out = []
    for index, item in enumerate(_items(text, path)):
        request = _request_of(item, index, path)
        if request is not None:
            out.append(request)
    del text
    if not out:
        raise InputError(f"{path}: every request failed; nothing to replay")
    return tuple(sorted(out))


def _items(text: str, path: Path) -> Iterator[object]:
    """The top-level list's items one at a time: a record is decoded, reduced and dropped before the next."""
    decoder, spaces = json.JSONDecoder(), re.compile(r"[ \t\n\r]*")
    at = spaces.match(text, 0).end()  # type: ignore[union-attr]
    if text[at : at + 1] != "[":
        raise InputError(f"{path}: expected inference-perf's non-empty list of requests")
    at = spaces.match(text, at + 1).end()  # type: ignore[union-attr]
    if text[at : at + 1] == "]":
        raise InputError(f"{path}: expected inference-perf's non-empty list of requests")
    while True:
        try:
            item, at = decoder.raw_decode(text, at)
        except ValueError as err:
            raise InputError(f"{path}: not JSON ({err})") from None
        except RecursionError:
            raise InputError(f"{path}: JSON nested too deep to read") from None
        yield item
        at = spaces.match(text, at).end()  # type: ignore[union-attr]
        mark = text[at : at + 1]
        at = spaces.match(text, at + 1).end()  # type: ignore[union-attr]
        if mark == "]":
            if at != len(text):
                raise InputError(f"{path}: not JSON (extra data after the list at character {at})")
            return
        if mark != ",":
            raise InputError(f"{path}: not JSON (expected ',' or ']' at character {at - 1})")


def _request_of(item: object, index: int, path: Path) -> tuple[float, int, int] | None:
    try:
        record = LifecycleRecord.model_validate(item)
    except ValidationError as err:
        raise InputError(
            f"{path} request {index}: {err.errors()[0]['msg']} at {'.'.join(map(str, err.errors()[0]['loc']))}"
        ) from None
    if record.error:
        return None
    tokens = record.info.prompt_tokens() if record.info else None
    if tokens is None:
        raise InputError(f"{path} request {index}: no input token count (info.request_metrics.text.input_tokens)")
    metrics = record.info.response_metrics if record.info else None
    times = (metrics.output_token_times if metrics else None) or []
    return (record.start_time, max(1, tokens), max(1, len(times)))


class Traffic:
    def __init__(self, workload: Workload, seed: int) -> None:
        self.w, self.seed = workload, seed
        self.next_session = 0
        self.next_request = 0
        self.arrival_rng = np.random.default_rng([seed, 1])
        self.trace = read_trace(Path(workload.trace.per_request)) if workload.trace is not None else None

    def initial_events(self) -> list:
        if self.trace is not None:
            return self._replay()
        arrival = self.w.arrival
        assert arrival is not None
        if arrival.rate is not None:
            return [(self.arrival_rng.exponential(1e3 / arrival.rate), NEW_SESSION, None)]
        return [(float(self.arrival_rng.uniform(0, 1e3)), NEW_SESSION, None) for _ in range(arrival.concurrency or 0)]

    def _replay(self) -> list:
        assert self.trace is not None and self.w.trace is not None
        start = self.trace[0][0]
        shared = self.w.trace.shared_prefix_tokens
        events = []
        for begin, prompt, output in self.trace:
            session = Session(self._session_id(), 0, min(shared, prompt - 1), 1, np.random.default_rng(0))
            session.turn = 1
            events.append(
                ((begin - start) * 1e3, ARRIVE, self._request(session, (begin - start) * 1e3, prompt, output))
            )
        return events

    def _session_id(self) -> int:
        self.next_session += 1
        return self.next_session

    def _request(self, session: Session, at_ms: float, prompt: int, output: int) -> TurnRequest:
        self.next_request += 1
        return TurnRequest(self.next_request, session, at_ms, prompt, output)

    def start_session(self, now: float, _: object) -> list:
        """A new session's first turn now; for an open stream, also the next session's start."""
        spec, arrival = self.w.sessions, self.w.arrival
        assert spec is not None and arrival is not None
        sid = self._session_id()
        rng = np.random.default_rng([self.seed, 2, sid])
        sys_id = int(rng.integers(spec.system_prompts))
        session = Session(sid, sys_id, spec.system_prompt_tokens, max(1, int(round(spec.turns.sample(rng)))), rng)
        out = [self._turn(session, now)]
        if arrival.rate is not None:
            out.append((now + self.arrival_rng.exponential(1e3 / arrival.rate), NEW_SESSION, None))
        return out

    def _turn(self, session: Session, at_ms: float) -> tuple:
        spec = self.w.sessions
        assert spec is not None
        prompt = session.history + spec.input_tokens.tokens(session.rng)
        session.turns_left -= 1
        session.turn += 1
        return (at_ms, ARRIVE, self._request(session, at_ms, prompt, spec.output_tokens.tokens(session.rng)))

    def turn_done(self, now: float, req: TurnRequest) -> list:
        """The session's next turn after its think time; a closed loop starts a new session when one ends."""
        session = req.session
        session.history = req.prompt + req.output
        if self.trace is not None:
            return []
        if session.turns_left > 0:
            spec = self.w.sessions
            assert spec is not None
            return [self._turn(session, now + spec.think_time_s.sample(session.rng) * 1e3)]
        if self.w.arrival is not None and self.w.arrival.concurrency is not None:
            return [(now, NEW_SESSION, None)]
        return []
