"""Chapter 6 figures: DDP vs one-process learning curves, sample order per epoch, resume after a failure."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..result import LabResult
from . import WAITING_COLOR, rank_color

_REFERENCE_COLOR = "#222222"
# 로그 눈금의 작은 숫자(2, 3, …, 9)가 빽빽하지 않도록 눈금을 정해 둔다
_LOSS_TICKS = {"tickvals": [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5],
               "ticktext": ["0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1", "2", "5"]}


def _curve(history: list[dict], key: str) -> tuple[list[int], list[float]]:
    epochs = [h["epoch"] for h in history]
    if key == "loss":
        return epochs, [h["loss"] for h in history]
    return epochs, [100.0 * h["correct"] / h["total"] for h in history]


def learning_curves_figure(result: LabResult) -> go.Figure:
    """Per-epoch global loss and test accuracy of the N-rank DDP run and the one-process reference.

    Buttons show both, only DDP or only the reference; the curves lie on top of each other.
    """
    n, batch = result.world_size, result.data["global_batch"]
    runs = [(f"DDP: 랭크 {n}개 × B/N={result.data['per_rank_batch']}", result.data["summary"]["history"],
             {"color": rank_color(0), "width": 9}, {"size": 14, "opacity": 0.45}),
            (f"한 프로세스: 전역 배치 B={batch}", result.data["reference_history"],
             {"color": _REFERENCE_COLOR, "width": 2, "dash": "dash"}, {"size": 7, "symbol": "x"})]
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.12,
                        subplot_titles=("전역 평균 손실 (로그 눈금)", "테스트 정확도 (%)"))
    for col, key in ((1, "loss"), (2, "accuracy")):
        for name, history, line, marker in runs:
            x, y = _curve(history, key)
            unit = "" if key == "loss" else "%"
            fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines+markers", line=line, marker=marker,
                                     legendgroup=name, showlegend=col == 1,
                                     hovertemplate=f"{name}<br>에폭 %{{x}}: %{{y:.6f}}{unit}<extra></extra>"),
                          row=1, col=col)
    fig.update_yaxes(type="log", **_LOSS_TICKS, row=1, col=1)
    fig.update_annotations(font_size=13)
    fig.update_xaxes(title_text="에폭", dtick=1)
    # 트레이스 순서: [손실 DDP, 손실 기준, 정확도 DDP, 정확도 기준]
    show = {"둘 다": [True] * 4, "DDP만": [True, False, True, False], "한 프로세스만": [False, True, False, True]}
    fig.update_layout(
        height=470, margin={"l": 10, "r": 10, "t": 125, "b": 10},
        title={"text": f"DDP(N={n})와 한 프로세스 학습: 두 곡선이 겹친다", "font": {"size": 15}, "y": 0.97},
        legend={"orientation": "h", "x": 0.0, "y": -0.18, "xanchor": "left"},
        paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": 1.12, "xanchor": "left",
                      "yanchor": "bottom", "active": 0, "pad": {"t": 0, "b": 0},
                      "buttons": [{"label": label, "method": "restyle", "args": [{"visible": visible}]}
                                  for label, visible in show.items()]}],
    )
    return fig


def epoch_order_figure(result: LabResult, k: int = 10) -> go.Figure:
    """Rank 0's first ``k`` sample indices in every epoch, with ``set_epoch`` (the training run) and without."""
    rank0 = result.ranks[0]
    epochs = sorted(rank0["orders"])
    with_set = [rank0["orders"][e][:k] for e in epochs]
    without = [rank0["orders_without_set_epoch"][e - 1][:k] for e in epochs]
    fig = make_subplots(rows=2, cols=1, vertical_spacing=0.16,
                        subplot_titles=("set_epoch(epoch) 호출: 에폭마다 다른 순서",
                                        "호출하지 않음: 모든 에폭이 같은 순서"))
    high = max(max(row) for rows in (with_set, without) for row in rows)
    for row, z in ((1, with_set), (2, without)):
        fig.add_trace(go.Heatmap(z=z, x=[str(j + 1) for j in range(k)], y=[f"에폭 {e}" for e in epochs],
                                 text=z, texttemplate="%{text}", textfont={"size": 10}, zmin=0, zmax=high,
                                 colorscale="Viridis", showscale=row == 1, xgap=2, ygap=2,
                                 colorbar={"title": {"text": "샘플<br>번호"}, "len": 0.9},
                                 hovertemplate="%{y}, %{x}번째 샘플: %{z}<extra></extra>"), row=row, col=1)
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="받은 순서 (몇 번째 샘플)", title_font={"size": 12}, row=2, col=1)
    fig.update_annotations(font_size=13)
    fig.update_layout(height=230 + 2 * 30 * len(epochs), margin={"l": 10, "r": 10, "t": 75, "b": 10},
                      title={"text": f"랭크 0이 에폭마다 처음 받은 샘플 {k}개", "font": {"size": 15}},
                      paper_bgcolor="rgba(0,0,0,0)")
    return fig


def resume_figure(resumed: dict, uninterrupted: dict, fail_at_epoch: int) -> go.Figure:
    """Per-epoch loss of an uninterrupted run and of a run that died midway through ``fail_at_epoch`` and resumed."""
    done = resumed["resumed_from"]
    x, y = _curve(uninterrupted["history"], "loss")
    fig = go.Figure(go.Scatter(x=x, y=y, name="끊기지 않은 실행", mode="lines",
                               line={"color": WAITING_COLOR, "width": 8},
                               hovertemplate="끊기지 않은 실행<br>에폭 %{x}: 손실 %{y:.8f}<extra></extra>"))
    parts = [("첫 시도 (체크포인트에 저장된 기록)", resumed["history"][:done], "circle", rank_color(0)),
             ("재시작 후 (체크포인트에서 이어서)", resumed["history"][done:], "diamond", rank_color(1))]
    for name, history, symbol, color in parts:
        x, y = _curve(history, "loss")
        fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="markers", marker={"size": 13, "symbol": symbol,
                                                                             "color": color},
                                 hovertemplate=f"{name}<br>에폭 %{{x}}: 손실 %{{y:.8f}}<extra></extra>"))
    fig.add_vline(x=fail_at_epoch - 0.5, line={"color": "#E45756", "dash": "dot", "width": 2})
    fig.add_annotation(x=fail_at_epoch - 0.5, y=1.0, yref="paper", showarrow=False, xanchor="left",
                       text=f" 에폭 {fail_at_epoch} 중간: 랭크 하나가 죽음", font={"color": "#E45756"})
    fig.update_layout(height=400, margin={"l": 20, "r": 10, "t": 50, "b": 10},
                      title={"text": "체크포인트에서 재개해도 같은 곡선", "font": {"size": 15}},
                      xaxis={"title": {"text": "에폭"}, "dtick": 1},
                      yaxis={"title": {"text": "전역 평균 손실 (로그 눈금)"}, "type": "log", "automargin": True,
                             **_LOSS_TICKS},
                      legend={"orientation": "h", "x": 0.0, "y": -0.2, "xanchor": "left"},
                      paper_bgcolor="rgba(0,0,0,0)")
    return fig
