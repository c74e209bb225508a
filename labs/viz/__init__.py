"""Plotly figures built from lab results, and the one way chapters display them.

Every figure works in three places: the static site (HTML + plotly.js from ``_static/``, with
frames and sliders that need no kernel), live Jupyter (the plotly JSON mime type), and nbval
(fixed div ids, so outputs are stable). Chapter figures live in one module per chapter.
"""

from __future__ import annotations

import html
import json
import re

import plotly.graph_objects as go
import plotly.io as pio

RANK_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D")
WAITING_COLOR = "#9AA0A6"
ANIMATE = {"mode": "immediate", "frame": {"duration": 700, "redraw": True},
           "transition": {"duration": 600, "easing": "cubic-in-out"}}


def rank_color(rank: int) -> str:
    return RANK_COLORS[rank % len(RANK_COLORS)]


# The trace types of the plotly.js bundle the site serves (book/_ext/vendor/plotly-cartesian):
# a figure with any other type would stay blank on the site, so show() refuses it.
BUNDLE_TRACES = frozenset({"bar", "box", "contour", "heatmap", "histogram", "histogram2d", "histogram2dcontour",
                           "image", "pie", "scatter", "scatterternary", "violin"})


def trace_types(fig: go.Figure) -> set[str]:
    """Every trace type ``fig`` draws, its animation frames included."""
    return {trace.type for trace in fig.data} | {trace.type for frame in fig.frames for trace in frame.data}


# Tags a plotly title may use that the page keeps when the title moves out of the plot.
_TITLE_TAGS = re.compile(r"&lt;(/?(?:b|i|sup|sub)|br ?/?)&gt;")
# Updates the page title of a figure when an animation frame or a slider step shows another frame.
_FRAME_TITLES_JS = ("(function(){{var gd=document.getElementById({id}),el=document.getElementById({title_id}),"
                    "titles={titles};function hook(){{if(!gd||!gd.on){{return setTimeout(hook,50);}}"
                    "gd.on('plotly_animatingframe',function(e){{if(e&&titles.hasOwnProperty(e.name))"
                    "{{el.innerHTML=titles[e.name];}}}});}}hook();}})();")


def _title_html(text: str | None) -> str:
    return _TITLE_TAGS.sub(r"<\1>", html.escape(text or ""))


def _page_figure(fig: go.Figure) -> tuple[go.Figure, str, dict[str, str]]:
    """A copy of ``fig`` for the page: its title (and each frame's) moves out of the plot.

    A title drawn inside plotly's SVG never wraps: on a phone it is cut at the edge, and it collides
    with a legend above the plot. Above the plot in the page it wraps like any heading.
    """
    page = go.Figure(fig)
    title = _title_html(page.layout.title.text)
    frame_titles = {frame.name: _title_html(frame.layout.title.text)
                    for frame in page.frames if frame.name is not None and frame.layout.title.text}
    page.update_layout(title=None)
    if page.layout.margin.t is None or page.layout.margin.t > 40:
        page.update_layout(margin_t=40)
    for frame in page.frames:
        if frame.layout.title.text:
            frame.layout.title = None
    return page, title, frame_titles


# plotly writes every non-ASCII character of the figure JSON as \uXXXX; Hangul syllables are safe in the
# page's UTF-8 script as they are (none of them is a quote, a backslash or part of "</script>").
_HANGUL_ESCAPE = re.compile(r"\\u([aAbBcCdD][0-9a-fA-F]{3})"
                            r"(?<=\\u[aA][c-fC-F][0-9a-fA-F]{2}|\\u[b-cB-C][0-9a-fA-F]{3}|\\u[dD][0-7][0-9a-fA-F]{2})")
# plotly's HTML template indents its script with runs of spaces (about 250 bytes a figure); a quoted string (the
# figure's JSON, an HTML attribute) is kept as it is, a run of spaces outside one becomes one space.
_TEMPLATE_SPACES = re.compile(r'"(?:[^"\\]|\\.)*"|( {2,})')
SIGNIFICANT_DIGITS = 8  # 그림 안의 수: 화면·마우스 설명에서 구별되는 것보다 많은 자리


def _rounded(value):
    if isinstance(value, float):
        return float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return value


# Template layout parts the page never needs: subplot kinds outside the site's cartesian bundle, always; and the
# colour scales, unless a trace maps numbers to colours (a heatmap's z, a numeric marker colour, a colour axis).
_OTHER_SUBPLOTS = ("geo", "mapbox", "polar", "scene", "ternary")
_COLOUR_SCALES = ("colorscale", "coloraxis")


def _maps_numbers_to_colours(trace: dict) -> bool:
    colour = trace.get("marker", {}).get("color")
    numeric = isinstance(colour, list) and any(isinstance(c, (int, float)) for c in colour)
    return "z" in trace or "coloraxis" in trace or numeric or "colorscale" in trace.get("marker", {})


def _compact(fig: go.Figure) -> dict:
    """The figure as plotly JSON for the page, lighter: numbers to eight significant digits, and the
    template's per-trace defaults only for the trace types the figure draws (plotly's default template
    carries them for every type, about 4 KB a figure), without the layout parts it cannot use (1.6 KB)."""
    spec = json.loads(fig.to_json())
    template = spec.get("layout", {}).get("template", {})
    if "data" in template:
        used = trace_types(fig)
        template["data"] = {kind: v for kind, v in template["data"].items() if kind in used}
    unused: tuple[str, ...] = _OTHER_SUBPLOTS
    if not any(_maps_numbers_to_colours(trace) for trace in spec.get("data", [])):
        unused += _COLOUR_SCALES
    for key in unused:
        template.get("layout", {}).pop(key, None)
    return _rounded(spec)


def show(fig: go.Figure, div_id: str, *, alt: str) -> None:
    """Display ``fig`` for the static site and for live Jupyter.

    ``alt`` is a Korean one-sentence description of the figure for screen readers. On the page the
    title is an HTML line above the plot (it follows the frames of an animation) and plotly's
    toolbar is off, so nothing is drawn over the title or the legend at any width.
    """
    from IPython.display import display

    missing = trace_types(fig) - BUNDLE_TRACES
    if missing:
        raise ValueError(f"그림 {div_id}의 trace 종류 {sorted(missing)}는 사이트의 plotly.js 묶음에 없습니다: "
                         f"{sorted(BUNDLE_TRACES)} 중에서 고르세요.")
    page, title, frame_titles = _page_figure(fig)
    body = pio.to_html(_compact(page), validate=False, full_html=False, include_plotlyjs=False, div_id=div_id,
                       auto_play=False, config={"responsive": True, "displaylogo": False, "displayModeBar": False})
    body = _HANGUL_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), body)  # \uXXXX 여섯 바이트 대신 UTF-8 세 바이트
    body = _TEMPLATE_SPACES.sub(lambda m: " " if m.group(1) else m.group(0), body)
    title_id = f"{div_id}-title"
    script = (f"<script>{_FRAME_TITLES_JS.format(id=json.dumps(div_id), title_id=json.dumps(title_id), titles=json.dumps(frame_titles))}"
              "</script>") if frame_titles else ""
    heading = f'<div class="ddp-figure-title" id="{title_id}">{title}</div>' if title or frame_titles else ""
    # 화면 읽기 프로그램의 이름은 figcaption에서(aria-labelledby): 같은 문장을 속성에 또 적지 않는다
    figure = (f'<figure class="ddp-figure" role="group" aria-labelledby="{div_id}-alt">{heading}{body}'
              f'<figcaption class="ddp-figure-alt" id="{div_id}-alt">{html.escape(alt)}</figcaption>{script}</figure>')
    display({"text/html": figure, "application/vnd.plotly.v1+json": json.loads(fig.to_json())}, raw=True)


def html_table(headers: list[str], rows: list[list], caption: str, wide_only: tuple[int, ...] = ()):
    """A small accessible HTML table (no pandas needed).

    ``wide_only``: indices of columns a phone does not show (``.wide-only``, hidden below 600 px by
    _static/course.css), so the columns that carry the point fit the screen; the caption says so there."""
    from IPython.display import HTML

    def cell(tag: str, i: int, value) -> str:
        extra = ' class="wide-only"' if i in wide_only else ""
        scope = ' scope="col"' if tag == "th" else ""
        return f"<{tag}{scope}{extra}>{html.escape(str(value))}</{tag}>"

    head = "".join(cell("th", i, h) for i, h in enumerate(headers))
    body = "".join("<tr>" + "".join(cell("td", i, c) for i, c in enumerate(row)) + "</tr>" for row in rows)
    note = ('<span class="narrow-note"> (좁은 화면이라 ' + ", ".join(html.escape(headers[i]) for i in wide_only)
            + " 열은 숨겼습니다)</span>") if wide_only else ""
    return HTML(f'<table class="lab-table"><caption>{html.escape(caption)}{note}</caption>'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
