"""Chapter 7 figures: bucket counts per ``bucket_cap_mb``, the backward/All-Reduce timeline,
per-sample weights with uneven per-rank batches, the ``Join`` timeline, and the tables of the
training-loop labs (amp_clip, comm_hooks, compile_ddp) (all recorded)."""

from __future__ import annotations

import plotly.graph_objects as go

from . import WAITING_COLOR, html_table, rank_color

BACKWARD_COLOR = "#4C78A8"
LAYER_COLORS = ("#4C78A8", "#9ECAE9")
ALLREDUCE_COLOR = "#F58518"
PREDICT_COLOR = "#202124"
FONT = {"family": "Noto Sans CJK KR, Noto Sans KR, sans-serif"}


def cap_label(cap: str) -> str:
    return "기본값" if cap == "default" else f"{cap} MiB"


def base_layout(fig: go.Figure, title: str | dict, height: int, **layout) -> go.Figure:
    """Shared look; ``title`` is the text, or a full plotly title dict."""
    title = title if isinstance(title, dict) else {"text": title, "font": {"size": 15}}
    base = {"height": height, "title": title, "font": FONT,
            "margin": {"l": 10, "r": 10, "t": 60, "b": 10}, "paper_bgcolor": "rgba(0,0,0,0)"}
    fig.update_layout(**(base | layout))
    return fig


def _slider(labels: list[str], steps_args: list[list], prefix: str, active: int = 0) -> dict:
    """A slider whose step i applies ``plotly update`` arguments ``steps_args[i]`` (no kernel needed)."""
    return {"active": active, "y": -0.08, "yanchor": "top", "x": 0.05, "len": 0.9,
            "currentvalue": {"prefix": prefix, "font": {"size": 13}},
            "steps": [{"label": label, "method": "update", "args": args} for label, args in zip(labels, steps_args)]}


# --- 7장: bucket_cap_mb와 All-Reduce 횟수 ----------------------------------------------------

def bucket_count_figure(rows: list[dict]) -> go.Figure:
    """Measured All-Reduce calls per backward for each cap, iteration by iteration, against the prediction.

    ``rows`` is the ``buckets`` lab's ``result.data["rows"]``. Slider: which iteration.
    """
    x = [cap_label(row["cap"]) for row in rows]
    iterations = len(rows[0]["per_iteration"])

    def bars(it: int) -> dict:
        y = [row["per_iteration"][it] for row in rows]
        return {"y": [y], "text": [[str(v) for v in y]]}

    fig = go.Figure([
        go.Bar(x=x, name="측정한 All-Reduce 횟수", marker_color=ALLREDUCE_COLOR, textposition="outside",
               hovertemplate="bucket_cap_mb %{x}<br>측정: All-Reduce %{y}번<extra></extra>", **{
                   k: v[0] for k, v in bars(iterations - 1).items()}),
        go.Scatter(x=x, y=[row["predicted"] for row in rows], mode="markers", name="크기로 예측한 버킷 수(2번째 반복부터)",
                   marker={"symbol": "line-ew-open", "size": 34, "color": PREDICT_COLOR, "line": {"width": 3}},
                   hovertemplate="bucket_cap_mb %{x}<br>예측: 버킷 %{y}개<extra></extra>"),
    ])
    top = max(max(row["per_iteration"]) for row in rows)
    labels = [f"{it + 1}번째" for it in range(iterations)]
    titles = ["첫 반복: 버킷을 아직 다시 만들기 전이라 cap과 상관없이 버킷 하나로 보낸다"] + [
        f"{it + 1}번째 반복: 첫 역전파의 순서로 다시 만든 버킷마다 All-Reduce 한 번" for it in range(1, iterations)]
    return base_layout(
        fig, titles[-1], 430,
        xaxis={"title": {"text": "bucket_cap_mb (버킷 크기 상한)"}, "type": "category"},
        yaxis={"title": {"text": "역전파 한 번의 All-Reduce 횟수"}, "range": [0, top * 1.2], "dtick": 2},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0},
        sliders=[_slider(labels, [[bars(it), {"title.text": titles[it]}, [0]] for it in range(iterations)],
                         "반복: ", active=iterations - 1) | {"y": -0.22}],
    )


# --- 7장: 역전파와 겹치는 버킷 All-Reduce ------------------------------------------------------

def bucket_lanes(timeline: dict, param_layer: list[int]) -> list[str]:
    """Row labels for the buckets in launch order, with the layers each one holds."""
    lanes = []
    for b in sorted(timeline["buckets"], key=lambda b: b["launch"]):
        layers = sorted({param_layer[i] for i in b["params"]})
        span = f"층 {layers[0]}" if len(layers) == 1 else f"층 {layers[0]}–{layers[-1]}"
        lanes.append(f"버킷 {b['bucket']} ({span})")
    return lanes


def _timeline_traces(timeline: dict, param_layer: list[int], visible: bool) -> list[go.Bar]:
    """Bars for one recorded backward: forward, each layer's backward, each bucket's All-Reduce (ms)."""
    ms = 1000.0
    n_layers = max(param_layer) + 1
    done = [max(t for i, t in enumerate(timeline["ready"]) if param_layer[i] == layer) for layer in range(n_layers)]
    ends = sorted(done, reverse=False)
    starts = [timeline["backward_called"]] + ends[:-1]
    order = sorted(range(n_layers), key=lambda layer: done[layer])  # 역전파는 마지막 층부터
    layer_bars = go.Bar(
        orientation="h", y=["역전파"] * n_layers, base=[s * ms for s in starts],
        x=[(e - s) * ms for s, e in zip(starts, ends)], visible=visible, showlegend=False,
        marker_color=[LAYER_COLORS[k % 2] for k in range(n_layers)], text=[f"층{layer}" for layer in order],
        textposition="inside", insidetextanchor="middle", textangle=0, textfont={"size": 10},
        customdata=[[layer, e * ms] for layer, e in zip(order, ends)],  # 템플릿 하나: 막대마다 문자열을 두지 않는다
        hovertemplate="층 %{customdata[0]}의 역전파: %{base:.2f} → %{customdata[1]:.2f} ms<extra></extra>")
    forward = go.Bar(orientation="h", y=["순전파"], base=[0.0], x=[timeline["backward_called"] * ms],
                     marker_color=WAITING_COLOR, visible=visible, showlegend=False,
                     hovertemplate="순전파: 0 → %{x:.2f} ms<extra></extra>")
    buckets = sorted(timeline["buckets"], key=lambda b: b["launch"])
    lanes = bucket_lanes(timeline, param_layer)
    layers = [sorted({param_layer[i] for i in b["params"]}) for b in buckets]
    comm = go.Bar(
        orientation="h", y=lanes, base=[b["launch"] * ms for b in buckets],
        x=[(b["done"] - b["launch"]) * ms for b in buckets], marker_color=ALLREDUCE_COLOR, visible=visible,
        showlegend=False,
        customdata=[[b["bucket"], b["bytes"] / 1024, ls[0], ls[-1], b["done"] * ms] for b, ls in zip(buckets, layers)],
        hovertemplate=("버킷 %{customdata[0]} (%{customdata[1]:.0f} KiB, 층 %{customdata[2]}–%{customdata[3]})<br>"
                       "All-Reduce 시작 %{base:.2f} ms → 끝 %{customdata[4]:.2f} ms<extra></extra>"))
    return [forward, layer_bars, comm]


def _timeline_marks(timeline: dict) -> list[dict]:
    ms = 1000.0
    end = max(timeline["ready"]) * ms
    back = timeline["backward_returned"] * ms
    line = {"type": "line", "yref": "paper", "y0": 0, "y1": 1}
    return [line | {"x0": end, "x1": end, "line": {"color": BACKWARD_COLOR, "dash": "dash", "width": 2}},
            line | {"x0": back, "x1": back, "line": {"color": PREDICT_COLOR, "dash": "dot", "width": 2}}]


def _timeline_notes(timeline: dict) -> list[dict]:
    ms = 1000.0
    note = {"yref": "paper", "y": 1.0, "yanchor": "bottom", "showarrow": False, "font": {"size": 11}}
    return [note | {"x": max(timeline["ready"]) * ms, "text": "그래디언트 계산 끝", "xanchor": "right",
                    "font": {"size": 11, "color": BACKWARD_COLOR}},
            note | {"x": timeline["backward_returned"] * ms, "text": "backward() 반환", "xanchor": "left"}]


def overlap_timeline_figure(rank: dict, active: int | None = None) -> go.Figure:
    """Gantt-like timeline of one rank's timed backward for each ``bucket_cap_mb`` (slider).

    Rows: the forward pass, the backward pass split by layer (from the gradient-ready hooks),
    and one row per bucket from its All-Reduce launch to its completion (communication hook).
    """
    runs = rank["runs"]
    active = len(runs) - 1 if active is None else active
    traces, per_run = [], []
    for j, run in enumerate(runs):
        bars = _timeline_traces(run["timeline"], rank["param_layer"], visible=j == active)
        per_run.append(len(bars))
        traces += bars
    fig = go.Figure(traces)

    def update(j: int) -> list:
        visible = [k == j for k, count in enumerate(per_run) for _ in range(count)]
        timeline = runs[j]["timeline"]
        lanes = ["순전파", "역전파"] + bucket_lanes(timeline, rank["param_layer"])
        return [{"visible": visible},
                {"shapes": _timeline_marks(timeline), "annotations": _timeline_notes(timeline),
                 "yaxis.categoryarray": lanes,
                 "title.text": f"랭크 {rank['rank']}, bucket_cap_mb = {cap_label(runs[j]['cap'])}: "
                               f"버킷 {len(timeline['buckets'])}개"}]

    first = update(active)[1]
    fig.update_layout(barmode="overlay", shapes=first["shapes"], annotations=first["annotations"],
                      yaxis={"categoryorder": "array", "categoryarray": first["yaxis.categoryarray"],
                             "autorange": "reversed"})
    most = max(len(run["timeline"]["buckets"]) for run in runs)
    return base_layout(
        fig, first["title.text"], 210 + 26 * (most + 2),
        xaxis={"title": {"text": "순전파 시작부터의 시간 (ms)"}, "rangemode": "tozero"},
        sliders=[_slider([cap_label(run["cap"]) for run in runs], [update(j) for j in range(len(runs))],
                         "bucket_cap_mb: ", active=active) | {"y": -0.12}],
    )


# --- 7장: 랭크마다 샘플 수가 다를 때 ----------------------------------------------------------

def sample_weights(counts: list[int], fix: str) -> list[list[float]]:
    """Per rank, each original sample's weight in DDP's averaged gradient, times Σn (1 = as in the global batch)."""
    n, total = len(counts), sum(counts)
    smallest, largest = min(counts), max(counts)
    weights = []
    for c in counts:
        if fix == "naive":
            weights.append([total / (n * c)] * c)
        elif fix == "weighted":
            weights.append([1.0] * c)
        elif fix == "drop_last":
            weights.append([total / (n * smallest) if i < smallest else 0.0 for i in range(c)])
        else:  # pad: 앞에서부터 반복해 largest개로 채우므로 앞쪽 샘플은 여러 번 들어간다
            copies = [sum(1 for k in range(largest) if k % c == i) for i in range(c)]
            weights.append([total * m / (n * largest) for m in copies])
    return weights


FIX_LABELS = {"naive": "단순 평균 (1/N)Σg_i", "weighted": "가중 보정: 손실 × n_i·N/Σn",
              "drop_last": "drop_last: 가장 작은 n_i로 자름", "pad": "pad: 가장 큰 n_i까지 반복"}
FIX_BUTTONS = {"naive": "단순 평균", "weighted": "가중 보정", "drop_last": "drop_last", "pad": "pad"}


def sample_weight_figure(counts: list[int], max_diff: dict, pad_vs_full: float) -> go.Figure:
    """Bars: how much each sample counts in the averaged gradient, per fix (buttons).

    ``counts`` are the recorded per-rank sample counts; the measured gaps go in the titles.
    """
    fixes = list(FIX_LABELS)
    gaps = {"naive": f"전역 그래디언트와 최대 차이 {max_diff['naive']:.1e}",
            "weighted": f"전역 그래디언트와 최대 차이 {max_diff['weighted']:.1e}",
            "drop_last": f"남긴 샘플만의 그래디언트와 같다(차이 {max_diff['drop_last']:.1e}); 버린 샘플은 0",
            "pad": f"채운 배치와 같다(차이 {max_diff['pad']:.1e}); 원래 배치와는 {pad_vs_full:.1e} 차이"}
    starts = [sum(counts[:r]) for r in range(len(counts))]
    traces = []
    for j, fix in enumerate(fixes):
        for r, w in enumerate(sample_weights(counts, fix)):
            traces.append(go.Bar(x=[starts[r] + i for i in range(len(w))], y=w, name=f"랭크 {r} (n={counts[r]})",
                                 marker_color=rank_color(r), visible=j == 0, showlegend=True, legendgroup=str(r),
                                 hovertemplate=f"랭크 {r}의 샘플 %{{x}}<br>가중치 × Σn = %{{y:.2f}}<extra></extra>"))
    fig = go.Figure(traces)
    per = len(counts)
    buttons = [{"label": FIX_BUTTONS[fix], "method": "update",
                "args": [{"visible": [k // per == j for k in range(len(traces))]},
                         {"title.text": f"{FIX_LABELS[fix]}<br>{gaps[fix]}"}]} for j, fix in enumerate(fixes)]
    top = max(max(max(w) for w in sample_weights(counts, fix)) for fix in fixes)
    fig.add_hline(y=1.0, line={"color": PREDICT_COLOR, "dash": "dash"},
                  annotation_text="전역 배치에서의 가중치", annotation_position="top right")
    return base_layout(
        fig, {"text": f"{FIX_LABELS['naive']}<br>{gaps['naive']}", "font": {"size": 14}, "y": 0.97,
              "yanchor": "top"}, 500, bargap=0.1,
        margin={"l": 10, "r": 10, "t": 105, "b": 10},
        xaxis={"title": {"text": "전역 배치의 샘플 번호 (랭크 순서)"}},
        yaxis={"title": {"text": "샘플 하나의 가중치 × Σn"}, "range": [0, top * 1.15]},
        legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0},
        updatemenus=[{"type": "buttons", "direction": "right", "x": 0.0, "y": 1.03, "xanchor": "left",
                      "yanchor": "bottom", "buttons": buttons, "pad": {"t": 0, "b": 4}}],
    )


def join_timeline_figure(ranks: list[dict]) -> go.Figure:
    """Each rank's own training steps inside ``Join`` and the time it spent shadowing the others (recorded)."""
    ms = 1000.0
    traces = []
    for r in ranks:
        join, lane = r["join"], f"랭크 {r['rank']}"
        steps = join["steps"]
        traces.append(go.Bar(orientation="h", y=[lane] * len(steps), base=[s[0] * ms for s in steps],
                             x=[(s[1] - s[0]) * ms for s in steps], marker_color=rank_color(r["rank"]),
                             text=[f"{k + 1}" for k in range(len(steps))], textposition="inside",
                             name=f"랭크 {r['rank']}: 자기 배치 {len(steps)}개", showlegend=False,
                             hovertemplate=f"{lane}의 %{{text}}번째 반복: %{{base:.1f}} ms부터 %{{x:.1f}} ms<extra></extra>"))
        last = steps[-1][1] if steps else 0.0
        traces.append(go.Bar(orientation="h", y=[lane], base=[last * ms], x=[(join["left_join"] - last) * ms],
                             marker={"color": "rgba(0,0,0,0)", "line": {"color": WAITING_COLOR, "width": 2},
                                     "pattern": {"shape": "/", "fgcolor": WAITING_COLOR}},
                             showlegend=False,
                             hovertemplate=f"{lane}: 배치를 다 쓰고 Join이 남은 랭크의 All-Reduce를 대신 맞춰 주는 구간"
                                           "<extra></extra>"))
    fig = go.Figure(traces)
    return base_layout(
        fig, "Join 안의 학습: 색 막대는 자기 배치로 한 반복, 빗금은 끝난 뒤 남의 All-Reduce에 참여한 구간",
        150 + 45 * len(ranks), barmode="overlay",
        xaxis={"title": {"text": "Join 시작부터의 시간 (ms)"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed"},
    )


def _limits_text(limits: list[int]) -> str:
    first, rest = limits
    mib = 2 ** 20
    return f"{rest / mib:.3g} MiB" if first == rest else f"첫 버킷 {first / mib:.3g} MiB, 나머지 {rest / mib:.3g} MiB"


def bucket_table(result):
    """Per cap: the limits, a rough estimate, the rule's prediction and the measured All-Reduce counts."""
    return html_table(
        ["bucket_cap_mb", "버킷 상한", "어림 ⌈전체/cap⌉", "규칙으로 예측", "측정: 1번째 반복", "측정: 2번째 이후 반복",
         "broadcast (반복별)"],
        [[cap_label(row["cap"]), _limits_text(row["limits"]), row["rough"], row["predicted"], row["first_iteration"],
          " · ".join(str(c) for c in row["per_iteration"][1:]), " · ".join(str(b) for b in row["broadcast"])]
         for row in result.data["rows"]],
        caption="역전파 한 번의 All-Reduce 횟수: 예측과 실제 측정 (랭크 0, 모든 랭크가 같은 값)")


ACCUMULATION_LABELS = {"sync_every": "① 매번 동기화", "no_sync": "② no_sync() 누적", "big_batch": "③ K배 큰 배치 한 번"}


def accumulation_table(result):
    """All-Reduce count and parameter difference to the big batch, for the three ways of one step."""
    d = result.data
    k = result.params["micro_steps"]
    return html_table(
        ["방법", "All-Reduce 횟수", "③과의 파라미터 최대 차이"],
        [[label, d["counts"][v], f"{d['max_diff_vs_big'].get(v, 0.0):.1e}"] for v, label in ACCUMULATION_LABELS.items()],
        caption=f"K={k}개 마이크로배치, N={result.world_size}: 한 스텝 뒤의 비교 (허용 오차 {d['tolerance']:g})")


def uneven_table(result):
    """Each way of averaging uneven ranks against the gradient it should equal."""
    u = result.data
    targets = {"naive": "전역 배치", "weighted": "전역 배치", "drop_last": "남긴 샘플 전체", "pad": "채운 배치(중복 포함)"}
    return html_table(
        ["방법", "비교 대상", "DDP 그래디언트와의 최대 절대 차이"],
        [[FIX_LABELS[k], target, f"{u['max_diff'][k]:.2e}"] for k, target in targets.items()]
        + [[FIX_LABELS["pad"], "원래 전역 배치", f"{u['pad_vs_full']:.2e}"]],
        caption=f"랭크별 샘플 수 n_i = {u['counts']}, 그래디언트 성분의 최대 크기 {u['grad_scale']:.2f}, "
                f"허용 오차 {u['tolerance']:g}")


def join_table(result):
    """What each rank did inside ``Join``: its own iterations, the All-Reduces it joined, when it left."""
    return html_table(
        ["랭크", "자기 배치로 한 반복", "Join 안에서 참여한 All-Reduce", "Join을 빠져나온 시각 (ms)", "끝난 뒤 파라미터 지문"],
        [[r["rank"], r["join"]["iterations"], r["join"]["all_reduce"], f"{r['join']['left_join'] * 1000:.1f}",
          r["join"]["fingerprint"]] for r in result.ranks],
        caption="Join 안에서의 학습 기록 (실제 실행)")


def amp_clip_table(result):
    """Per rank: the GradScaler's scale after each step, the clipped norm, the wrong-place local norm and the
    bytes written with each comm hook, next to one process where there is one to compare with."""
    d = result.data
    scales = [" → ".join(f"{s:g}" for s in trace) for trace in d["scale_trace"]]
    rows = [["GradScaler 배율 (스텝마다)", *scales, "—"],
            ["clip_grad_norm_이 본 노름", *(f"{n:.7g}" for n in d["clip_norms"]["ranks"]), f"{d['clip_norms']['single']:.7g}"],
            ["마이크로 스텝마다 자를 때의 첫 노름", *(f"{n[0]:.4g}" for n in d["local_norms"]), "—"],
            ["쓴 바이트(wchar): 기본 훅", *(f"{b:,}" for b in d["bytes_written"]["default"]), "—"],
            ["쓴 바이트(wchar): fp16_compress_hook", *(f"{b:,}" for b in d["bytes_written"]["fp16"]), "—"]]
    ranks = [f"랭크 {r}" for r in range(result.world_size)]
    return html_table(["항목", *ranks, "한 프로세스"], rows,
                      caption=f"amp_clip 실습 (N={result.world_size}): 마지막 랭크의 손실만 스텝 "
                              f"{result.params['inf_step']}에서 inf, max_norm {d['clip_norms']['max_norm']:.4g}")


HOOK_LABELS = {"default": "기본 훅 (All-Reduce)", "powersgd": "PowerSGD, 오차 피드백 켬",
               "powersgd_no_ef": "PowerSGD, 오차 피드백 끔"}


def powersgd_table(result):
    """Per hook: bytes rank 0 wrote per step before and after ``start_powerSGD_iter``, the ratio to the default
    hook, and the parameter difference to the default hook after all steps."""
    d, start = result.data, result.params["start_iter"]
    wrote = {h: per_rank[0] for h, per_rank in d["bytes_per_step"].items()}
    plain = {h: sum(w[:start]) / start for h, w in wrote.items()}
    compressed = {h: sum(w[start:]) / len(w[start:]) for h, w in wrote.items()}
    rows = [[label, f"{plain[h]:,.0f}", f"{compressed[h]:,.0f}", f"{compressed[h] / compressed['default']:.4f}",
             "—" if h == "default" else f"{d['drift'][h]:.3f}"] for h, label in HOOK_LABELS.items()]
    steps = len(wrote["default"])
    return html_table(["통신 훅", f"스텝 0~{start - 1}: 쓴 바이트/스텝", f"스텝 {start}~{steps - 1}: 쓴 바이트/스텝",
                       "기본 훅 대비", "기본 훅과의 파라미터 차이 / 이동량"], rows,
                      caption=f"Linear(256, 256) {steps}스텝, 근사 랭크 r={result.params['matrix_rank']}, "
                              f"N={result.world_size} (랭크 0이 쓴 바이트: /proc/self/io wchar)")


VIEW_LABELS = {"copy": ("False", "True"), "view": ("True", "False"), "view_set_to_none": ("True", "True")}


def bucket_view_table(result):
    """Per setting: distinct storages behind gradients and buckets, bytes held, the reducer's copies."""
    rows = []
    for name, (as_view, none) in VIEW_LABELS.items():
        v = result.data["views"][name]
        rows.append([as_view, none, v["grad_storages"], v["buckets"], f"{v['held_bytes'] / v['param_bytes']:g}",
                     "예" if v["grads_in_buckets"] else "아니요", v["copies"].get("grad_to_bucket", 0),
                     v["copies"].get("bucket_to_grad", 0)])
    return html_table(["gradient_as_bucket_view", "zero_grad(set_to_none=)", "p.grad 저장소 수", "버킷 수",
                       "(그래디언트+버킷) / 파라미터 바이트", "p.grad가 버킷의 뷰", "복사: 그래디언트→버킷",
                       "복사: 버킷→그래디언트"], rows,
                      caption="두 층 모델(버킷 2개), 마지막 역전파 뒤 랭크 0 (복사는 그 역전파에서 리듀서가 한 횟수)")


def compile_table(result):
    """Per cap: eager DDP's buckets, DDPOptimizer's pieces (and the source rule), the compiled backward's All-Reduces."""
    d = result.data
    rows = [[cap, d["ddp_buckets"]["eager"][i], d["pieces"][i], d["predicted"][i], d["ddp_buckets"]["compiled"][i]]
            for i, cap in enumerate(d["caps"])]
    return html_table(["bucket_cap_mb", "eager DDP의 All-Reduce 수", "DDPOptimizer의 조각 수", "소스 규칙의 조각 수",
                       "컴파일한 DDP의 All-Reduce 수"], rows,
                      caption=f"Linear(256, 256) {result.params['depth']}층, N={result.world_size}; "
                              f"optimize_ddp=False면 조각 {d['no_split']}개")


def rebuild_items_text(forward) -> str:
    """What the bucket-rebuild broadcast carried in chapter 2's ``forward`` lab (plain MLP, rank 0)."""
    counts = forward.data["counts"]["plain"]
    iteration = counts["rebuilt"].index(True)
    items = forward.data["items"]["plain"]["forward"][iteration]
    carried = ", ".join(f"{it['op']}({it['dtype']} {it['numel']}개)" for it in items) or "없음"
    return f"2장 실습 forward의 일반 MLP: 버킷을 다시 짠 반복 {iteration}의 순전파에서 나른 것 = {carried}"


def legacy_buffer_table(forward):
    """running_mean[0] per rank after wrapping with ``forward_sync_buffers=False`` vs ``broadcast_buffers=False``."""
    return html_table(
        ["랭크", "감싸기 전", "forward_sync_buffers=False로 감싼 뒤", "broadcast_buffers=False로 감싼 뒤"],
        [[r["rank"], f"{r['rank'] + 1.0:.1f}", f"{r['variants']['bn_nosync']['bn_entry_mean'][0][0]:.1f}",
          f"{r['legacy']['running_mean0']:.1f}"] for r in forward.ranks],
        caption="BatchNorm의 running_mean[0]: DDP 생성자의 초기 동기화가 버퍼를 맞추는가 (2장 실습 forward, 실제 실행 기록)")


def bucket_count_alt(rows: list[dict]) -> str:
    """The bucket-count figure's alt text, with the measured counts."""
    steady = ", ".join(f"{cap_label(row['cap'])} {row['steady']}번" for row in rows)
    first = sorted({row["first_iteration"] for row in rows})
    return (f"bucket_cap_mb 값별 역전파 한 번의 All-Reduce 횟수 막대그래프. 첫 반복은 {'·'.join(map(str, first))}번이고, "
            f"2번째 반복부터 {steady}으로 검은 예측선과 비교된다.")
