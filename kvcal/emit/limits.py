"""emit-config's light constants, read by the flag declarations: the P2P port's default.

Kept apart from :mod:`kvcal.emit.formats` so that the flag declarations (and ``kvcal --help``) do not build
the typed records that rendering needs. The formats themselves are named in :mod:`kvcal.emit.renderers`;
the rules' names and the checks on their numbers are :mod:`kvcal.threshold.limits`' and
:mod:`kvcal.threshold.rules`'.
"""

from __future__ import annotations

from kvcal.transports.p2p_tier import P2P_PORT  # noqa: F401 - --p2p-port's default; the CLI reads it here
