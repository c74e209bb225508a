"""Chapter 1 figures and tables: a dataset split over ranks by DistributedSampler, and replicas becoming identical."""

from __future__ import annotations

import plotly.graph_objects as go

from ..lessons.replicas import sampler_shards
from . import ANIMATE as _ANIMATE
from . import WAITING_COLOR, html_table, rank_color

# --- 1장: 데이터셋이 랭크로 나뉘는 모습 -------------------------------------------------------


def _split_points(shards: list[list[int]], dataset_size: int, n_points: int) -> dict:
    """Marker positions for one split: a sample's first copy keeps its marker; padding copies
    (DistributedSampler repeats leading samples of the shuffled dataset so every rank gets
    ceil(D/N)) use spare markers."""
    batch = dataset_size
    x, y = [0.0] * n_points, [0.0] * n_points
    colors, symbols, opacity, text, hover = ([WAITING_COLOR] * n_points, ["square"] * n_points,
                                              [0.0] * n_points, [""] * n_points, [""] * n_points)
    text_colors = ["white"] * n_points
    for k in range(batch):  # 기본: 데이터셋 줄(y=0)에 대기
        x[k], opacity[k], text[k], hover[k] = float(k), 1.0, str(k), f"샘플 {k}: 아직 배정 전"
    for k in range(batch, n_points):
        x[k] = float(k - batch)
    seen, spare = set(), batch
    for rank, shard in enumerate(shards):
        for slot, sample in enumerate(shard):
            if sample in seen:
                i, symbols[spare], tag = spare, "square-open", " (패딩: 중복 복사본)"
                text_colors[i] = rank_color(rank)
                spare += 1
            else:
                i, tag = sample, ""
                seen.add(sample)
            x[i], y[i], colors[i], opacity[i], text[i] = float(slot), float(rank + 1), rank_color(rank), 1.0, str(sample)
            hover[i] = f"샘플 {sample} → 랭크 {rank}{tag}"
    return {"x": x, "y": y, "text": text, "hovertext": hover, "textfont": {"color": text_colors, "size": 11},
            "marker": {"color": colors, "symbol": symbols, "opacity": opacity, "size": 21,
                       "line": {"width": 2, "color": colors}}}


def _count_labels(shards: list[list[int]], max_ranks: int) -> dict:
    x: list[float] = []
    y: list[float] = []
    text: list[str] = []
    seen: set[int] = set()
    for rank in range(max_ranks):
        shard = shards[rank] if rank < len(shards) else []
        x.append(len(shard) - 0.4)
        y.append(float(rank + 1))
        dup = len(shard) - len(set(shard) - seen)  # 앞 랭크들이 이미 받은 샘플
        seen.update(shard)
        text.append(f"{len(shard)}개" + (f" (중복 {dup})" if dup else "") if shard else "")
    return {"x": x, "y": y, "text": text}


def _lane_labels(n: int | None, max_ranks: int) -> dict:
    labels = ["데이터셋 D"] + [f"랭크 {r}" if n and r < n else "" for r in range(max_ranks)]
    return {"x": [-0.8] * (max_ranks + 1), "y": [float(i) for i in range(max_ranks + 1)], "text": labels}


def batch_split_figure(dataset_sizes=(8, 10, 16), world_sizes=(1, 2, 3, 4, 8), seed: int = 0) -> go.Figure:
    """Animated split of a dataset of D samples over N ranks, by ``DistributedSampler``.

    Slider: N. Buttons: D. Play: N = 1, 2, … in turn. Every frame's assignment is computed by
    the same ``DistributedSampler`` class the ranks run (``sampler_shards``); when N does not
    divide D, the padding copies are drawn as open squares.
    """
    max_n = max(world_sizes)
    n_points = max(dataset_sizes) + max_n * 2
    traces = []
    for i, d in enumerate(dataset_sizes):
        traces.append(go.Scatter(mode="markers+text", name=f"D={d} 샘플", hoverinfo="text",
                                 visible=(i == len(dataset_sizes) - 1),
                                 showlegend=False, **_split_points([], d, n_points)))
    for i, d in enumerate(dataset_sizes):
        traces.append(go.Scatter(mode="text", name=f"D={d} 개수", hoverinfo="skip", showlegend=False,
                                 textposition="middle right", visible=(i == len(dataset_sizes) - 1),
                                 **_count_labels([], max_n)))
    traces.append(go.Scatter(mode="text", name="레인", hoverinfo="skip", showlegend=False,
                             textposition="middle left", **_lane_labels(None, max_n)))
    fig = go.Figure(traces)

    def frame(name: str, n: int | None) -> go.Frame:
        shards = [sampler_shards(d, n, seed) if n else [] for d in dataset_sizes]
        data = [_split_points(s, d, n_points) for s, d in zip(shards, dataset_sizes)]
        data += [_count_labels(s, max_n) for s in shards]
        data.append(_lane_labels(n, max_n))
        lanes = max(n or 0, 4)
        return go.Frame(name=name, data=[go.Scatter(**d) for d in data], traces=list(range(len(data))),
                        layout={"yaxis": {"range": [lanes + 0.7, -0.7]}})

    names = ["나누기 전"] + [f"N={n}" for n in world_sizes]
    fig.frames = [frame(names[0], None)] + [frame(f"N={n}", n) for n in world_sizes]
    visible = [[j == i for j in range(len(dataset_sizes))] * 2 + [True] for i in range(len(dataset_sizes))]
    fig.update_layout(
        height=400, margin={"l": 6, "r": 6, "t": 16, "b": 10},
        xaxis={"visible": False, "range": [-4.0, max(dataset_sizes) + 1.8], "fixedrange": True},
        yaxis={"visible": False, "range": [4.7, -0.7], "fixedrange": True},
        plot_bgcolor="rgba(0,0,0,0)", paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[
            {"type": "buttons", "direction": "left", "x": 0.0, "y": -0.02, "xanchor": "left", "yanchor": "top",
             "buttons": [
                 {"label": "▶ 재생", "method": "animate", "args": [names, {**_ANIMATE, "fromcurrent": False}]},
                 {"label": "멈춤", "method": "animate",
                  "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]},
             ]},
            {"type": "buttons", "direction": "left", "x": 1.0, "y": -0.02, "xanchor": "right", "yanchor": "top",
             "active": len(dataset_sizes) - 1,
             "buttons": [{"label": f"D={d}", "method": "restyle", "args": [{"visible": visible[i]}]}
                         for i, d in enumerate(dataset_sizes)]},
        ],
        sliders=[{"active": 0, "x": 0.05, "len": 0.93, "y": -0.12, "yanchor": "top",
                  "currentvalue": {"prefix": "월드 크기 ", "font": {"size": 13}},
                  "steps": [{"label": name.replace("N=", ""), "method": "animate", "args": [[name], _ANIMATE]}
                            for name in names]}],
    )
    return fig


def recorded_split_figure(shards: list[list[int]], title: str) -> go.Figure:
    """One split recorded from real ranks (no animation): used by the live widget."""
    batch = len({i for s in shards for i in s})
    n_points = batch + 2 * len(shards)
    fig = go.Figure([
        go.Scatter(mode="markers+text", hoverinfo="text", showlegend=False, **_split_points(shards, batch, n_points)),
        go.Scatter(mode="text", hoverinfo="skip", showlegend=False, textposition="middle right",
                   **_count_labels(shards, len(shards))),
        go.Scatter(mode="text", hoverinfo="skip", showlegend=False, textposition="middle left",
                   **_lane_labels(len(shards), len(shards))),
    ])
    fig.update_layout(height=120 + 50 * len(shards), margin={"l": 10, "r": 10, "t": 40, "b": 10}, title=title,
                      xaxis={"visible": False, "range": [-4.0, batch + 1.8]},
                      yaxis={"visible": False, "range": [len(shards) + 0.7, 0.3]},
                      plot_bgcolor="rgba(0,0,0,0)", paper_bgcolor="rgba(0,0,0,0)")
    return fig


# --- 1장: 복제본이 같아지는 순간 --------------------------------------------------------------

def replica_sync_figure(ranks: list[dict], n_show: int = 16) -> go.Figure:
    """Heatmap of each rank's first parameters before and after wrapping in DDP (recorded)."""
    labels = [f"랭크 {r['rank']} (PID {r['pid']})" for r in ranks]
    cols = [f"w{j}" for j in range(n_show)]

    def z(key: str) -> list[list[float]]:
        return [r[key][:n_show] for r in ranks]

    def hover(key: str) -> list[list[str]]:
        return [[f"{labels[i]} · {cols[j]} = {v:+.4f}" for j, v in enumerate(row)] for i, row in enumerate(z(key))]

    limit = max(abs(v) for key in ("params_before", "params_after") for row in z(key) for v in row)
    heat = dict(x=cols, y=labels, zmin=-limit, zmax=limit, colorscale="RdBu", hoverinfo="text",
                colorbar={"title": {"text": "값"}})
    states = [("params_before", "DDP로 감싸기 전: 시드가 달라 랭크마다 값이 다르다", "감싸기 전"),
              ("params_after", "DDP로 감싼 뒤: 모든 랭크가 랭크 0의 값을 받았다", "감싼 뒤")]
    fig = go.Figure(go.Heatmap(z=z(states[0][0]), text=hover(states[0][0]), **heat))
    fig.frames = [go.Frame(name=name, data=[go.Heatmap(z=z(key), text=hover(key))],
                           layout={"title": {"text": title}}) for key, title, name in states]
    fig.update_layout(
        height=160 + 45 * len(ranks), margin={"l": 10, "r": 10, "t": 50, "b": 10},
        title={"text": states[0][1], "font": {"size": 15}},
        yaxis={"autorange": "reversed"}, xaxis={"title": {"text": "처음 16개 파라미터"}},
        paper_bgcolor="rgba(0,0,0,0)",
        sliders=[{"active": 0, "y": -0.25, "yanchor": "top", "currentvalue": {"prefix": "상태: "},
                  "steps": [{"label": name, "method": "animate", "args": [[name], _ANIMATE]}
                            for _, _, name in states]}],
    )
    return fig


# --- 1장: 표 ----------------------------------------------------------------------------------

def replica_table(result):
    """Each rank's PID, parameter checksum and fingerprint before and after wrapping in DDP."""
    return html_table(
        ["랭크", "PID", "감싸기 전 체크섬", "감싸기 전 지문", "감싼 뒤 체크섬", "감싼 뒤 지문"],
        [[r["rank"], r["pid"], f"{r['checksum_before']:+.6f}", r["fingerprint_before"],
          f"{r['checksum_after']:+.6f}", r["fingerprint_after"]] for r in result.ranks],
        caption=f"랭크별 파라미터 {result.data['n_params']}개의 체크섬과 지문 (실제 실행 기록)")


def batches_table(result):
    """The sample indices each rank received per step, and the size of each step's global batch."""
    data = result.data
    return html_table(
        ["스텝"] + [f"랭크 {r['rank']}" for r in result.ranks] + ["전역 배치 크기"],
        [[s] + [r["batches"][s] if s < len(r["batches"]) else "—" for r in result.ranks] + [len(g)]
         for s, g in enumerate(data["global_batches"])],
        caption=(f"DistributedSampler가 나눈 샘플 번호 (데이터셋 D={data['dataset_size']}개, N={result.world_size}, "
                 f"B/N={result.params['per_rank_batch']}, 패딩 후 {data['padded_size']}개)"))
