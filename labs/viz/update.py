"""Chapter 5 figures: parameter trajectories per rank, with and without gradient synchronization."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import rank_color

# tiny_mlp의 평평한 파라미터 벡터에서 고른 세 값: 첫 층 가중치, 첫 층 편향, 둘째 층 가중치
TRACKED = ((0, "첫 층 가중치 w[0,0]"), (32, "첫 층 편향 b[0]"), (40, "둘째 층 가중치 w[0,0]"))
MODES = (("sgd", "DDP(동기화)", "DDP: 모든 랭크가 같은 평균 그래디언트로 업데이트해 선이 완전히 겹친다"),
         ("no_sync", "동기화 없음", "no_sync(): 랭크마다 자기 데이터의 그래디언트로만 업데이트해 선이 갈라진다"))


def trajectory_figure(ranks: list[dict], tracked=TRACKED) -> go.Figure:
    """One line per rank for a few parameters over the steps (recorded by the ``update`` lab).

    Buttons switch between the DDP run and the ``no_sync()`` run. Under DDP the lines lie
    exactly on top of each other, so lower ranks are drawn wider to stay visible underneath.
    """
    n = len(ranks)
    fig = make_subplots(rows=len(tracked), cols=1, shared_xaxes=True, vertical_spacing=0.07,
                        subplot_titles=[label for _, label in tracked])
    visibility = []
    for m, (run, mode_label, _) in enumerate(MODES):
        for row, (index, label) in enumerate(tracked, start=1):
            for r in ranks:
                values = [params[index] for params in r[run]["params"]]
                fig.add_trace(go.Scatter(
                    x=list(range(len(values))), y=values, mode="lines+markers", visible=(m == 0),
                    name=f"랭크 {r['rank']}", legendgroup=f"rank{r['rank']}", showlegend=(row == 1),
                    line={"color": rank_color(r["rank"]), "width": 2 + 2.5 * (n - 1 - r["rank"])},
                    marker={"size": 5 + 2 * (n - 1 - r["rank"])},
                    hovertemplate=f"{mode_label} · 랭크 {r['rank']} · {label}<br>스텝 %{{x}}: %{{y:.6f}}<extra></extra>"),
                    row=row, col=1)
                visibility.append(m)
    buttons = [{"label": mode_label, "method": "update",
                "args": [{"visible": [v == m for v in visibility]}, {"title.text": title}]}
               for m, (_, mode_label, title) in enumerate(MODES)]
    fig.update_xaxes(title_text="스텝 (0 = 학습 전)", row=len(tracked), col=1, dtick=1)
    fig.update_layout(
        height=190 * len(tracked) + 170, margin={"l": 10, "r": 10, "t": 100, "b": 10},
        title={"text": MODES[0][2], "font": {"size": 14}, "y": 0.985},
        legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": -0.08, "yanchor": "top", "font": {"size": 12}},
        paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "active": 0, "x": 0.0, "xanchor": "left",
                      "y": 1.0, "yanchor": "bottom", "pad": {"b": 22}, "buttons": buttons}],
    )
    fig.update_annotations(font_size=12)
    return fig
