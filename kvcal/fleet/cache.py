"""Each engine's prefix cache: an LRU over prefixes on the accelerator, an optional CPU tier below it.

A prefix is a system prompt or one session's conversation so far (which starts with its
system prompt, so a session entry is charged only for the tokens past it). Evicted
accelerator entries drop into the CPU tier when it has room, and out of the CPU tier
when it is full. ``FleetIndex`` is the router's precise prefix index: which pods hold
which prefix and how many tokens of it, over both tiers (vLLM's KV events report CPU-tier
stores too when ``self_describing_kv_events`` is on).
"""

from __future__ import annotations

from collections import OrderedDict

Key = tuple  # ("p", system prompt id) or ("s", session id)


class FleetIndex:
    """key -> {pod id: tokens held}, for every pod of the fleet."""

    def __init__(self) -> None:
        self.holders: dict[Key, dict[int, int]] = {}

    def held(self, key: Key) -> dict[int, int]:
        return self.holders.get(key) or {}

    def put(self, key: Key, pod: int, tokens: int) -> None:
        self.holders.setdefault(key, {})[pod] = tokens

    def drop(self, key: Key, pod: int) -> None:
        where = self.holders.get(key)
        if where is not None:
            where.pop(pod, None)
            if not where:
                del self.holders[key]


class PodCache:
    """One pod's two tiers; ``charge`` is what an entry occupies (its tokens past a shared system prompt)."""

    __slots__ = ("cpu", "cpu_cap", "cpu_used", "gpu", "gpu_cap", "gpu_used", "index", "pod")

    def __init__(self, pod: int, index: FleetIndex, gpu_tokens: int, cpu_tokens: int) -> None:
        self.pod, self.index = pod, index
        self.gpu: OrderedDict[Key, tuple[int, int]] = OrderedDict()  # key -> (tokens, charge)
        self.cpu: OrderedDict[Key, tuple[int, int]] = OrderedDict()
        self.gpu_cap, self.cpu_cap = gpu_tokens, cpu_tokens
        self.gpu_used = self.cpu_used = 0

    def on_gpu(self, key: Key) -> bool:
        return key in self.gpu

    def touch(self, key: Key) -> None:
        if key in self.gpu:
            self.gpu.move_to_end(key)
        elif key in self.cpu:
            self.cpu.move_to_end(key)

    def store(self, key: Key, tokens: int, charge: int) -> None:
        """Hold ``tokens`` of ``key`` on the accelerator (a longer copy replaces a shorter one, wherever it was)."""
        old = self.gpu.pop(key, None)
        if old is not None:
            if old[0] >= tokens:
                self.gpu[key] = old
                return
            self.gpu_used -= old[1]
        old_cpu = self.cpu.pop(key, None)
        if old_cpu is not None:
            self.cpu_used -= old_cpu[1]
        self.gpu[key] = (tokens, charge)
        self.gpu_used += charge
        self.index.put(key, self.pod, tokens)
        while self.gpu_used > self.gpu_cap and len(self.gpu) > 1:
            evicted, (held, cost) = self.gpu.popitem(last=False)
            self.gpu_used -= cost
            if self.cpu_cap >= cost:
                self.cpu[evicted] = (held, cost)
                self.cpu_used += cost
                while self.cpu_used > self.cpu_cap:
                    gone, (_, gone_cost) = self.cpu.popitem(last=False)
                    self.cpu_used -= gone_cost
                    self.index.drop(gone, self.pod)
            else:
                self.index.drop(evicted, self.pod)
