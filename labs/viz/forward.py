"""Chapter 2 figures and tables: collectives per phase and iteration, per-rank losses, BatchNorm buffers."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..lessons.forward import VARIANT_LABELS
from . import html_table, rank_color

PHASES = (("forward", "순전파"), ("backward", "역전파"))


def _cell_text(counts: dict) -> str:
    return "<br>".join(f"{op} ×{k}" for op, k in sorted(counts.items())) or "0"


def _cell_hover(items: list[dict]) -> str:
    if not items:
        return "집합 통신 없음"
    return "<br>".join(f"{it['op']}: {it['dtype']} {it['numel']}개" for it in items)


def _variant_grid(counts: dict, items: dict) -> dict:
    """z (totals), cell text and hover text of one variant: rows = phases, columns = iterations."""
    z, text, hover = [], [], []
    for phase, label in PHASES:
        z.append([sum(c.values()) for c in counts[phase]])
        text.append([_cell_text(c) for c in counts[phase]])
        hover.append([f"{label} · 반복 {i}<br>{_cell_hover(it)}" for i, it in enumerate(items[phase])])
    return {"z": z, "text": text, "hovertext": hover}


def _iteration_labels(rebuilt: list[bool]) -> list[str]:
    return [f"반복 {i}<br>(버킷 재구성)" if flag else f"반복 {i}" for i, flag in enumerate(rebuilt)]


def collective_timeline_figure(counts: dict, items: dict) -> go.Figure:
    """Heatmap of collective counts (phase × iteration) with one button per model variant.

    ``counts`` and ``items`` are ``result.data["counts"]`` / ``result.data["items"]`` of the
    ``forward`` lab: what one rank's process group really ran (every rank ran the same).
    """
    names = list(counts)
    grids = {name: _variant_grid(counts[name], items[name]) for name in names}
    zmax = max(max(max(row) for row in g["z"]) for g in grids.values()) or 1
    first = names[0]
    fig = go.Figure(go.Heatmap(
        x=_iteration_labels(counts[first]["rebuilt"]), y=[label for _, label in PHASES],
        texttemplate="%{text}", textfont={"size": 14}, hoverinfo="text", xgap=3, ygap=3,
        zmin=0, zmax=zmax, colorscale=[[0, "#F1F3F4"], [1, "#4C78A8"]],
        colorbar={"title": {"text": "집합 통신 수"}, "len": 0.8}, **grids[first]))

    def title(name: str) -> str:
        return f"반복마다 실행된 집합 통신 — {VARIANT_LABELS[name]}"

    fig.update_layout(
        height=330, margin={"l": 10, "r": 10, "t": 95, "b": 10},
        title={"text": title(first), "font": {"size": 15}, "y": 0.97},
        yaxis={"autorange": "reversed", "fixedrange": True}, xaxis={"side": "bottom", "fixedrange": True},
        paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": 1.2, "xanchor": "left",
                      "yanchor": "top", "active": 0,
                      "buttons": [{"label": VARIANT_LABELS[name].split(" (")[0], "method": "update",
                                   "args": [{key: [value] for key, value in grids[name].items()}
                                            | {"x": [_iteration_labels(counts[name]["rebuilt"])]},
                                            {"title.text": title(name)}]}
                                  for name in names]}],
    )
    return fig


def loss_figure(losses: list[list[float]], mean_losses: list[float]) -> go.Figure:
    """Bars of each rank's loss L_i per iteration, and the line of their mean."""
    iterations = [f"반복 {i}" for i in range(len(mean_losses))]
    fig = go.Figure([go.Bar(x=iterations, y=row, name=f"랭크 {r}의 L_{r}", marker_color=rank_color(r),
                            hovertemplate=f"랭크 {r} · %{{x}}<br>L_{r} = %{{y:.4f}}<extra></extra>")
                     for r, row in enumerate(losses)])
    fig.add_trace(go.Scatter(x=iterations, y=mean_losses, mode="lines+markers", name="평균 (1/N) Σ L_i",
                             line={"color": "#202124", "dash": "dot"}, marker={"symbol": "diamond", "size": 10},
                             hovertemplate="%{x}<br>평균 = %{y:.4f}<extra></extra>"))
    fig.update_layout(
        barmode="group", height=360, margin={"l": 10, "r": 10, "t": 50, "b": 10},
        title={"text": "랭크마다 자기 미니배치로 계산한 손실 L_i (실제 실행 기록)", "font": {"size": 15}},
        yaxis={"title": {"text": "손실 (MSE)"}, "rangemode": "tozero"},
        legend={"orientation": "h", "y": -0.12}, paper_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def bn_buffer_figure(ranks: list[dict], channel: int = 0) -> go.Figure:
    """running_mean[channel] as BatchNorm sees it at each forward, per rank: sync on vs off."""
    panels = (("bn_sync", "버퍼 동기화 켬 (기본)"), ("bn_nosync", "forward_sync_buffers=False"))
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, subplot_titles=[t for _, t in panels],
                        horizontal_spacing=0.06)
    for col, (name, _) in enumerate(panels, start=1):
        for r in ranks:
            values = [row[channel] for row in r["variants"][name]["bn_entry_mean"]]
            rank = r["rank"]
            fig.add_trace(go.Scatter(
                x=list(range(len(values))), y=values, mode="lines+markers", name=f"랭크 {rank}",
                legendgroup=f"r{rank}", showlegend=(col == 1), line={"color": rank_color(rank), "width": 2},
                marker={"size": 14 - 3 * min(rank, 3), "color": rank_color(rank)},
                hovertemplate=f"랭크 {rank} · 반복 %{{x}}<br>running_mean[{channel}] = %{{y:.4f}}<extra></extra>"),
                row=1, col=col)
        fig.update_xaxes(title_text="반복(순전파 번호)", dtick=1, row=1, col=col)
    fig.update_yaxes(title_text=f"BatchNorm 입구의 running_mean[{channel}]", row=1, col=1)
    fig.update_layout(height=380, margin={"l": 10, "r": 10, "t": 60, "b": 10},
                      legend={"orientation": "h", "y": -0.2}, paper_bgcolor="rgba(0,0,0,0)")
    return fig


# --- 2장: 표 ----------------------------------------------------------------------------------

def describe_items(items: list[dict]) -> str:
    """``broadcast(int32 5개), ...`` for the collectives one phase ran, or 없음."""
    return ", ".join(f"{it['op']}({it['dtype']} {it['numel']}개)" for it in items) or "없음"


def loss_table(result):
    """Each rank's loss per iteration, their mean and the loss of the whole global batch."""
    data, n = result.data, result.world_size
    return html_table(
        ["반복"] + [f"랭크 {r} 손실 L_{r}" for r in range(n)] + ["평균 (1/N) Σ L_i", "전역 배치 B개의 손실 L"],
        [[s] + [f"{row[s]:.6f}" for row in data["losses"]] + [f"{data['mean_losses'][s]:.6f}", f"{g:.6f}"]
         for s, g in enumerate(data["global_losses"])],
        caption=(f"랭크별 손실 L_i (일반 MLP, N={n}, 랭크마다 B/N={result.params['per_rank_batch']}개 샘플, "
                 "실제 실행 기록)"))


def iteration_table(result, variant: str = "plain"):
    """Per iteration: rebuilt or not, and what the forward's and the backward's collectives carried."""
    counts, items = result.data["counts"][variant], result.data["items"][variant]
    return html_table(
        ["반복", "버킷 재구성", "순전파의 집합 통신", "역전파의 집합 통신"],
        [[i, "예" if rebuilt else "아니요", describe_items(items["forward"][i]), describe_items(items["backward"][i])]
         for i, rebuilt in enumerate(counts["rebuilt"])],
        caption=f"{VARIANT_LABELS[variant]}: 반복별 집합 통신과 나른 데이터 (랭크 0, 실제 실행 기록)")


def buffers_table(result):
    """The BatchNorm model's buffers: name, dtype, element count."""
    return html_table(["버퍼", "dtype", "원소 수"],
                      [[b["name"], b["dtype"], b["numel"]] for b in result.data["buffers"]],
                      caption="BatchNorm이 있는 MLP의 버퍼 (실제 모델에서 읽은 값)")


def timeline_alt(result) -> str:
    """The timeline figure's alt text, with the plain model's counts of this run."""
    plain = result.data["counts"]["plain"]
    rebuilt = [i for i, flag in enumerate(plain["rebuilt"]) if flag]
    forward = "; ".join(f"반복 {i}: {_cell_text(plain['forward'][i]).replace('<br>', ', ')}" for i in rebuilt)
    backward = sorted({_cell_text(c).replace("<br>", ", ") for c in plain["backward"]})
    return (f"모델 {len(result.data['counts'])}가지에 대해 순전파와 역전파의 반복별 집합 통신 수를 칸으로 나타낸 그림. "
            f"일반 MLP의 순전파는 버킷을 재구성한 반복({forward})에만 통신이 있고, 역전파에는 반복마다 "
            f"집합 통신 {' 또는 '.join(backward)}이(가) 있다.")
