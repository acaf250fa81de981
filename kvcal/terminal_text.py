"""Text from other systems on its way to a terminal: control characters shown as escapes, never obeyed.

What a Prometheus label, a server's error page, an engine's answer or a file's content
holds is printed by kvcal in tables and one-line errors. Raw, an ESC or OSC sequence
would recolour, retitle or rewrite the terminal, a NUL or CR would hide what came
before it, a newline would forge a row of a table, and a bidi override would show
text in another order than it is. :func:`visible` escapes each of them the way Python
writes them (``\\x1b``, ``\\n``, ``\\u202e``), so the text stays one line and says what
it held. JSON output needs none of this: its encoder escapes control characters itself.

Escaped: every C0 control and DEL, every C1 control (U+0080-U+009F), the line and
paragraph separators U+2028/U+2029, the bidi embeddings, overrides, isolates and marks
(U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069), and lone surrogates (bytes that were
not UTF-8, which no terminal can show). Tabs are escaped too: they shift columns.

JSON escapes C0 controls itself but leaves DEL, C1 controls, separators and bidi
characters raw (valid JSON, and what pydantic writes); :func:`json_visible` writes those as
``\\uXXXX`` escapes, which decode to the same text, so JSON printed to a terminal is inert too.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")


def visible(text: str) -> str:
    """``text`` with every control, separator and bidi character escaped (module docstring): one line, inert."""
    return _UNSAFE.sub(_escape, text)


def flattened(text: str, limit: int | None = None) -> str:
    """``text`` on one line (runs of white space, newlines included, as one space), escaped, cut at ``limit``."""
    flat = visible(" ".join(text.split()))
    return flat if limit is None or len(flat) <= limit else flat[:limit] + "..."


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_visible(text: str) -> str:
    """JSON text with the characters JSON leaves raw but a terminal obeys written as ``\\uXXXX`` (same value)."""
    return _JSON_UNSAFE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
