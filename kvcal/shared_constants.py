"""Constants that flag declarations and light modules need, kept apart from the typed records and settings.

``kvcal.records`` and ``kvcal.settings`` build pydantic models when imported; a command's ``--help`` that
needed only one of these numbers paid for all of them (``kvcal emit-config --help``: the block-size bound and
the P2P port). Both modules re-export what they used to define, so every reader keeps its import.
"""

from __future__ import annotations

MAX_TOKENS = 10**9  # far above any real context, far below overflow (kvcal.fit.tables reads tables with it)

P2P_PORT = 7777
"""The P2P listener port of a deployed engine: the router's sidecar always tells the consumer to pull from it."""
