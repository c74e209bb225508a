"""Chapter 8 figures: All-Reduce time and busbw against message size with the fitted cost model,
the ring's segment timeline (one segment per chunk vs pipelined), DDP step times per bucket size,
and a step-time / scaling-efficiency calculator (all offline)."""

from __future__ import annotations

import json

import plotly.graph_objects as go

from ..ddp.cost_model import bus_factor, model_time
from ..lessons.bench.measure import IMPLS, size_label
from ..lessons.bench.report import variant_label
from ..result import LabResult
from . import html_table, rank_color
from .allreduce import calculator_style
from .internals import base_layout

COMPUTE_COLOR = "#9AA0A6"
WAIT_COLOR = "#9AA0A6"
ADD_COLOR = "#4C78A8"
EXPOSED_COLOR = "#F58518"
CEILING_COLOR = "#54A24B"


def _views(traces: list[tuple[str, go.Scatter]], view: str) -> list[bool]:
    return [tag == view for tag, _ in traces]


def _allreduce_traces(result: LabResult, color: str) -> list[tuple[str, go.Scatter]]:
    """Time view and busbw view traces of one run (one colour per N)."""
    n, rows, fit = result.world_size, result.data["rows"], result.data["fit"]
    x = [r["size"] for r in rows]
    labels = [size_label(s) for s in x]
    out: list[tuple[str, go.Scatter]] = []
    for impl, name, dash, symbol in (("library", "all_reduce", "solid", "circle"),
                                     ("ring", "4장의 링", "dash", "diamond"),
                                     ("pipelined", "파이프라인 링", "dashdot", "square")):
        med = [r[impl]["time_us"] for r in rows]
        best = [r[impl]["best_us"] for r in rows]
        out.append(("time", go.Scatter(
            x=x, y=med, mode="lines+markers", name=f"N={n} {name} (중앙값)", legendgroup=f"{n}{impl}",
            line={"color": color, "dash": dash}, marker={"symbol": symbol, "size": 8},
            customdata=list(zip(labels, best)),
            hovertemplate=f"N={n} {name}<br>%{{customdata[0]}}: 중앙값 %{{y:,.0f}} μs"
                          "<br>가장 빠른 반복 %{customdata[1]:,.0f} μs<extra></extra>")))
        out.append(("time", go.Scatter(
            x=x, y=best, mode="markers", name=f"N={n} {name} (가장 빠른 반복)", legendgroup=f"{n}{impl}",
            marker={"symbol": f"{symbol}-open", "size": 9, "color": color}, showlegend=False,
            hovertemplate=f"N={n} {name}<br>%{{x:,}} B: 가장 빠른 반복 %{{y:,.0f}} μs<extra></extra>")))
        out.append(("busbw", go.Scatter(
            x=x, y=[r[impl]["busbw"] for r in rows], mode="lines+markers", name=f"N={n} {name} busbw",
            line={"color": color, "dash": dash}, marker={"symbol": symbol, "size": 8}, customdata=labels,
            hovertemplate=f"N={n} {name}<br>%{{customdata}}: busbw %{{y:.3f}} GB/s<extra></extra>")))
    if fit:
        grid = [x[0] * 2 ** (k / 4) for k in range(int(4 * (len(x) - 1) * 2) + 1) if x[0] * 2 ** (k / 4) <= x[-1]]
        t_fit = [model_time(fit, s, n) for s in grid]
        text = f"N={n} 비용 모델 (α={fit['alpha_s'] * 1e6:.0f} μs, BW={fit['bandwidth'] / 1e9:.2f} GB/s)"
        out.append(("time", go.Scatter(x=grid, y=[t * 1e6 for t in t_fit], mode="lines", name=text,
                                       line={"color": color, "dash": "dot", "width": 1.5},
                                       hovertemplate=f"{text}<br>%{{x:,}} B: %{{y:,.0f}} μs<extra></extra>")))
        out.append(("busbw", go.Scatter(x=grid, y=[bus_factor(n) * s / t / 1e9 for s, t in zip(grid, t_fit)],
                                        mode="lines", name=f"N={n} 비용 모델의 busbw",
                                        line={"color": color, "dash": "dot", "width": 1.5},
                                        hovertemplate="비용 모델: %{y:.3f} GB/s<extra></extra>")))
    return out


def allreduce_figure(results: list[LabResult]) -> go.Figure:
    """Median and best time per message size, per N, with the fitted α-β model; a button switches
    to busbw, where the machine's memory-copy bandwidth is drawn as the ceiling."""
    traces: list[tuple[str, go.Scatter]] = []
    for i, result in enumerate(results):
        traces += _allreduce_traces(result, rank_color(i))
    ceiling = max(r.data["memcpy"]["alone_gbs"] for r in results)
    x_all = [row["size"] for r in results for row in r.data["rows"]]
    traces.append(("busbw", go.Scatter(x=[min(x_all), max(x_all)], y=[ceiling, ceiling], mode="lines",
                                       name=f"메모리 복사 copy_ {ceiling:.1f} GB/s (이 기계의 상한)",
                                       line={"color": CEILING_COLOR, "width": 3},
                                       hovertemplate="메모리 복사: %{y:.2f} GB/s<extra></extra>")))
    fig = go.Figure([t for _, t in traces])
    for trace, visible in zip(fig.data, _views(traces, "time")):
        trace.visible = visible
    tick = {"tickvals": sorted(set(x_all)), "ticktext": [size_label(s) for s in sorted(set(x_all))]}
    time_axis = {"yaxis.title.text": "All-Reduce 한 번의 시간 (μs, 로그 눈금)"}
    busbw_axis = {"yaxis.title.text": "busbw (GB/s, 로그 눈금)"}
    buttons = [
        {"label": "시간", "method": "update", "args": [{"visible": _views(traces, "time")},
                                                      {**time_axis, "title.text": _TITLES["time"]}]},
        {"label": "busbw와 상한", "method": "update", "args": [{"visible": _views(traces, "busbw")},
                                                             {**busbw_axis, "title.text": _TITLES["busbw"]}]},
    ]
    return base_layout(
        fig, _title(_TITLES["time"]), 620,
        xaxis={"type": "log", "title": {"text": "메시지 크기 S (바이트, 로그 눈금)"}, **tick},
        yaxis={"type": "log", "dtick": 1, "exponentformat": "none", "tickformat": "~g",
               "title": {"text": time_axis["yaxis.title.text"]}},
        legend={"orientation": "h", "y": -0.18, "yanchor": "top", "x": 0, "font": {"size": 11}},
        margin={"l": 10, "r": 10, "t": 110, "b": 10},
        updatemenus=[_buttons(buttons)],
    )


_TITLES = {"time": "크기별 All-Reduce 시간", "busbw": "busbw와 메모리 복사 상한"}


def _title(text: str) -> dict:
    """A title pinned to the top, clear of the button row under it."""
    return {"text": text, "font": {"size": 15}, "y": 0.98, "yanchor": "top", "x": 0.01, "xanchor": "left"}


def _buttons(buttons: list[dict]) -> dict:
    """A row of buttons between the title and the plot (views that need no kernel)."""
    return {"type": "buttons", "direction": "left", "x": 0, "y": 1.02, "xanchor": "left", "yanchor": "bottom",
            "buttons": buttons, "showactive": True, "pad": {"b": 4}}


_LANES = ("세그먼트를 기다림", "받은 세그먼트 더하기")
TIMELINE_VIEWS = {"one_segment": "세그먼트 1개 (4장의 링)", "pipelined": "세그먼트 여러 개 (파이프라인)"}


def timeline_title(line: dict) -> str:
    n_seg = len(line["segments"])
    return (f"랭크 0의 {size_label(line['bytes'])} All-Reduce 한 번: 세그먼트 {size_label(line['segment_bytes'])} × "
            f"{n_seg}번 받음, 모두 {line['total_us'] / 1e3:,.1f} ms (기다림 {line['wait_us'] / 1e3:,.1f} ms, "
            f"더하기 {line['add_us'] / 1e3:,.1f} ms)")


def pipeline_timeline_figure(result: LabResult) -> go.Figure:
    """Rank 0's recorded timeline of one All-Reduce: when it waited for a segment and when it added
    one, with one segment per chunk (chapter 4's ring) and pipelined; buttons switch the views."""
    timeline = result.data["timeline"]
    fig = go.Figure()
    buttons = []
    views = list(TIMELINE_VIEWS)
    for i, view in enumerate(views):
        segs = timeline[view]["segments"]
        for lane, (start, end), color in ((_LANES[0], ("wait", "arrived"), WAIT_COLOR),
                                          (_LANES[1], ("arrived", "added"), ADD_COLOR)):
            shown = segs if start == "wait" else [s for s in segs if s["step"] < result.world_size - 1]  # 더하기는 RS에서만
            fig.add_trace(go.Bar(
                y=[lane] * len(shown), base=[s[start] / 1e3 for s in shown],
                x=[(s[end] - s[start]) / 1e3 for s in shown], orientation="h", marker_color=color,
                name=lane, visible=i == 0, showlegend=False,
                customdata=[[s["step"] + 1, s["segment"] + 1] for s in shown],
                hovertemplate=f"{lane}<br>단계 %{{customdata[0]}}, 세그먼트 %{{customdata[1]}}<br>"
                              "%{base:.2f} ms부터 %{x:.2f} ms 동안<extra></extra>"))
        visible = [j // 2 == i for j in range(2 * len(views))]
        buttons.append({"label": TIMELINE_VIEWS[view], "method": "update",
                        "args": [{"visible": visible}, {"title.text": timeline_title(timeline[view])}]})
    longest = max(timeline[v]["total_us"] for v in views) / 1e3
    return base_layout(
        fig, _title(timeline_title(timeline[views[0]])), 330, barmode="overlay",
        xaxis={"title": {"text": "All-Reduce를 시작한 뒤의 시각 (ms)"}, "range": [0, longest * 1.02]},
        yaxis={"automargin": True, "categoryorder": "array", "categoryarray": list(reversed(_LANES))},
        margin={"l": 10, "r": 20, "t": 110, "b": 10}, updatemenus=[_buttons(buttons)],
    )


def ddp_step_figure(results: list[LabResult]) -> go.Figure:
    """Step time per variant split into compute (the no-communication step) and what the
    communication added on top; one set of bars per N, chosen with buttons."""
    fig = go.Figure()
    buttons = []
    first_title = ""
    for i, result in enumerate(results):
        d = result.data["ddp"]
        rows = list(reversed(d["rows"]))  # 가로 막대: 위에서부터 표의 순서대로
        labels = [variant_label(r["variant"]) for r in rows]
        visible = i == 0
        compute = [min(r["micro_steps"] * d["compute_ms"], r["step_ms"]) for r in rows]
        fig.add_trace(go.Bar(y=labels, x=compute, orientation="h", name="계산 (통신 없는 스텝 × 마이크로 스텝 수)",
                             marker_color=COMPUTE_COLOR, visible=visible, legendgroup="compute",
                             hovertemplate="%{y}<br>계산 %{x:.1f} ms<extra></extra>"))
        fig.add_trace(go.Bar(y=labels, x=[r["step_ms"] - c for r, c in zip(rows, compute)], orientation="h",
                             name="통신이 더한 시간 (스텝 − 계산)", marker_color=EXPOSED_COLOR, visible=visible,
                             legendgroup="exposed",
                             text=[_bar_text(r) for r in rows], textposition="outside", cliponaxis=False,
                             hovertemplate="%{y}<br>통신이 더한 시간 %{x:.1f} ms<extra></extra>"))
        vis = [j // 2 == i for j in range(2 * len(results))]
        title = f"N={result.world_size}: 한 스텝의 시간"
        first_title = first_title or title
        buttons.append({"label": f"N={result.world_size}", "method": "update",
                        "args": [{"visible": vis}, {"title.text": title,
                                                    "xaxis.range": [0, _longest(result) * 1.9]}]})
    first = results[0]
    return base_layout(
        fig, _title(first_title), 500, barmode="stack",
        xaxis={"title": {"text": "한 스텝의 시간 (ms, 중앙값)"}, "range": [0, _longest(first) * 1.9]},
        yaxis={"automargin": True},
        legend={"orientation": "h", "y": -0.2, "yanchor": "top", "x": 0},
        margin={"l": 10, "r": 20, "t": 110, "b": 10},
        updatemenus=[_buttons(buttons)],
    )


def _bar_text(row: dict) -> str:
    what = f"수동의 {row['vs_manual']:.2f}배" if row["vs_manual"] is not None else f"K={row['micro_steps']}"
    return f"{row['step_ms']:.1f} ms · All-Reduce {row['all_reduce']}번 · {what}"


def _longest(result: LabResult) -> float:
    return max(r["step_ms"] for r in result.data["ddp"]["rows"])


def measured_preset(result: LabResult) -> dict:
    """The calculator's inputs for the run measured here: N, model size, fitted α and BW, compute time."""
    fit, d = result.data["fit"], result.data["ddp"]
    return {"n": result.world_size, "p": round(d["n_params"] / 1e6, 4), "dtype": 4,
            "bw": round(fit["bandwidth"] / 1e9, 3), "alpha": round(fit["alpha_s"] * 1e6, 1),
            "compute": round(d["compute_ms"], 2), "overlap": 0, "k": 1}


def scaling_calculator(div_id: str, measured: dict | None = None):
    """Step time and scaling efficiency from N, model size, dtype, BW, α, compute time, overlap and
    gradient accumulation (inline HTML+JS: no kernel, no network). Uses chapter 4's calculator look.

    Model: communication t_c = 2(N−1)/N · S/BW + 2(N−1)α once per optimizer step; a fraction
    ``overlap`` of the last micro-step's compute can hide it; efficiency = compute / step time.
    """
    from IPython.display import HTML

    fields = [("n", "N (GPU 수)", 8, "1", "1"), ("p", "파라미터 수 (백만 개)", 25.6, "0", "any"),
              ("bw", "대역폭 BW (GB/s)", 12.5, "0.001", "any"), ("alpha", "지연 시간 α (μs)", 20, "0", "any"),
              ("compute", "계산 시간 / 마이크로 스텝 (ms)", 50, "0.001", "any"),
              ("overlap", "겹치기 비율 (0–1)", 0.5, "0", "0.05"), ("k", "그래디언트 누적 K", 1, "1", "1")]
    ids = {key: f"{div_id}-{key}" for key, *_ in fields} | {"dtype": f"{div_id}-dtype", "out": f"{div_id}-out"}
    inputs = "".join(
        f'<label>{label}<input id="{ids[key]}" type="number" min="{low}" step="{step}" value="{value}"></label>'
        for key, label, value, low, step in fields)
    dtype = (f'<label>그래디언트 자료형<select id="{ids["dtype"]}"><option value="4" selected>float32 (4바이트)</option>'
             '<option value="2">bfloat16/float16 (2바이트)</option></select></label>')
    preset = ""
    if measured:
        preset = (f'<p><button type="button" id="{div_id}-measured">이 기계에서 잰 값 넣기</button> '
                  f'(N={measured["n"]}, 파라미터 {measured["p"]}백만 개, α={measured["alpha"]} μs, '
                  f'BW={measured["bw"]} GB/s, 계산 {measured["compute"]} ms, 겹치기 0)</p>')
    body = (f'<div id="{div_id}" class="ddp-calculator" role="group" aria-label="DDP 스텝 시간과 확장 효율 계산기">'
            "<p><strong>DDP 스텝 시간·확장 효율 계산기</strong> — 값을 바꾸면 바로 다시 계산합니다.</p>"
            f'{inputs}{dtype}{preset}<div id="{ids["out"]}" aria-live="polite"></div></div>')
    script = (_SCALING_JS.replace("__IDS__", json.dumps(ids))
              .replace("__MEASURED__", json.dumps(measured)).replace("__BUTTON__", json.dumps(f"{div_id}-measured")))
    extra = f"<style>#{div_id} select{{width:auto}}</style>"  # 자료형 이름이 잘리지 않게
    return HTML(f"{calculator_style(div_id)}{extra}{body}<script>{script}</script>")


_SCALING_JS = """
(function () {
  // t_c = 2(N-1)/N * S/BW + 2(N-1)α (링 All-Reduce, 옵티마이저 스텝마다 한 번)
  // 스텝 = K * 계산 + max(0, t_c - 겹치기 * 계산),  효율 = K * 계산 / 스텝,  속도 향상 = N * 효율
  var ids = __IDS__, measured = __MEASURED__;
  function num(id) { var v = parseFloat(document.getElementById(ids[id]).value); return isFinite(v) ? v : 0; }
  function fmtTime(s) { return s >= 1 ? s.toFixed(2) + " s" : (s * 1e3).toFixed(2) + " ms"; }
  function fmtBytes(b) { return b >= 1e9 ? (b / 1e9).toFixed(2) + " GB" : (b / 1e6).toFixed(2) + " MB"; }
  function model(n, s, bw, alpha, compute, overlap, k) {
    var comm = n > 1 ? 2 * (n - 1) / n * s / bw + 2 * (n - 1) * alpha : 0;
    var exposed = Math.max(0, comm - overlap * compute);
    var step = k * compute + exposed;
    return {comm: comm, exposed: exposed, step: step, eff: step > 0 ? k * compute / step : 1};
  }
  function update() {
    var n = Math.max(1, Math.round(num("n"))), s = num("p") * 1e6 * num("dtype");
    var bw = Math.max(num("bw"), 1e-9) * 1e9, alpha = num("alpha") * 1e-6, compute = num("compute") * 1e-3;
    var overlap = Math.min(1, Math.max(0, num("overlap"))), k = Math.max(1, Math.round(num("k")));
    var ns = [];
    for (var m = 2; m < n; m *= 2) { ns.push(m); }
    ns.push(n);
    var rows = ns.map(function (m) {
      var r = model(m, s, bw, alpha, compute, overlap, k);
      var w = Math.max(1, Math.round(160 * r.eff));
      return "<tr><th scope='row'>" + m + "</th><td>" + fmtTime(r.comm) + "</td><td>" + fmtTime(r.exposed) +
        "</td><td>" + fmtTime(r.step) + "</td><td>" + (100 * r.eff).toFixed(1) + "%</td><td>" +
        (m * r.eff).toFixed(2) + "배</td><td><span class='bar' style='width:" + w +
        "px;background:#4C78A8'></span></td></tr>";
    });
    document.getElementById(ids.out).innerHTML =
      "<p>그래디언트 크기 S = " + fmtBytes(s) + ", 옵티마이저 스텝 하나 = 마이크로 스텝 " + k + "개</p>" +
      "<table><thead><tr><th scope='col'>N</th><th scope='col'>All-Reduce 시간</th>" +
      "<th scope='col'>숨지 못한 통신</th><th scope='col'>스텝 시간</th><th scope='col'>확장 효율</th>" +
      "<th scope='col'>1개 대비 처리량</th><th scope='col'>비교</th></tr></thead><tbody>" + rows.join("") +
      "</tbody></table>";
  }
  Object.keys(ids).forEach(function (key) {
    if (key === "out") { return; }
    var el = document.getElementById(ids[key]);
    el.addEventListener("input", update);
    el.addEventListener("change", update);
  });
  var button = document.getElementById(__BUTTON__);
  if (button && measured) {
    button.addEventListener("click", function () {
      Object.keys(measured).forEach(function (key) { document.getElementById(ids[key]).value = measured[key]; });
      update();
    });
  }
  update();
})();
"""


# --- 표: 장의 셀마다 한 번 호출 ------------------------------------------------------------------------

_RUN_NOTE = "이 페이지를 만들 때의 실행 기록"


def _paired(ratio: dict) -> str:
    return f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})"


def fit_table(runs: dict[int, LabResult]):
    """The cost model's constants per N and implementation, and the size where its two terms are equal."""
    rows = [[n, name, f"{fit['alpha_s'] * 1e6:.0f}", f"{fit['bandwidth'] / 1e9:.2f}", f"{fit['r2_log']:.3f}",
             f"{n * fit['alpha_s'] * fit['bandwidth'] / 1024:,.0f} KiB"]
            for n, r in runs.items() for name, fit in (("all_reduce", r.data["fit"]), ("직접 만든 링", r.data["ring_fit"]))]
    return html_table(["N", "구현", "α (μs)", "BW (GB/s)", "log t의 R²", "두 항이 같아지는 크기 N·α·BW"], rows,
                      caption=f"측정값에 맞춘 비용 모델의 상수 (크기마다 가장 빠른 반복, {_RUN_NOTE})")


def best_busbw(result: LabResult) -> float:
    """The highest All-Reduce busbw (GB/s) of a run, from the fastest repeat of each size."""
    return max(row["size"] / (row["library"]["best_us"] * 1e-6) / 1e9 * result.data["bus_factor"]
               for row in result.data["rows"])


def copy_table(runs: dict[int, LabResult]):
    """The machine's copy bandwidth beside the best All-Reduce busbw."""
    rows = [[n, f"{r.data['memcpy']['alone_gbs']:.1f} · {r.data['memcpy']['alone_best_gbs']:.1f}",
             f"{r.data['memcpy']['together_gbs']:.1f}", f"{best_busbw(r):.2f}",
             f"{best_busbw(r) / r.data['memcpy']['alone_best_gbs']:.0%}"] for n, r in runs.items()]
    return html_table(["N", "copy_ 혼자, 중앙값 · 가장 빠른 반복 (GB/s)", "copy_ 모든 랭크 동시, 랭크당 (GB/s)",
                       "All-Reduce 최고 busbw, 가장 빠른 반복 (GB/s)", "busbw ÷ copy_ (가장 빠른 반복끼리)"], rows,
                      caption=f"이 기계가 옮길 수 있는 속도와 All-Reduce가 실제로 낸 속도 ({_RUN_NOTE})")


def race_table(runs: dict[int, LabResult]):
    """Library, chapter 4's ring and the pipelined ring, timed in turns at each size."""
    rows = [[n, size_label(row["size"]), f"{row['library']['time_us']:,.0f}", f"{row['ring']['time_us']:,.0f}",
             f"{row['pipelined']['time_us']:,.0f}", _paired(row["ring_ratio"]), _paired(row["pipelined_ratio"]),
             " · ".join(f"{row[impl]['slow_share']:.0%}" for impl in IMPLS)]
            for n, r in runs.items() for row in r.data["rows"]]
    return html_table(["N", "크기", "라이브러리 (μs)", "4장의 링 (μs)", "파이프라인 링 (μs)", "링 ÷ 라이브러리",
                       "파이프라인 ÷ 라이브러리", "느린 반복: 라이브러리 · 링 · 파이프라인"], rows,
                      caption="같은 크기에서 번갈아 잰 세 구현 (시간은 중앙값, 비율은 busbw의 비율 = 시간의 역비율의 "
                              f"쌍별 중앙값과 범위, {_RUN_NOTE})", wide_only=(2, 3, 4, 7))


def segment_table(runs: dict[int, LabResult]):
    """Rank 0's waiting and adding time per view of the ring timeline."""
    rows = [[n, size_label(line["bytes"]), TIMELINE_VIEWS[view], len(line["segments"]), size_label(line["segment_bytes"]),
             f"{line['total_us'] / 1e3:,.1f}", f"{line['wait_us'] / 1e3:,.1f}", f"{line['add_us'] / 1e3:,.1f}"]
            for n, r in runs.items() for view, line in r.data["timeline"].items()]
    return html_table(["N", "크기", "방식", "받은 세그먼트", "세그먼트 크기", "전체 (ms)", "기다림 합 (ms)", "더하기 합 (ms)"],
                      rows, caption=f"랭크 0이 All-Reduce 한 번 동안 세그먼트를 기다린 시간과 더한 시간의 합 ({_RUN_NOTE})")


def ddp_table(runs: dict[int, LabResult]):
    """One optimizer step's time and All-Reduce count per DDP variant."""
    model = next(iter(runs.values())).data["ddp"]
    rows = [[n, variant_label(row["variant"]), row["micro_steps"], f"{row['step_ms']:.1f}", row["all_reduce"],
             "—" if row["vs_manual"] is None else f"{row['vs_manual']:.2f}배", f"{row['efficiency']:.0%}"]
            for n, r in runs.items() for row in r.data["ddp"]["rows"]]
    return html_table(["N", "방식", "K", "스텝 (ms)", "All-Reduce 횟수", "수동 대비 시간", "효율 (계산 ÷ 스텝)"], rows,
                      caption=f"한 옵티마이저 스텝의 시간(중앙값)과 그 안의 All-Reduce 횟수 — 모델: 파라미터 "
                              f"{model['n_params']:,}개({model['model_bytes'] / 2**20:.1f} MiB), 파라미터 텐서 "
                              f"{model['n_tensors']}개 ({_RUN_NOTE})")
