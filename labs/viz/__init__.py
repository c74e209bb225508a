"""Plotly figures built from lab results, and the one way chapters display them.

Every figure works in three places: the static site (HTML + plotly.js from ``_static/``, with
frames and sliders that need no kernel), live Jupyter (the plotly JSON mime type), and nbval
(fixed div ids, so outputs are stable). Chapter figures live in one module per chapter.
"""

from __future__ import annotations

import html
import json

import plotly.graph_objects as go

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


def show(fig: go.Figure, div_id: str, *, alt: str) -> None:
    """Display ``fig`` for the static site and for live Jupyter.

    ``alt`` is a Korean one-sentence description of the figure for screen readers.
    """
    from IPython.display import display

    missing = trace_types(fig) - BUNDLE_TRACES
    if missing:
        raise ValueError(f"그림 {div_id}의 trace 종류 {sorted(missing)}는 사이트의 plotly.js 묶음에 없습니다: "
                         f"{sorted(BUNDLE_TRACES)} 중에서 고르세요.")

    body = fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, auto_play=False,
                       config={"responsive": True, "displaylogo": False})
    figure = (f'<figure class="ddp-figure" role="group" aria-label="{html.escape(alt)}">{body}'
              f'<figcaption class="ddp-figure-alt">{html.escape(alt)}</figcaption></figure>')
    display({"text/html": figure, "application/vnd.plotly.v1+json": json.loads(fig.to_json())}, raw=True)


def html_table(headers: list[str], rows: list[list], caption: str):
    """A small accessible HTML table (no pandas needed)."""
    from IPython.display import HTML

    head = "".join(f'<th scope="col">{html.escape(str(h))}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return HTML(f'<table class="lab-table"><caption>{html.escape(caption)}</caption>'
                f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
