#!/usr/bin/env python3
"""Rewrite the lists in docs/ that a registry generates (fleet policies, emit-config formats, threshold rules).

Usage (from a checkout): PYTHONPATH=$PWD .venv/bin/python scripts/docs_lists.py

Each list sits between ``<!-- NAME: ... -->`` and ``<!-- /NAME -->`` in its page; the tests
(tests/unit/fleet/test_fleet_policies.py, tests/unit/emit/test_format_table.py,
tests/unit/threshold/test_rules_table.py) fail when a page differs from its registry, so after adding a
policy, a format or a rule run this and commit the pages.
"""

from __future__ import annotations

import re
from pathlib import Path

from kvcal.emit.renderers import docs_list as format_list
from kvcal.fleet.policies import docs_list as policy_list
from kvcal.threshold.rules import docs_list as rule_list

DOCS = Path(__file__).resolve().parents[1] / "docs"
LISTS = {
    ("fleet.md", "policies"): policy_list,
    ("emit.md", "formats"): format_list,
    ("emit.md", "rules"): rule_list,
}


def main() -> None:
    for (page, name), render in LISTS.items():
        path = DOCS / page
        text = path.read_text()
        block = re.compile(rf"(<!-- {name}: [^\n]*-->\n).*?(\n<!-- /{name} -->)", re.S)
        new = block.sub(lambda m, body=render(): m.group(1) + body + m.group(2), text, count=1)
        if new != text:
            path.write_text(new)
            print(f"docs/{page}: {name} list rewritten")


if __name__ == "__main__":
    main()
