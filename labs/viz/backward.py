"""Chapter 3 figure and tables: per-rank local gradients turning into one averaged gradient (recorded)."""

from __future__ import annotations

import plotly.graph_objects as go
import torch

from . import ANIMATE as _ANIMATE
from . import html_table, rank_color

MEAN_COLOR = "#202124"


def component_labels(param_shapes: list) -> list[str]:
    """A name for every entry of the flattened gradient, e.g. ``2.weight[1,3]``."""
    labels = []
    for name, shape in param_shapes:
        for flat in range(int(torch.Size(shape).numel())):
            index, rest = [], flat
            for size in reversed(shape):
                index.append(rest % size)
                rest //= size
            labels.append(f"{name}[{','.join(str(i) for i in reversed(index))}]")
    return labels


def most_varied(local: list[list[float]], n_show: int) -> list[int]:
    """Indices of the ``n_show`` components that differ most across ranks (in index order)."""
    spread = torch.tensor(local).std(dim=0, unbiased=False) if len(local) > 1 else torch.tensor(local[0]).abs()
    return sorted(spread.argsort(descending=True)[:n_show].tolist())


def gradient_allreduce_figure(ranks: list[dict], mean: list[float], n_show: int = 8) -> go.Figure:
    """Animated bars: each rank's local gradient → the mean → the gradient after DDP's backward.

    ``ranks`` are the ``backward`` lab's rank records, ``mean`` is ``result.data["mean"]``.
    """
    local = [r["local_grad"] for r in ranks]
    cols = most_varied(local, n_show)
    labels = component_labels(ranks[0]["param_shapes"])
    x = [labels[c] for c in cols]

    def bars(key: str) -> list[dict]:
        return [{"y": [r[key][c] for c in cols]} for r in ranks]

    mean_y = [mean[c] for c in cols]
    traces = [go.Bar(x=x, y=[r["local_grad"][c] for c in cols], name=f"랭크 {r['rank']}",
                     marker_color=rank_color(r["rank"]),
                     hovertemplate=f"랭크 {r['rank']} · %{{x}}<br>%{{y:+.5f}}<extra></extra>") for r in ranks]
    traces.append(go.Scatter(x=x, y=mean_y, mode="markers", name="평균 (1/N) Σ g_i", opacity=0.0,
                             marker={"symbol": "diamond-wide", "size": 16, "color": MEAN_COLOR,
                                     "line": {"color": "white", "width": 1}},
                             hovertemplate="평균 · %{x}<br>%{y:+.5f}<extra></extra>"))
    states = [
        ("로컬 g_i", "local_grad", 0.0, "① 로컬 그래디언트 g_i: 랭크마다 자기 미니배치로 계산해 서로 다르다"),
        ("평균 계산", "local_grad", 1.0, "② All-Reduce가 만들 값: 평균 (1/N) Σ g_i (검은 마름모)"),
        ("All-Reduce 후", "ddp_grad", 1.0, "③ loss.backward()가 돌아온 직후: 모든 랭크의 그래디언트가 평균과 같다"),
    ]
    fig = go.Figure(traces)
    fig.frames = [go.Frame(name=name, data=[go.Bar(**b) for b in bars(key)] + [go.Scatter(opacity=opacity)],
                           traces=list(range(len(traces))), layout={"title": {"text": title}})
                  for name, key, opacity, title in states]
    names = [s[0] for s in states]
    fig.update_layout(
        barmode="group", height=480, margin={"l": 10, "r": 30, "t": 95, "b": 10},
        title={"text": states[0][3], "font": {"size": 15}, "y": 0.97, "yanchor": "top"},
        xaxis={"title": {"text": "그래디언트 성분 (랭크 간 차이가 큰 순으로 고른 것)"}, "fixedrange": True},
        yaxis={"title": {"text": "그래디언트 값"}, "zeroline": True, "zerolinecolor": "#9AA0A6"},
        legend={"orientation": "h", "y": 1.01, "yanchor": "bottom", "x": 0, "xanchor": "left"},
        paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": -0.22, "xanchor": "left",
                      "yanchor": "top", "buttons": [
                          {"label": "▶ 재생", "method": "animate", "args": [names, {**_ANIMATE, "fromcurrent": False}]},
                          {"label": "멈춤", "method": "animate",
                           "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]}]}],
        sliders=[{"active": 0, "x": 0.2, "len": 0.74, "y": -0.2, "yanchor": "top",
                  "currentvalue": {"prefix": "로컬 그래디언트 → All-Reduce 후 · 지금: ", "font": {"size": 13}},
                  "steps": [{"label": name, "method": "animate", "args": [[name], _ANIMATE]} for name in names]}],
    )
    return fig


# --- 3장: 표 ----------------------------------------------------------------------------------

def _describe(counts: dict) -> str:
    return ", ".join(f"{op} {k}번" for op, k in counts.items()) or "없음"


def gradient_table(result, n_show: int = 2):
    """Per rank: loss, gradient norms, and the components that differ most, local → after backward."""
    cols = most_varied([r["local_grad"] for r in result.ranks], n_show)
    labels = component_labels(result.ranks[0]["param_shapes"])
    data = result.data
    return html_table(
        ["랭크", "손실 L_i", "‖g_i‖ (로컬)", "‖g‖ (backward 직후)"] + [f"{labels[c]}: 로컬 → 직후" for c in cols],
        [[r["rank"], f"{r['loss']:.4f}", f"{data['local_norms'][i]:.4f}", f"{data['ddp_norms'][i]:.4f}"]
         + [f"{r['local_grad'][c]:+.4f} → {r['ddp_grad'][c]:+.4f}" for c in cols]
         for i, r in enumerate(result.ranks)],
        caption=f"랭크별 로컬 그래디언트와 DDP 그래디언트 (N={result.world_size}, 실제 실행 기록)")


def hook_table(result):
    """The first weight's gradient as the hook saw it during backward, locally, after backward, and the mean."""
    label = component_labels(result.ranks[0]["param_shapes"])[0]
    return html_table(
        ["랭크", f"{label}: 훅이 본 값", "로컬 g_i (no_sync)", "backward 직후", "평균 (1/N) Σ g_i"],
        [[r["rank"], f"{r['hook_grad'][0]:+.7f}", f"{r['local_grad'][0]:+.7f}", f"{r['ddp_grad'][0]:+.7f}",
          f"{result.data['mean'][0]:+.7f}"] for r in result.ranks],
        caption="역전파 도중 훅이 본 그래디언트와 역전파가 끝난 뒤의 그래디언트 (첫 층 가중치의 한 성분)")


def comm_table(result):
    """The collectives counted in each phase (rank 0), with what the backward's all_reduce carried."""
    phases = [("no_sync_backward", "no_sync() 안의 순전파 + loss.backward()"),
              ("backward", "loss.backward() (DDP)"), ("step", "optimizer.step()")]
    carried = ", ".join(f"{it['op']}({it['dtype']} {it['numel']}개)" for it in result.data["backward_items"])
    return html_table(
        ["구간", "실행된 집합 통신", "나른 데이터"],
        [[label, _describe(result.data["comm"][key]), carried if key == "backward" else "—"]
         for key, label in phases],
        caption="구간별로 센 집합 통신 (랭크 0의 기록, 실제 실행)")
