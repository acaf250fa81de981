"""HTML pieces of a report page: escaping, the figures tools read (``data-kvcal``), tables, and the page shell.

Why no template library: a report is a handful of sections of tables, lists and one SVG
each, and every text that reaches the page passes through :func:`esc` in one place; a
template engine would add a dependency and a second escaping rule for little gain.

The page is one file that opens from disk with no network: its style and its one small
script (sorting a table by a column) are inline, and so are its figures (inline SVG).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Attrs = Mapping[str, str | None]


def esc(text: object) -> str:
    """Text as it may stand in HTML content or a quoted attribute."""
    return html.escape(str(text), quote=True)


def tag(name: str, content: str = "", attrs: Attrs | None = None) -> str:
    """``<name attrs>content</name>``; ``content`` is HTML already (escape text with :func:`esc`)."""
    shown = "".join(f' {key}="{esc(value)}"' for key, value in (attrs or {}).items() if value is not None)
    return f"<{name}{shown}>{content}</{name}>"


def value_text(value: Any) -> str:
    """A JSON value as a ``data-kvcal`` element's text: what ``json.loads`` gives back for numbers; none for null."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return "none"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True)


def figure(key: str, value: Any, *, run: str | None = None, reason: str | None = None) -> str:
    """The element that shows a headline figure: ``data-kvcal`` names its key in the JSON that holds it.

    ``run`` tells apart the same key of several runs (compare, history); ``reason`` says why
    a value is none (shown beside it, and kept in ``data-kvcal-reason``).
    """
    shown = tag(
        "span",
        esc(value_text(value)),
        {"class": "figure", "data-kvcal": key, "data-kvcal-run": run, "data-kvcal-reason": reason},
    )
    return shown + (tag("span", esc(f" ({reason})"), {"class": "reason"}) if reason else "")


def fmt(value: float | None, digits: int = 4) -> str:
    """A number for people: significant digits, thousands separated; a dash for unknown."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, int) or (abs(value) >= 1000 and float(value).is_integer()):
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def cell(text: str, sort_key: object = None, *, header: bool = False) -> str:
    """A table cell; ``sort_key`` (a number or text) is what the column sorts by when it differs from the text."""
    return tag("th" if header else "td", esc(text), {"data-sort": None if sort_key is None else str(sort_key)})


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, sortable: bool = False, caption: str = "") -> str:
    """A table whose rows are already cells (:func:`cell`); ``sortable``: a click on a header sorts by it."""
    head = "".join(
        tag(
            "th",
            tag("button", esc(h), {"type": "button"}) if sortable else esc(h),
            {"scope": "col", "aria-sort": "none" if sortable else None},
        )
        for h in header
    )
    body = "".join(tag("tr", "".join(row)) for row in rows)
    return tag(
        "div",
        tag(
            "table",
            (tag("caption", esc(caption)) if caption else "") + tag("thead", tag("tr", head)) + tag("tbody", body),
            {"class": "sortable" if sortable else None},
        ),
        {"class": "scroll"},
    )


def key_values(
    items: Mapping[str, Any], *, figures: bool = False, run: str | None = None, compact: bool = False
) -> str:
    """Every key of a JSON object, shown as it is (nested objects and lists as JSON): new keys appear unasked.

    ``figures``: each value carries ``data-kvcal`` with its key, as the JSON names it; ``compact``: the pairs flow
    as a wrapped list (a few lines under a verdict) instead of a table.
    """
    if compact:
        pairs = "".join(
            tag(
                "div",
                tag("dt", esc(key)) + tag("dd", figure(key, value, run=run) if figures else esc(value_text(value))),
            )
            for key, value in items.items()
        )
        return tag("dl", pairs, {"class": "pairs"})
    rows = []
    for key, value in items.items():
        shown = figure(key, value, run=run) if figures else esc(value_text(value))
        if isinstance(value, (dict, list)) and value:
            shown = tag("code", shown)
        rows.append(tag("tr", tag("th", esc(key), {"scope": "row"}) + tag("td", shown)))
    return tag("div", tag("table", tag("tbody", "".join(rows)), {"class": "keys"}), {"class": "scroll"})


def bullets(lines: Iterable[str], *, ordered: bool = False, cls: str | None = None) -> str:
    """A list of text lines (escaped); empty when there are none."""
    items = "".join(tag("li", esc(line)) for line in lines)
    return tag("ol" if ordered else "ul", items, {"class": cls}) if items else ""


def section(title: str, body: str, *, anchor: str) -> str:
    return tag("section", tag("h2", esc(title)) + body, {"id": anchor, "aria-labelledby": None})


def paragraph(text: str, cls: str | None = None) -> str:
    return tag("p", esc(text), {"class": cls})


def details(summary: str, body: str) -> str:
    return tag("details", tag("summary", esc(summary)) + body)


STYLE = """
:root{color-scheme:light;--fg:#1a1a1a;--muted:#555;--line:#bbb;--bad:#8b0000;--ok:#0b5d1e;--bg:#fff}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);
max-width:1100px;margin:0 auto;padding:1rem}
h1{font-size:1.5rem;margin:.2rem 0 .6rem}h2{font-size:1.2rem;border-bottom:1px solid var(--line);padding-bottom:.2rem;
margin-top:1.8rem}
.verdict{border:2px solid var(--fg);padding:.6rem .9rem;margin:.6rem 0}
.verdict.refused{border-style:dashed}.verdict .big{font-size:1.6rem;font-weight:700}
.figure{font-variant-numeric:tabular-nums;font-weight:600}.reason{color:var(--muted);font-size:1rem;font-weight:400}
.warn li::marker{content:"\\26A0  "}.refusal{color:var(--bad)}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:.4rem 0;font-variant-numeric:tabular-nums}
th,td{border:1px solid var(--line);padding:.2rem .5rem;text-align:left;vertical-align:top}
dl.pairs{display:flex;flex-wrap:wrap;gap:.2rem 1.2rem;margin:.3rem 0}dl.pairs div{display:flex;gap:.4rem}
dl.pairs dt{color:var(--muted)}dl.pairs dd{margin:0;word-break:break-all}
table.keys th{font-weight:600;white-space:nowrap}code{font-size:.85em;word-break:break-all}
th button{font:inherit;font-weight:600;background:none;border:0;padding:0;cursor:pointer;
text-decoration:underline dotted}
th[aria-sort=ascending] button::after{content:" \\25B2"}th[aria-sort=descending] button::after{content:" \\25BC"}
figure{margin:.6rem 0}figure>svg{width:100%;height:auto;max-width:900px;display:block}
figcaption{color:var(--muted);font-size:.9rem}caption{text-align:left;color:var(--muted)}
svg text{font:12px system-ui,sans-serif;fill:#1a1a1a}svg .grid{stroke:#e3e3e3}svg .axis{stroke:#333}
svg .probe:hover{stroke-width:3}
ul.legend{list-style:none;display:flex;flex-wrap:wrap;gap:.1rem 1.2rem;padding:0;margin:.3rem 0;
font-size:.9rem}ul.legend li{display:flex;align-items:center;gap:.3rem}
ul.legend svg{flex:none}
nav ul{display:flex;flex-wrap:wrap;gap:.2rem 1rem;list-style:none;padding:0}
footer{margin-top:2rem;color:var(--muted);font-size:.85rem}
@media (max-width:600px){body{font-size:14px;padding:.5rem}.verdict .big{font-size:1.3rem}}
@media print{nav,th button::after{display:none}body{max-width:none;padding:0;font-size:11pt}
section,figure,table{break-inside:avoid}
a{color:inherit;text-decoration:none}}
"""

# Sorts a table by the clicked column: numbers by data-sort (else the text), ascending then descending;
# opens every folded detail before printing (a closed one would print as its summary alone).
SCRIPT = """
window.addEventListener("beforeprint",function(){
 document.querySelectorAll("details").forEach(function(d){d.open=true})});
document.querySelectorAll("table.sortable").forEach(function(t){
 t.querySelectorAll("thead th").forEach(function(th,i){
  th.querySelector("button").addEventListener("click",function(){
   var up=th.getAttribute("aria-sort")!=="ascending";
   t.querySelectorAll("thead th").forEach(function(o){o.setAttribute("aria-sort","none")});
   th.setAttribute("aria-sort",up?"ascending":"descending");
   var rows=Array.prototype.slice.call(t.tBodies[0].rows);
   function key(r){var c=r.cells[i];var v=c.getAttribute("data-sort");v=v===null?c.textContent:v;
    var n=parseFloat(v);return isNaN(n)?v:n}
   rows.sort(function(a,b){var x=key(a),y=key(b);var d=(typeof x===typeof y)?(x<y?-1:x>y?1:0):
    (typeof x==="number"?-1:1);return up?d:-d});
   rows.forEach(function(r){t.tBodies[0].appendChild(r)});
  });
 });
});
"""


def document(title: str, body: str, *, nav: Sequence[tuple[str, str]] = (), footer: str = "") -> str:
    """The whole page: one file, nothing fetched (the policy forbids any network source)."""
    links = (
        tag("nav", tag("ul", "".join(tag("li", tag("a", esc(text), {"href": f"#{anchor}"})) for anchor, text in nav)))
        if nav
        else ""
    )
    policy = "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:"
    head = (
        '<meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">'
        + tag("meta", "", {"http-equiv": "Content-Security-Policy", "content": policy}).replace("></meta>", ">")
        + tag("title", esc(title))
        + tag("style", STYLE)
    )
    main = tag("main", tag("h1", esc(title)) + links + body) + tag("footer", footer)
    return (
        "<!doctype html>\n"
        + tag("html", tag("head", head) + tag("body", main + tag("script", SCRIPT)), {"lang": "en"})
        + "\n"
    )
