"""The HTML report of a comparison: one self-contained page (``Comparison.to_html``, ``compare --html``).

Everything is inline (plotly.js once, gzip-compressed and unpacked by the page itself; the figures'
data; a few lines of script for the table), so the file opens offline in any current browser and no
request leaves the page. On top: the verdict and the first
divergence, with the ``view`` command that opens its neighbourhood in Netron. Then the error of every
tensor along execution order (max abs and max relative error on a log axis with the tolerance drawn,
cosine similarity below; passing, local and inherited failures in different colours, hover for names),
the table of every tensor (click a header to sort, type to filter), the values of the first divergence
and of each local failure (histograms of both sides, candidate against reference), and the divergent
node's neighbourhood in the graph when the candidate model is given.

Plots come from plotly (the ``report`` extra: ``pip install graphkit[report]``).
"""

from __future__ import annotations

import base64
import functools
import gzip
import html
import json
import math
import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from graphkit._compare import Comparison, TensorDiff
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit._view import around_nodes
from graphkit.errors import UsageError

if TYPE_CHECKING:
    import plotly.graph_objects as go

__all__ = ["comparison_html", "packed_plotly_js", "plotly_modules", "view_command"]

#: Colours of a tensor's status, in the plot, the table and the graph.
COLOURS = {"passed": "#4c78a8", "local": "#d62728", "inherited": "#ff9f1c", "failed": "#9467bd"}
#: Value plots drawn at most (the first divergence first, then local failures in order).
MAX_VALUE_PLOTS = 8
#: Steps up and down the graph from the divergent node in the neighbourhood drawing.
NEIGHBOURHOOD_DEPTH = 2
_FLOOR = 1e-12  # errors of 0 are drawn here on the log axis (the hover says 0)


def comparison_html(result: Comparison, *, model: Model | None = None) -> str:
    """The report page of ``result`` (see the module docstring)."""
    go, pio = plotly_modules()
    tensors = list(result.tensors)
    figures = [("errors", _error_figure(go, result, tensors))]
    focus = _focus(result)
    for t in focus:
        figure = _values_figure(go, t)
        if figure is not None:
            figures.append((f"values of {t.label}", figure))
    if model is not None and result.first_divergence is not None:
        figure = _neighbourhood_figure(go, result, model)
        if figure is not None:
            figures.append(("neighbourhood", figure))
    blocks = [f"<div id='plot{i}' class='plot'></div><script type='application/json' class='figure' "
              f"data-target='plot{i}'>{_figure_json(pio, figure)}</script>" for i, (_, figure) in enumerate(figures)]
    title = "PASSED" if result.passed else "FAILED"
    return _PAGE.format(
        title=html.escape(f"graphkit compare: {title}"),
        style=_STYLE,
        head=_head(result, model),
        error_plot=blocks[0],
        table=_table(tensors),
        value_plots=_values_section([(name, block) for (name, _), block in zip(figures[1:], blocks[1:])
                                     if name != "neighbourhood"]),
        neighbourhood="".join(f"<h2>Neighbourhood of the first divergence</h2>{block}"
                              for (name, _), block in zip(figures[1:], blocks[1:]) if name == "neighbourhood"),
        plotly=packed_plotly_js(),
        script=_SCRIPT,
        loader=_LOADER,
    )


def _figure_json(pio: Any, figure: go.Figure) -> str:
    """The figure as JSON that can sit inside a <script> element: every ``<`` (only ever inside a JSON
    string) written ``\\u003c``, so no ``</script>`` or ``<!--`` in a tensor's name ends or bends it."""
    return str(pio.to_json(figure, validate=False)).replace("<", "\\u003c")


@functools.lru_cache(maxsize=1)
def packed_plotly_js() -> str:
    """plotly.js, gzip-compressed and base64-encoded, for the page to unpack with DecompressionStream.

    The bundle plotly ships is 4.8 MB of script; packed it is about 2 MB, which makes a report small
    enough to mail. Compressed once per process (about half a second); ``mtime=0`` keeps the same
    report byte for byte identical between runs.
    """
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), compresslevel=9, mtime=0)).decode("ascii")


def _values_section(plots: Sequence[tuple[str, str]]) -> str:
    if not plots:
        return ""
    return "<h2>Values of the first divergence and of local failures</h2>" + "".join(
        f"<section class='values'><h3>{html.escape(name)}</h3>{block}</section>" for name, block in plots)


def view_command(result: Comparison, model_path: str | None) -> str | None:
    """``python -m graphkit view MODEL --around NODE`` for the first divergence, if there is one."""
    div = result.first_divergence
    if div is None:
        return None
    target = div.node if div.node and div.node != div.op_type else div.tensor
    return (f"python -m graphkit view {shlex.quote(model_path or 'MODEL.onnx')} --around {shlex.quote(target)} "
            f"--depth {NEIGHBOURHOOD_DEPTH}")


def plotly_modules() -> tuple[Any, Any]:
    """plotly.graph_objects and plotly.io, or a UsageError naming the extra that installs them."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError as err:
        raise UsageError("the HTML report needs plotly, which is not installed",
                         hint="pip install graphkit[report]") from err
    return go, pio


def _status(t: TensorDiff) -> str:
    if t.passed:
        return "passed"
    return t.origin if t.origin in ("local", "inherited") else "failed"


def _focus(result: Comparison) -> list[TensorDiff]:
    """The tensors whose values are drawn: the first divergence, then the local failures."""
    chosen: list[TensorDiff] = []
    div = result.first_divergence
    if div is not None:
        chosen.extend(t for t in result.tensors if t.name == div.tensor)
    chosen.extend(t for t in result.tensors if t.origin == "local" and t not in chosen)
    return [t for t in chosen if t.sample is not None][:MAX_VALUE_PLOTS]


def _log_value(value: float) -> float | None:
    if math.isnan(value):
        return None
    if math.isinf(value):
        return 1e30
    return max(value, _FLOOR)


def _number(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf"
    return f"{value:.3g}" if value else "0"


def _error_figure(go: Any, result: Comparison, tensors: Sequence[TensorDiff]) -> go.Figure:
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.72, 0.28], vertical_spacing=0.04)
    x = list(range(len(tensors)))
    hover = [f"#{i} {html.escape(t.label)}<br>{html.escape(t.node)} ({t.op_type})<br>{_status(t)}"
             f"<br>{html.escape(t.nonfinite or '')}{'<br>' if t.nonfinite else ''}max abs {_number(t.max_abs)}, max rel {_number(t.max_rel)}, cosine {_number(t.cosine)}"
             for i, t in zip(x, tensors)]
    colours = [COLOURS[_status(t)] for t in tensors]
    fig.add_trace(go.Scatter(x=x, y=[_log_value(t.max_abs) for t in tensors], mode="lines+markers",
                             name="max abs error", marker={"color": colours, "size": 7, "symbol": "circle"},
                             line={"color": "#888", "width": 1}, hovertext=hover, hoverinfo="text"), row=1, col=1)
    fig.add_trace(go.Scatter(x=x, y=[_log_value(t.max_rel) for t in tensors], mode="markers",
                             name="max relative error", marker={"color": colours, "size": 6, "symbol": "x"},
                             hovertext=hover, hoverinfo="text", visible="legendonly"), row=1, col=1)
    tol = result.tolerance
    fig.add_hline(y=max(tol.atol, _FLOOR), line={"color": "#2ca02c", "dash": "dash"}, row=1, col=1,
                  annotation_text=f"atol {tol.atol:g}", annotation_position="top left")
    fig.add_trace(go.Scatter(x=x, y=[None if math.isnan(t.cosine) else t.cosine for t in tensors],
                             mode="lines+markers", name="cosine similarity", marker={"color": colours, "size": 5},
                             line={"color": "#bbb", "width": 1}, hovertext=hover, hoverinfo="text"), row=2, col=1)
    for status, colour in COLOURS.items():  # the colour legend
        if any(_status(t) == status for t in tensors):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=status,
                                     marker={"color": colour, "size": 9}), row=1, col=1)
    div = result.first_divergence
    if div is not None:
        at = next((i for i, t in enumerate(tensors) if t.name == div.tensor), None)
        if at is not None:
            fig.add_vline(x=at, line={"color": COLOURS["local"] if div.local else COLOURS["inherited"], "dash": "dot"})
            fig.add_annotation(x=at, y=1.0, yref="paper", text=f"first divergence: {html.escape(div.node)}",
                               showarrow=False, xanchor="left", yanchor="bottom", font={"size": 12})
    fig.update_yaxes(type="log", title_text="error", exponentformat="power", row=1, col=1)
    fig.update_yaxes(title_text="cosine", row=2, col=1)
    fig.update_xaxes(title_text="tensor, in execution order", row=2, col=1)
    fig.update_layout(height=520, margin={"l": 60, "r": 20, "t": 30, "b": 40}, template="plotly_white",
                      legend={"orientation": "h", "y": -0.18}, hovermode="closest")
    return fig


def _values_figure(go: Any, t: TensorDiff) -> go.Figure | None:
    from plotly.subplots import make_subplots

    if t.sample is None:
        return None
    cand, ref = t.sample
    keep = [i for i in range(len(cand)) if math.isfinite(cand[i]) and math.isfinite(ref[i])]
    cand_values = [float(cand[i]) for i in keep]
    ref_values = [float(ref[i]) for i in keep]
    fig = make_subplots(rows=1, cols=2, subplot_titles=(
        f"values ({len(keep)} sampled elements)", "candidate against reference"))
    fig.add_trace(go.Histogram(x=ref_values, name="reference", opacity=0.6, marker={"color": COLOURS["passed"]},
                               nbinsx=60), row=1, col=1)
    fig.add_trace(go.Histogram(x=cand_values, name="candidate", opacity=0.6, marker={"color": COLOURS["local"]},
                               nbinsx=60), row=1, col=1)
    fig.add_trace(go.Scatter(x=ref_values, y=cand_values, mode="markers", name="elements",
                               marker={"size": 4, "color": COLOURS[_status(t)], "opacity": 0.6}), row=1, col=2)
    if ref_values:
        lo, hi = min(ref_values + cand_values), max(ref_values + cand_values)
        fig.add_trace(go.Scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="candidate = reference",
                                 line={"color": "#2ca02c", "dash": "dash"}), row=1, col=2)
    fig.update_layout(barmode="overlay", height=340, template="plotly_white",
                      margin={"l": 50, "r": 20, "t": 40, "b": 40})
    fig.update_xaxes(title_text="reference", row=1, col=2)
    fig.update_yaxes(title_text="candidate", row=1, col=2)
    return fig


def _neighbourhood_figure(go: Any, result: Comparison, model: Model) -> go.Figure | None:
    div = result.first_divergence
    assert div is not None
    graph = model.lazy_proto.graph
    index = GraphIndex(graph)
    start = index.producer.get(div.tensor)
    if start is None:
        return None
    around = around_nodes(index, start, NEIGHBOURHOOD_DEPTH)
    status = {t.name: _status(t) for t in result.tensors}
    columns: dict[int, list[int]] = {}
    for i, level in sorted(around.items(), key=lambda item: (item[1], item[0])):
        columns.setdefault(level, []).append(i)
    where = {i: (level, row - (len(nodes) - 1) / 2) for level, nodes in columns.items() for row, i in enumerate(nodes)}
    edge_x: list[float | None] = []
    edge_y: list[float | None] = []
    for i in around:
        for name in index.reads(i):
            j = index.producer.get(name)
            if j in where:
                edge_x += [where[j][0], where[i][0], None]
                edge_y += [where[j][1], where[i][1], None]
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=edge_x, y=edge_y, mode="lines", line={"color": "#999", "width": 1.5},
                             hoverinfo="skip", showlegend=False))
    nodes = list(where)
    labels, colours, hover = [], [], []
    for i in nodes:
        node = graph.node[i]
        outs = [o for o in node.output if o]
        state = next((status[o] for o in outs if o in status and status[o] != "passed"),
                     "passed" if any(o in status for o in outs) else "not compared")
        labels.append(f"{node.op_type}<br>{_short(node.name or f'#{i}')}")
        colours.append(COLOURS.get(state, "#ccc"))
        hover.append(f"{html.escape(node.name or f'#{i}')} ({node.op_type})<br>{state}<br>outputs: "
                     + ", ".join(html.escape(o) for o in outs))
    fig.add_trace(go.Scatter(
        x=[where[i][0] for i in nodes], y=[where[i][1] for i in nodes], mode="markers+text", text=labels,
        textposition="bottom center", hovertext=hover, hoverinfo="text", showlegend=False,
        marker={"size": [26 if i == start else 18 for i in nodes], "color": colours,
                "line": {"color": "#222", "width": [3 if i == start else 1 for i in nodes]}}))
    levels = [where[i][0] for i in nodes]
    rows = [where[i][1] for i in nodes]
    fig.update_xaxes(visible=False, range=[min(levels) - 0.6, max(levels) + 0.6])
    fig.update_yaxes(visible=False, range=[min(rows) - 0.8, max(rows) + 0.5])
    fig.update_layout(height=380, template="plotly_white", margin={"l": 20, "r": 20, "t": 20, "b": 20})
    return fig


def _short(name: str, width: int = 28) -> str:
    if len(name) <= width:
        return html.escape(name)
    half = (width - 1) // 2
    return html.escape(name[:half] + "…" + name[-half:])


def _head(result: Comparison, model: Model | None) -> str:
    failed = result.failed
    tol = result.tolerance
    local = sum(1 for t in failed if t.origin == "local")
    inherited = sum(1 for t in failed if t.origin == "inherited")
    verdict = (f"<p class='verdict passed'>PASSED: {len(result.tensors)} tensors within atol {tol.atol:g}, "
               f"rtol {tol.rtol:g}</p>" if result.passed else
               f"<p class='verdict failed'>FAILED: {len(failed)} of {len(result.tensors)} tensors out of "
               f"tolerance ({local} local, {inherited} inherited; atol {tol.atol:g}, rtol {tol.rtol:g})</p>")
    rows = [("reference", result.reference), ("candidate", result.candidate)]
    parts = [verdict, "<table class='facts'>"]
    parts += [f"<tr><th>{k}</th><td>{html.escape(v)}</td></tr>" for k, v in rows]
    parts.append("</table>")
    div = result.first_divergence
    if div is not None:
        origin = ("local: re-run on the reference side's inputs it still diverges" if div.local is True else
                  "inherited: re-run on the reference side's inputs it agrees" if div.local is False else
                  "local check not run")
        path = str(model.path) if model is not None and model.path is not None else None
        parts.append(
            "<div class='divergence' id='first-divergence'><h2>First divergence</h2>"
            f"<p>node <code>{html.escape(div.node)}</code> ({html.escape(div.op_type)}) → tensor "
            f"<code>{html.escape(div.tensor)}</code>, "
            + html.escape(f"NaN/Inf differ: {div.nonfinite}" if div.nonfinite else
                          f"max abs error {_number(div.max_abs)}") + "</p>"
            f"<p>{origin}" + (f" ({html.escape(div.local_nonfinite)})" if div.local_nonfinite else
                              f" (max abs {_number(div.local_max_abs)})" if div.local_max_abs is not None else "")
            + "</p><p>inputs: " + ", ".join(f"<code>{html.escape(i)}</code>" for i in div.inputs if i) + "</p>"
            f"<p>see it in Netron: <code>{html.escape(view_command(result, path) or '')}</code></p></div>")
    for note in result.notes:
        parts.append(f"<p class='note'>{html.escape(note)}</p>")
    return "".join(parts)


def _table(tensors: Sequence[TensorDiff]) -> str:
    head = ["#", "tensor", "node", "op", "dtype", "shape", "max abs", "max rel", "mean abs", "cosine",
            "out of tol.", "status"]
    numeric = {0, 6, 7, 8, 9, 10}
    rows = []
    for i, t in enumerate(tensors):
        state = _status(t)
        cells = [(i, str(i)), (t.label, t.label), (t.node, t.node), (t.op_type, t.op_type), (t.dtype, t.dtype),
                 ("x".join(map(str, t.shape)), "x".join(map(str, t.shape)) or "scalar"),
                 (t.max_abs, t.nonfinite or _number(t.max_abs)), (t.max_rel, _number(t.max_rel)),
                 (t.mean_abs, _number(t.mean_abs)), (t.cosine, _number(t.cosine)),
                 (t.out_of_tolerance, f"{100 * t.out_of_tolerance:.1f}%"), (state, state)]
        tds = []
        for k, (key, shown) in enumerate(cells):
            sort = json.dumps(_sort_key(key)) if k in numeric else html.escape(str(key), quote=True)
            tds.append(f"<td data-sort='{html.escape(sort, quote=True)}'>{html.escape(shown)}</td>")
        rows.append(f"<tr class='{state}'>" + "".join(tds) + "</tr>")
    header = "".join(f"<th data-numeric='{int(k in numeric)}' title='click to sort'>{h}</th>"
                     for k, h in enumerate(head))
    return (f"<table id='tensors'><thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _sort_key(value: Any) -> float:
    number = float(value)
    if math.isnan(number):
        return -1.0
    return 1e308 if math.isinf(number) else number


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin-top:1.6em}h3{font-size:1em;margin:.8em 0 .2em}
.verdict{font-size:1.2em;font-weight:600;padding:.5em .8em;border-radius:4px}
.verdict.passed{background:#e6f4ea;color:#1e6b34}.verdict.failed{background:#fde8e8;color:#a11}
.divergence{border-left:4px solid #d62728;padding:.2em 1em;background:#fafafa}
code{background:#f1f1f1;padding:0 .25em;border-radius:3px;word-break:break-all}
table.facts th{text-align:left;padding-right:1em;font-weight:500;color:#555}
#tensors{border-collapse:collapse;width:100%;font-size:.85em}
#tensors th{position:sticky;top:0;background:#f5f5f5;cursor:pointer;text-align:left;padding:.3em .4em;border-bottom:2px solid #ccc;white-space:nowrap}
#tensors th.asc::after{content:' ▲'}#tensors th.desc::after{content:' ▼'}
#tensors td{padding:.2em .4em;border-bottom:1px solid #eee;max-width:28em;overflow-wrap:anywhere}
#tensors tr.local td:last-child{color:#d62728;font-weight:600}#tensors tr.inherited td:last-child{color:#c77700;font-weight:600}
#tensors tr.failed td:last-child{color:#9467bd;font-weight:600}
.controls{margin:.5em 0}.controls input{width:22em;padding:.25em}.note{color:#8a6d3b}
.tablewrap{max-height:32em;overflow:auto;border:1px solid #ddd}
"""

_SCRIPT = """
(function(){
  var table=document.getElementById('tensors');if(!table)return;
  var body=table.tBodies[0],heads=table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads,function(th,col){th.addEventListener('click',function(){
    var asc=!th.classList.contains('asc');
    Array.prototype.forEach.call(heads,function(h){h.classList.remove('asc','desc');});
    th.classList.add(asc?'asc':'desc');
    var numeric=th.getAttribute('data-numeric')==='1';
    var rows=Array.prototype.slice.call(body.rows);
    rows.sort(function(a,b){var x=a.cells[col].getAttribute('data-sort'),y=b.cells[col].getAttribute('data-sort');
      var r=numeric?(parseFloat(x)-parseFloat(y)):x.localeCompare(y);return asc?r:-r;});
    rows.forEach(function(r){body.appendChild(r);});
  });});
  var box=document.getElementById('filter'),which=document.getElementById('status');
  function apply(){var q=box.value.toLowerCase(),s=which.value,shown=0;
    Array.prototype.forEach.call(body.rows,function(r){
      var ok=(!q||r.textContent.toLowerCase().indexOf(q)>=0)&&(s==='all'||(s==='failed'?r.className!=='passed':r.className===s));
      r.style.display=ok?'':'none';if(ok)shown++;});
    document.getElementById('shown').textContent=shown+' of '+body.rows.length+' tensors';}
  box.addEventListener('input',apply);which.addEventListener('change',apply);apply();
})();
"""

#: Unpacks plotly.js (DecompressionStream: Chromium 80, Firefox 113, Safari 16.4 and later), runs it as
#: an inline script and draws every figure; a browser that cannot says so above the plots' places.
_LOADER = """
(async function(){
  var figures=document.querySelectorAll('script.figure');
  try{
    var packed=atob(document.getElementById('plotlyjs').textContent.trim());
    var bytes=new Uint8Array(packed.length);
    for(var i=0;i<packed.length;i++)bytes[i]=packed.charCodeAt(i);
    var stream=new Blob([bytes]).stream().pipeThrough(new DecompressionStream('gzip'));
    var code=await new Response(stream).text();
    var script=document.createElement('script');script.textContent=code;document.head.appendChild(script);
  }catch(err){
    var note=document.getElementById('plots-missing');note.hidden=false;
    note.textContent='The plots cannot be drawn: this browser cannot unpack them ('+err+'); '+
      'a current Chrome, Edge, Firefox or Safari can. The table below works without them.';
    return;
  }
  var config={displaylogo:false,responsive:true};
  Array.prototype.forEach.call(figures,function(f){var fig=JSON.parse(f.textContent);
    Plotly.newPlot(f.getAttribute('data-target'),fig.data,fig.layout,config);});
})();
"""

_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; style-src 'unsafe-inline'; img-src data: blob:; font-src data:; worker-src blob:">
<title>{title}</title><style>{style}</style></head><body>
<h1>{title}</h1>
{head}
<p id="plots-missing" class="note" hidden></p>
<h2>Error along execution order</h2>
{error_plot}
<h2>Every tensor</h2>
<div class="controls"><input id="filter" type="search" placeholder="filter: tensor, node or op name">
<select id="status"><option value="all">all</option><option value="failed">failed</option>
<option value="local">local</option><option value="inherited">inherited</option><option value="passed">passed</option></select>
<span id="shown"></span></div>
<div class="tablewrap">{table}</div>
{value_plots}
{neighbourhood}
<script type="application/gzip+base64" id="plotlyjs">{plotly}</script>
<script>{script}</script>
<script>{loader}</script>
</body></html>
"""
