"""The generated lists in docs/ (a registry's choices between ``<!-- NAME: ... -->`` and ``<!-- /NAME -->``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def docs_block(page: str, name: str) -> str:
    """The text between the page's ``<!-- name: ... -->`` and ``<!-- /name -->`` lines."""
    text = (DOCS / page).read_text()
    found = re.search(rf"<!-- {name}: [^\n]*-->\n(.*?)\n<!-- /{name} -->", text, re.S)
    assert found, f"docs/{page} has no <!-- {name}: ... --> list"
    return found.group(1)


def loaded_after_import(module: str, watched: list[str]) -> list[str]:
    """Which of ``watched`` a fresh interpreter has in sys.modules after importing ``module``."""
    code = f"import sys, {module}; print(' '.join(m for m in {watched!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()
