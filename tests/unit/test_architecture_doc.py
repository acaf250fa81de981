"""docs/architecture.md's floors table names every package folder of kvcal/, each one that exists, in the package order."""

from __future__ import annotations

import re
from pathlib import Path

from test_packages import ORDER

ROOT = Path(__file__).resolve().parents[2]
TABLE_ROW = re.compile(r"^\| (base|ground|stage|top) \| (.+?) \|", re.M)


def _floors() -> list[list[str]]:
    """The package folders each row of the floors table names (``sweep/lengths/``), row by row."""
    doc = (ROOT / "docs" / "architecture.md").read_text()
    return [re.findall(r"`([\w/]+)/`", m.group(2)) for m in TABLE_ROW.finditer(doc)]


def test_every_package_folder_is_in_the_floors_table_and_every_named_one_exists():
    named = {folder for row in _floors() for folder in row}
    on_disk = {p.parent.relative_to(ROOT / "kvcal").as_posix() for p in (ROOT / "kvcal").rglob("__init__.py")} - {"."}
    assert named - on_disk == set(), "docs/architecture.md names a package folder kvcal/ does not have"
    assert on_disk - named == set(), "a package of kvcal/ is missing from docs/architecture.md's floors table"


def test_the_floors_table_follows_the_package_order():
    tops = [row[0].split("/")[0] for row in _floors() if row and row[0] != "transports"]
    assert tops == [name for name in ORDER if name != "base"]
