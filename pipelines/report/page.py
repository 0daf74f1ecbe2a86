"""``report.html``: one self-contained page (its CSS and a small script inline, every figure a data: URI), readable
without a network, from a file or as an MLflow artifact, on a laptop and on a phone, and printable.

Its order: the title and a one-line summary of the grid, the answer (the headline, every number in an element with
``data-key`` ``headline.<path>`` and ``data-value`` its exact JSON value in ``report.json``), the figures with a
"How to read" caption each, every table (long ones collapsed under ``<details>``; a click on a column header sorts
it, numbers numerically, "n/a" and "> T" last), then the provenance and the files. Without JavaScript the page is
whole: the script only sorts, opens the collapsed sections for printing and counts the figures that loaded
(``data-images-loaded`` and ``data-images-total`` on ``<html>``).
"""

from __future__ import annotations

import base64
import html
import json
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from pipelines.report.document import Part, Report, Section, Table, headline_lines

#: A table section with more rows than this, or more columns than :data:`WIDE`, starts collapsed.
LONG = 6
WIDE = 8

CSS = """
:root{--fg:#1b1f24;--muted:#57606a;--line:#d0d7de;--bg:#fff;--soft:#f6f8fa;--win:#1a7f37;--winbg:#e8f5ec;
--loss:#b42318;--lossbg:#fdecea;--none:#6e7781;--nonebg:#f3f4f6;--link:#0550ae}
*{box-sizing:border-box}
html{-webkit-text-size-adjust:100%}
body{margin:0;background:var(--bg);color:var(--fg);font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,
"Helvetica Neue",Arial,sans-serif}
main{max-width:1100px;margin:0 auto;padding:1rem 1rem 3rem}
h1{font-size:1.6rem;line-height:1.25;margin:.5rem 0 .25rem}
h2{font-size:1.25rem;margin:2rem 0 .5rem}
h3{font-size:1.05rem;margin:1.25rem 0 .4rem}
p,li{max-width:52rem}
a{color:var(--link)}
code{font-size:.9em;background:var(--soft);padding:0 .2em;border-radius:3px;overflow-wrap:anywhere}
.summary{color:var(--muted);margin:0 0 .75rem}
.warn{border-left:4px solid var(--loss);background:var(--lossbg);padding:.25rem .75rem;margin:.5rem 0}
.warn ul{margin:.25rem 0;padding-left:1.2rem}
.answer{border:1px solid var(--line);border-radius:8px;padding:.75rem 1rem 1rem;margin:1rem 0;background:var(--soft)}
.answer h2{margin:0 0 .25rem}
.lead{margin:.25rem 0 .75rem;color:var(--muted)}
.cards{list-style:none;margin:0;padding:0;display:grid;gap:.75rem;grid-template-columns:repeat(auto-fit,minmax(20rem,1fr))}
.card{background:var(--bg);border:1px solid var(--line);border-left:6px solid var(--none);border-radius:6px;
padding:.6rem .8rem;max-width:none}
.card.win{border-left-color:var(--win)}
.card.loss{border-left-color:var(--loss)}
.card .sys{display:flex;flex-wrap:wrap;gap:.25rem .6rem;align-items:baseline}
.card .sys b{font-size:1.15rem}
.verdict{font-size:.8rem;font-weight:600;padding:.05rem .45rem;border-radius:999px;background:var(--nonebg);
color:var(--none)}
.win .verdict{background:var(--winbg);color:var(--win)}
.loss .verdict{background:var(--lossbg);color:var(--loss)}
.about{color:var(--muted);font-size:.9rem}
.card p{margin:.35rem 0 0}
.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.delta{font-size:1.05rem}.delta .num{font-weight:600}
.lead .num{font-weight:600}
.note{font-size:.9rem;color:var(--muted)}
nav.toc{font-size:.9rem;margin:1rem 0;line-height:1.9}
nav.toc a{white-space:nowrap}
figure{margin:1.5rem 0;break-inside:avoid}
figure img{display:block;max-width:100%;height:auto;border:1px solid var(--line);border-radius:4px;background:#fff}
figcaption{font-size:.9rem;color:var(--muted);margin-top:.35rem;max-width:52rem}
.how{font-size:.9rem;color:var(--muted)}
details{border:1px solid var(--line);border-radius:6px;margin:.75rem 0;padding:0 .75rem}
details[open]{padding-bottom:.5rem}
summary{cursor:pointer;padding:.5rem 0;list-style-position:outside;margin-left:1rem}
summary h2{display:inline;font-size:1.1rem;margin:0}
summary small{display:block;font-weight:normal;font-size:.85rem;color:var(--muted)}
section.table>h2{font-size:1.1rem}
.scroll{overflow-x:auto;max-width:100%;border:1px solid var(--line);border-radius:4px;margin:.5rem 0}
table{border-collapse:collapse;font-size:.85rem;font-variant-numeric:tabular-nums}
th,td{padding:.3rem .55rem;border-bottom:1px solid var(--line);white-space:nowrap;text-align:right}
th:first-child,td:first-child{text-align:left;position:sticky;left:0;background:var(--bg);z-index:1;
border-right:1px solid var(--line)}
thead th{background:var(--soft);vertical-align:bottom;white-space:normal;min-width:5rem}
thead th:first-child{background:var(--soft)}
tbody tr:nth-child(even) td{background:#fbfcfd}
.js thead th{cursor:pointer}
.js thead th[aria-sort=ascending]::after{content:" \\25B2";font-size:.7em}
.js thead th[aria-sort=descending]::after{content:" \\25BC";font-size:.7em}
.js-only{display:none}
.js .js-only{display:inline}
@media (max-width:600px){main{padding:.5rem .6rem 2rem}h1{font-size:1.3rem}body{font-size:15px}
.cards{grid-template-columns:1fr}}
@media print{
body{font-size:10.5pt}main{max-width:none;padding:0}
nav.toc,.js-only{display:none!important}
details{border:none;padding:0}
details::details-content{content-visibility:visible;display:block}
summary{list-style:none;margin-left:0}
summary::-webkit-details-marker{display:none}
.scroll{overflow:visible;border:none}
th:first-child,td:first-child{position:static}
table{font-size:8pt}
th,td{padding:.15rem .3rem;white-space:normal}
.card,figure,tr{break-inside:avoid}
a{color:inherit;text-decoration:none}
}
"""

#: Sorting by a click on a column header; opening the collapsed sections for printing; counting loaded figures.
SCRIPT = """
(function(){
var d=document.documentElement;d.classList.add('js');
function key(c){if(!c)return null;var s=(c.getAttribute('data-sort')||c.textContent).trim();
if(s===''||/^(n\\/a|never|>)/i.test(s))return null;
var m=/^(<?)\\s*([+\\-\\u2212]?(?:\\d+\\.?\\d*|\\.\\d+)(?:e[+\\-]?\\d+)?)/i.exec(s);
if(m){var v=parseFloat(m[2].replace('\\u2212','-'));return m[1]?v-1e-12:v;}return s.toLowerCase();}
function cmp(a,b,dir){if(a===null||b===null)return a===b?0:(a===null?1:-1);
var na=typeof a==='number',nb=typeof b==='number';if(na&&nb)return dir*(a-b);if(na!==nb)return na?-1:1;
return dir*(a<b?-1:a>b?1:0);}
Array.prototype.forEach.call(document.querySelectorAll('table.sortable'),function(t){
var ths=t.tHead.rows[0].cells;
Array.prototype.forEach.call(ths,function(th,i){th.tabIndex=0;th.title='sort by this column';
function go(){var dir=th.getAttribute('aria-sort')==='ascending'?-1:1;
Array.prototype.forEach.call(ths,function(h){h.removeAttribute('aria-sort');});
th.setAttribute('aria-sort',dir>0?'ascending':'descending');
var b=t.tBodies[0],rows=Array.prototype.map.call(b.rows,function(r,k){return [key(r.cells[i]),k,r];});
rows.sort(function(x,y){return cmp(x[0],y[0],dir)||x[1]-y[1];});
rows.forEach(function(x){b.appendChild(x[2]);});}
th.addEventListener('click',go);
th.addEventListener('keydown',function(e){if(e.key==='Enter'||e.key===' '){e.preventDefault();go();}});});});
window.addEventListener('beforeprint',function(){Array.prototype.forEach.call(
document.querySelectorAll('details:not([open])'),function(x){x.open=true;x.setAttribute('data-print-opened','');});});
window.addEventListener('afterprint',function(){Array.prototype.forEach.call(
document.querySelectorAll('details[data-print-opened]'),function(x){x.open=false;x.removeAttribute('data-print-opened');});});
function count(){var ok=0,all=document.images;for(var i=0;i<all.length;i++){
if(all[i].complete&&all[i].naturalWidth>0)ok++;}
d.setAttribute('data-images-loaded',String(ok));d.setAttribute('data-images-total',String(all.length));}
count();window.addEventListener('load',count);
})();
"""


def _e(s: Any) -> str:
    return html.escape(str(s), quote=True)


def _md(text: str) -> str:
    """A Markdown paragraph or list as HTML (markdown-it-py, CommonMark; raw HTML in it escaped)."""
    from markdown_it import MarkdownIt

    return str(MarkdownIt("commonmark", {"html": False}).render(text))


def _md_inline(text: str) -> str:
    from markdown_it import MarkdownIt

    return str(MarkdownIt("commonmark", {"html": False}).renderInline(text))


def _json_value(v: Any) -> str:
    """``v`` as report.json writes it (``json.dumps``: a float's shortest repr, which reads back the same float)."""
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, numbers.Integral):
        return json.dumps(int(v))
    if isinstance(v, numbers.Real):
        return json.dumps(float(v))
    return json.dumps(v)


def _parts(parts: Iterable[Part]) -> str:
    """Headline pieces as HTML: text escaped, each number in a ``span`` with its key and exact value."""
    out = []
    for p in parts:
        if isinstance(p, str):
            out.append(_e(p))
        else:
            key, value, text = p
            attrs = f'data-key="headline.{_e(key)}" data-value="{_e(_json_value(value))}"'
            out.append(f'<span class="num" {attrs}>{_e(text)}</span>')
    return "".join(out)


def _headline(rep: Report) -> str:
    out = ['<section id="answer" class="answer" aria-labelledby="answer-h">', '<h2 id="answer-h">The answer</h2>']
    if not rep.headline:
        return "".join(out) + f'<p class="lead">No headline: {_md_inline(rep.no_headline)}.</p></section>\n'
    lead, rows = headline_lines(rep)
    out.append(f'<p class="lead">{_parts(lead)}</p>')
    out.append('<ul class="cards">')
    for i, r in enumerate(rows):
        sig = r["significant"] if r["significant"] in ("win", "loss") else "none"
        out.append(f'<li class="card {sig}" data-row="{i}" data-significant="{sig}">')
        out.append(f'<div class="sys"><b>{_e(r["system"])}</b><span class="verdict">{_e(r["verdict"])}</span></div>')
        if r["about"]:
            out.append(f'<div class="about">{_parts(r["about"])}</div>')
        first, *rest = r["lines"]
        out.append(f'<p class="delta">{_parts(first)}</p>')
        out += [f"<p>{_parts(x)}</p>" for x in rest]
        # the row's sentence (report.md, the parent run's description) says again what the lines above show
        out.append("</li>")
    out.append("</ul>")
    if rep.headline.get("note"):
        out.append(f'<p class="note">{_md_inline(rep.headline["note"])}</p>')
    return "\n".join(out) + "\n</section>\n"


def _table(t: Table, label: str) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in t.head)
    body = "\n".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    cap = f"<h3>{_e(t.caption)}</h3>\n" if t.caption else ""
    name = _e(t.caption or label)
    return (
        f'{cap}<div class="scroll" role="region" tabindex="0" aria-label="{name}">'
        f'<table class="sortable"><thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody></table></div>\n'
    )


def _section(s: Section) -> str:
    if not s.body:  # a table not built: its title says why
        return f'<section id="{_e(s.anchor)}" class="table"><h2>{_md_inline(s.title)}</h2></section>\n'
    inner = []
    for b in s.body:
        inner.append(_table(b, s.title) if isinstance(b, Table) else _md(b))
    if s.how:
        inner.append(f'<p class="how"><b>How to read:</b> {_md_inline(s.how)}</p>')
    tables = [b for b in s.body if isinstance(b, Table)]
    long = s.rows > LONG or any(len(t.head) > WIDE for t in tables)
    hint = ' <span class="js-only">(click a column header to sort)</span>' if tables else ""
    return (
        f'<section id="{_e(s.anchor)}" class="table"><details{"" if long else " open"}>'
        f"<summary><h2>{_md_inline(s.title)}<small>{_md_inline(s.what)}{hint}</small></h2></summary>\n"
        + "\n".join(inner)
        + "</details></section>\n"
    )


def _img_src(name: str, images: Mapping[str, bytes] | None) -> str:
    if images is None:
        return _e(name)  # the file beside the page
    return "data:image/png;base64," + base64.b64encode(images[name]).decode("ascii")


def page(rep: Report, images: Mapping[str, bytes] | None = None) -> str:
    """The HTML page of ``rep`` (:func:`pipelines.report.render.render`); ``images`` by file name, embedded as
    data: URIs (None: linked by file name, the files beside the page)."""
    out = [
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(rep.title)}</title><style>{CSS}</style></head>",
        "<body><main>",
        f'<header><h1>{_e(rep.title)}</h1><p class="summary">{_md_inline(rep.summary)}</p>',
    ]
    if rep.warnings:
        out.append(f'<div class="warn" role="note">{_md(chr(10).join(rep.warnings))}</div>')
    out.append("</header>")
    out.append(_headline(rep))
    toc = []
    if rep.figures:
        toc.append('<a href="#figures">Figures</a>')
    toc += [f'<a href="#{_e(s.anchor)}">{_md_inline(s.title.split(":")[0])}</a>' for s in rep.tables]
    toc += ['<a href="#provenance">Provenance</a>', '<a href="#files">Files</a>']
    out.append('<nav class="toc" aria-label="contents"><b>On this page:</b> ' + " · ".join(toc) + "</nav>")
    if rep.figures:
        out.append('<section id="figures"><h2>Figures</h2>')
        for f in rep.figures:
            fid = "fig-" + f.name.rsplit(".", 1)[0].replace("_", "-")
            note = f"<br>{_md_inline(f.note)}" if f.note else ""
            out.append(
                f'<figure id="{_e(fid)}"><h3>{_md_inline(f.title)}</h3>'
                f'<img src="{_img_src(f.name, images)}" alt="{_e(f.title)}" data-name="{_e(f.name)}">'
                f"<figcaption><b>How to read:</b> {_md_inline(f.how)}{note}</figcaption></figure>"
            )
        out.append("</section>")
    out.append('<div id="tables">')
    out += [_section(s) for s in rep.tables]
    out.append("</div>")
    out.append(f'<section id="provenance"><h2>Provenance</h2>{_md(chr(10).join(rep.provenance))}</section>')
    out.append(
        f'<section id="files"><h2>Files for scripts and other tools</h2>{_md(chr(10).join(rep.files))}</section>'
    )
    out.append(f"</main><script>{SCRIPT}</script></body></html>\n")
    return "\n".join(out)
