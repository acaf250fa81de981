"""How many GPUs each engine of a launched pair uses, and with which parallel sizes.

A role sees the GPUs in its ``CUDA_VISIBLE_DEVICES`` (kvcal.engines.vllm_launch). vLLM
uses ``tensor x pipeline x prefill-context x local data`` parallel ranks on a host
(``world_size`` in vLLM 0.33's ``ParallelConfig``, times ``--data-parallel-size-local``,
which defaults to ``--data-parallel-size``), one GPU each; left at its defaults it runs
everything at size 1, so an engine given four GPUs would use one of them and measure
another deployment. Hence:

- no size given through ``--engine-arg``: the engine's ``--tensor-parallel-size`` is
  the number of GPUs its role sees;
- sizes given: honoured as given (both engines get the same engine arguments), and a
  product that differs from the GPUs a role sees is refused before anything starts,
  naming the fix: per-role ``--producer-gpus``/``--consumer-gpus`` lists of that many
  GPUs, or other sizes;
- ``--share-gpu``: both engines see every visible GPU and each is sized to all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvcal.errors import InputError

# vLLM 0.33's spellings (arg_utils.py); its parser also takes underscores for dashes.
TENSOR = ("--tensor-parallel-size", "-tp")
PIPELINE = ("--pipeline-parallel-size", "-pp")
PREFILL_CONTEXT = ("--prefill-context-parallel-size", "-pcp")
DATA = ("--data-parallel-size", "-dp")
DATA_LOCAL = ("--data-parallel-size-local", "-dpl")
_ALL = (TENSOR, PIPELINE, PREFILL_CONTEXT, DATA, DATA_LOCAL)


@dataclass(frozen=True)
class ParallelSizes:
    """One engine's parallel sizes; ``gpus`` is how many GPUs of its host it occupies."""

    tensor: int = 1
    pipeline: int = 1
    data: int = 1
    prefill_context: int = 1
    data_local: int | None = None

    @property
    def gpus(self) -> int:
        return self.tensor * self.pipeline * self.prefill_context * (self.data_local or self.data)

    def shown(self) -> str:
        parts = [f"TP {self.tensor}", f"PP {self.pipeline}", f"DP {self.data}"]
        if self.prefill_context != 1:
            parts.append(f"PCP {self.prefill_context}")
        if self.data_local is not None:
            parts.append(f"local DP {self.data_local}")
        return " x ".join(parts)


def _spellings(names: tuple[str, ...]) -> tuple[str, ...]:
    return names + tuple(n.replace("-", "_").replace("__", "--", 1) for n in names if n.startswith("--"))


def _size(args: Sequence[str], names: tuple[str, ...]) -> int | None:
    """The value of the last of ``names`` in ``args`` (``--x 4`` or ``--x=4``), as vLLM's parser would take it."""
    found: str | None = None
    spellings = _spellings(names)
    for i, arg in enumerate(args):
        for name in spellings:
            if arg == name and i + 1 < len(args):
                found = args[i + 1]
            elif arg.startswith(name + "="):
                found = arg.split("=", 1)[1]
    if found is None:
        return None
    if not found.strip().isdigit() or int(found) < 1:
        raise InputError(f"--engine-arg {names[0]} {found}: a parallel size is a whole number of at least 1")
    return int(found)


def given_sizes(args: Sequence[str]) -> ParallelSizes | None:
    """The parallel sizes ``args`` set (others at vLLM's default 1), or None when they set none."""
    values = [_size(args, names) for names in _ALL]
    if all(v is None for v in values):
        return None
    tensor, pipeline, prefill_context, data, data_local = values
    return ParallelSizes(
        tensor=tensor or 1,
        pipeline=pipeline or 1,
        data=data or 1,
        prefill_context=prefill_context or 1,
        data_local=data_local,
    )


def place(role: str, devices: str, args: Sequence[str]) -> tuple[ParallelSizes, list[str]]:
    """The sizes ``role``'s engine runs with on ``devices`` (its CUDA_VISIBLE_DEVICES) and the flags kvcal adds.

    InputError (one line, the fix named) when sizes given through ``args`` do not fill exactly those GPUs.
    """
    seen = len([d for d in devices.split(",") if d.strip()])
    given = given_sizes(args)
    if given is None:
        return ParallelSizes(tensor=seen), [TENSOR[0], str(seen)]
    if given.gpus != seen:
        raise InputError(
            f"the engine arguments size each engine to {given.gpus} GPU(s) ({given.shown()}) but the {role} sees "
            f"{seen} (CUDA_VISIBLE_DEVICES={devices}): give each role {given.gpus} with "
            f"--producer-gpus/--consumer-gpus (comma-separated GPU ids), or sizes whose product is {seen}"
        )
    return given, []
