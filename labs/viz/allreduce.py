"""Chapter 4 figures and tables: the ring All-Reduce step by step (recorded), bytes per rank, results, and a cost calculator."""

from __future__ import annotations

import html
import json
import math

import plotly.graph_objects as go

from ..lessons.allreduce import contributors
from . import ANIMATE as _ANIMATE
from . import html_table, rank_color

# 몇 개 랭크의 값이 더해졌는지: 연한 파랑(자기 값뿐) → 진한 파랑(N−1개) → 초록(N개 모두, 완성)
_LIGHT, _DARK, _DONE = (232, 238, 246), (44, 74, 107), "#54A24B"


def _shade(count: int, n: int) -> float:
    """0 for one rank's value, 1 for N−1 ranks' values (the darkest partial sum)."""
    return (count - 1) / max(n - 2, 1)


def _count_color(count: int, n: int) -> str:
    if count >= n:
        return _DONE
    t = _shade(count, n)
    return "#" + "".join(f"{round(a + (b - a) * t):02X}" for a, b in zip(_LIGHT, _DARK))


def _text_color(count: int, n: int) -> str:
    return "white" if count >= n or _shade(count, n) > 0.55 else "#1f2a36"


def _ring_layout(n: int) -> tuple[list[tuple[float, float]], float]:
    """Centre of each rank's row of chunk boxes, clockwise from the top, and the box spacing."""
    radius = 1.0 if n > 1 else 0.0
    angles = [math.pi / 2 - 2 * math.pi * r / n for r in range(n)]
    centres = [(radius * math.cos(a), radius * math.sin(a)) for a in angles]
    return centres, min(0.3, 1.4 / max(n, 1))


def _box_positions(n: int) -> tuple[list[float], list[float]]:
    """Centres of the (rank, chunk) boxes, rank-major."""
    centres, step = _ring_layout(n)
    xs, ys = [], []
    for cx, cy in centres:
        for c in range(n):
            xs.append(cx + (c - (n - 1) / 2) * step)
            ys.append(cy)
    return xs, ys


def _box_height(per_chunk: int) -> float:
    return 0.1 + 0.1 * per_chunk


def _chunk_text(values: list[float], chunk: int, per_chunk: int) -> str:
    return "<br>".join(f"{v:.0f}" for v in values[chunk * per_chunk:(chunk + 1) * per_chunk])


def _state_style(ranks: list[dict], index: int, per_chunk: int) -> tuple[dict, list[dict]]:
    """After recorded step ``index``: the text trace's values and hover text, and the box shapes
    (fill = how many ranks' values a chunk holds, thick outline = the chunk just received)."""
    n = len(ranks)
    xs, ys = _box_positions(n)
    half_w, half_h = _ring_layout(n)[1] * 0.46, _box_height(per_chunk) / 2
    text, font_colors, hover, shapes = [], [], [], []
    for r in ranks:
        state = r["demo_states"][index]
        for c in range(n):
            element = c * per_chunk
            who = contributors(state["values"][element], element, n)
            count = len(who)
            i = r["rank"] * n + c
            text.append(_chunk_text(state["values"], c, per_chunk))
            font_colors.append(_text_color(count, n))
            names = ", ".join(map(str, who)) if n <= 9 else f"{count}개"
            hover.append(f"랭크 {r['rank']} · 청크 {c} = {text[-1].replace('<br>', ', ')}<br>들어 있는 값: 랭크 {names}")
            shapes.append({"type": "rect", "xref": "x", "yref": "y", "layer": "below",
                           "x0": xs[i] - half_w, "x1": xs[i] + half_w, "y0": ys[i] - half_h, "y1": ys[i] + half_h,
                           "fillcolor": _count_color(count, n),
                           "line": {"color": "#1f2a36", "width": 4 if c == state["received"] else 1}})
    return {"text": text, "hovertext": hover, "textfont": {"color": font_colors, "size": 12}}, shapes


def _arrows(ranks: list[dict], index: int, per_chunk: int) -> list[dict]:
    """One arrow per rank: the chunk it sent to its right neighbour in recorded step ``index``."""
    n = len(ranks)
    xs, ys = _box_positions(n)
    lift = _box_height(per_chunk) / 2
    arrows = []
    for r in ranks:
        sent = r["demo_states"][index]["sent"]
        if sent is None:
            continue
        src, dst = r["rank"] * n + sent, ((r["rank"] + 1) % n) * n + sent
        # 화살표는 상자 가장자리에서 출발해 받는 상자 가장자리에서 끝난다 (숫자를 가리지 않게)
        sy = ys[src] + (lift if ys[dst] > ys[src] else -lift if ys[dst] < ys[src] else 0)
        dy = ys[dst] + (-lift if ys[dst] > ys[src] else lift if ys[dst] < ys[src] else 0)
        arrows.append({"x": xs[dst], "y": dy, "ax": xs[src], "ay": sy, "xref": "x", "yref": "y",
                       "axref": "x", "ayref": "y", "showarrow": True, "arrowhead": 3, "arrowsize": 1.2,
                       "arrowwidth": 2.5, "arrowcolor": rank_color(r["rank"]), "text": ""})
    return arrows


def _step_title(state: dict, n: int) -> tuple[str, str]:
    if state["phase"] == "start":
        return "시작", f"시작: 랭크마다 자기 텐서를 N={n}개 청크로 나눈다 (숫자의 각 자리 = 그 랭크의 값)"
    s = state["step"] + 1
    if state["phase"] == "reduce-scatter":
        return f"RS {s}", f"Reduce-Scatter {s}/{n - 1}: 청크 하나를 오른쪽 이웃에 보내고, 받은 청크에 내 값을 더한다"
    return f"AG {s}", f"All-Gather {s}/{n - 1}: 완성된 합을 오른쪽 이웃에 넘기면 이웃은 그대로 덮어쓴다"


def ring_steps_figure(ranks: list[dict], per_chunk: int) -> go.Figure:
    """The ring All-Reduce recorded on real ranks: one frame per step, slider and play button.

    Ranks sit clockwise on a circle; each shows its N chunks as boxes with the (partial) sums
    it held after that step. Colour = how many ranks' values a chunk contains; the thick
    outline marks the chunk just received; arrows show what every rank sent.
    """
    n = len(ranks)
    xs, ys = _box_positions(n)
    centres, step = _ring_layout(n)
    half_h = _box_height(per_chunk) / 2
    style, shapes = _state_style(ranks, 0, per_chunk)
    values = go.Scatter(x=xs, y=ys, mode="text", hoverinfo="text", showlegend=False, **style)
    labels = go.Scatter(x=[cx for cx, _ in centres], y=[cy + half_h + 0.1 for _, cy in centres], mode="text",
                        text=[f"<b>랭크 {r}</b>" for r in range(n)], hoverinfo="skip", showlegend=False,
                        textfont={"color": [rank_color(r) for r in range(n)], "size": 14})
    chunk_ids = go.Scatter(x=xs, y=[y - half_h - 0.07 for y in ys], mode="text",
                           text=[f"청크 {i % n}" for i in range(n * n)],
                           textfont={"size": 10, "color": "#5f6b7a"}, hoverinfo="skip", showlegend=False)
    legend = [go.Scatter(x=[None], y=[None], mode="markers", name=("N개 모두(완성)" if k == n else f"랭크 {k}개의 값"),
                         marker={"symbol": "square", "size": 14, "color": _count_color(k, n),
                                 "line": {"color": "#1f2a36", "width": 1}}) for k in range(1, n + 1)]
    fig = go.Figure([values, labels, chunk_ids, *legend])
    states = ranks[0]["demo_states"]
    names, frames = [], []
    for index, state in enumerate(states):
        name, title = _step_title(state, n)
        style, frame_shapes = _state_style(ranks, index, per_chunk)
        names.append(name)
        frames.append(go.Frame(name=name, data=[go.Scatter(**style)], traces=[0],
                               layout={"title": {"text": title}, "shapes": frame_shapes,
                                       "annotations": _arrows(ranks, index, per_chunk)}))
    fig.frames = frames
    radius = 1.0 if n > 1 else 0.0
    span_x = radius + n / 2 * step + 0.1
    fig.update_layout(
        height=620, margin={"l": 10, "r": 10, "t": 80, "b": 130},
        title={"text": _step_title(states[0], n)[1], "font": {"size": 14}},
        shapes=shapes,
        xaxis={"visible": False, "range": [-span_x, span_x], "fixedrange": True},
        yaxis={"visible": False, "range": [-radius - half_h - 0.2, radius + half_h + 0.25], "fixedrange": True,
               "scaleanchor": "x"},
        legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": 1.02, "yanchor": "bottom",
                "font": {"size": 11}},
        plot_bgcolor="rgba(0,0,0,0)", paper_bgcolor="rgba(0,0,0,0)",
        updatemenus=[{"type": "buttons", "direction": "left", "x": 0.0, "y": -0.02, "xanchor": "left", "yanchor": "top",
                      "buttons": [
                          {"label": "▶ 재생", "method": "animate", "args": [names, {**_ANIMATE, "fromcurrent": False}]},
                          {"label": "멈춤", "method": "animate",
                           "args": [[None], {"mode": "immediate", "frame": {"duration": 0, "redraw": False}}]},
                      ]}],
        sliders=[{"active": 0, "x": 0.0, "len": 1.0, "y": -0.1, "yanchor": "top", "pad": {"t": 10},
                  "currentvalue": {"prefix": "단계: ", "font": {"size": 13}},
                  "steps": [{"label": name, "method": "animate", "args": [[name], _ANIMATE]} for name in names]}],
    )
    return fig


def bytes_figure(ranks: list[dict], ring_theory: float, size_bytes: int) -> go.Figure:
    """Bytes each rank sent: naive and ring counted by our own sends, gloo's counted by the OS."""
    n = len(ranks)
    labels = [f"랭크 {r['rank']}" for r in ranks]
    mb = 1e6
    series = [("단순 방식 (직접 센 값)", "naive", "sent", "#E45756"),
              ("링 (직접 센 값)", "ring", "sent", "#4C78A8"),
              ("gloo all_reduce (운영체제가 센 값)", "library", "os_written", "#54A24B")]
    bars = []
    for name, impl, key, color in series:
        values = [r[impl][key] for r in ranks]
        if any(v is None for v in values):
            continue
        bars.append(go.Bar(x=labels, y=[v / mb for v in values], name=name, marker_color=color,
                           text=[f"{v / mb:.2f}" for v in values], textposition="outside",
                           hovertemplate="%{x} · " + name + ": %{y:.3f} MB<extra></extra>"))
    fig = go.Figure(bars)
    for y, text, color, dash in ((ring_theory, "링 이론값<br>2(N−1)/N·S", "#4C78A8", "dash"),
                                 ((n - 1) * size_bytes, "랭크 0 이론값<br>(N−1)·S", "#E45756", "dot")):
        fig.add_hline(y=y / mb, line_dash=dash, line_color=color)
        fig.add_annotation(x=1.0, xref="paper", xanchor="left", y=y / mb, yanchor="middle", showarrow=False,
                           text=f"{text}<br>= {y / mb:.2f} MB", font={"size": 11, "color": color}, align="left")
    fig.update_layout(
        height=420, barmode="group", margin={"l": 10, "r": 120, "t": 60, "b": 10},
        title={"text": f"랭크마다 보낸 바이트 (S = {size_bytes / mb:.2f} MB, N = {n})", "font": {"size": 15}},
        yaxis={"title": {"text": "보낸 양 (MB)"}, "range": [0, (max(n - 1, 1) * size_bytes / mb) * 1.25]},
        legend={"orientation": "h", "x": 0.0, "y": -0.12, "yanchor": "top"},
        paper_bgcolor="rgba(0,0,0,0)",
    )
    return fig


IMPLEMENTATION_LABELS = {"library": "(1) dist.all_reduce", "naive": "(2) 랭크 0에 모으기", "ring": "(3) 링 (직접 구현)"}
MB = 1e6


def bytes_alt(result) -> str:
    """The bytes figure's alt text, with the sizes of this run."""
    n, size = result.world_size, result.data["size_bytes"]
    return (f"랭크 {n}개가 보낸 바이트 막대그래프. 단순 방식은 랭크 0만 {result.ranks[0]['naive']['sent'] / MB:.3g} MB로 "
            f"튀고 나머지는 {size / MB:.3g} MB, 링과 gloo는 모든 랭크가 이론값 2(N−1)/N·S = "
            f"{result.data['ring_theory_bytes'] / MB:.3g} MB에 맞는다.")


def gradient_table(result):
    """Per rank: how far g_i, the mean of the g_i and their sum are from the global batch's gradient."""
    return html_table(
        ["랭크", "max |g_i − ∇L|", "max |(1/N)Σg_i − ∇L|", "‖Σg_i‖ / ‖∇L‖"],
        [[r["rank"], f"{r['grad_local_vs_global']:.3e}", f"{r['grad_mean_vs_global']:.3e}",
          f"{r['grad_sum_norm_ratio']:.6f}"] for r in result.ranks],
        caption=(f"랭크별 그래디언트 비교 (N={result.world_size}, B/N={result.data['per_rank_batch']}, "
                 f"그래디언트의 최대 크기 {result.ranks[0]['grad_global_max']:.3f})"))


def implementations_table(result):
    """The three implementations: agreement, error, rank 0's bytes and the median time."""
    rank0 = result.ranks[0]
    return html_table(
        ["구현", "(1)과의 최대 차이", "정확한 평균과의 최대 오차", "랭크 0이 보낸 바이트", "랭크 0이 받은 바이트", "시간 (중앙값)"],
        [[label, f"{max(r[impl]['max_diff_vs_library'] for r in result.ranks):.2e}",
          f"{result.data['max_error'][impl]:.2e}",
          f"{rank0[impl]['sent']:,}" if impl != "library" else "(C++ 안에서 보냄)",
          f"{rank0[impl]['received']:,}" if impl != "library" else "—",
          f"{result.data['seconds'][impl] * 1e3:.1f} ms"] for impl, label in IMPLEMENTATION_LABELS.items()],
        caption=f"같은 텐서(S = {result.data['size_bytes']:,} 바이트)를 세 방법으로 평균한 결과 (N={result.world_size})")


def bytes_table(result):
    """Bytes each rank sent: counted by our sends, computed from chunk sizes, the formula, and the OS."""
    theory = result.data["ring_theory_bytes"]
    return html_table(
        ["랭크", "링: 직접 센 값", "링: 청크 크기로 계산", "링: 2(N−1)/N·S", "gloo all_reduce: 운영체제가 센 값",
         "단순 방식: 보냄 / 받음"],
        [[r["rank"], f"{r['ring']['sent']:,}", f"{exact:,}", f"{theory:,.1f}",
          f"{r['library']['os_written']:,}" if r["library"]["os_written"] is not None else "측정 불가",
          f"{r['naive']['sent']:,} / {r['naive']['received']:,}"]
         for r, exact in zip(result.ranks, result.data["ring_exact_bytes"])],
        caption=f"랭크별로 보낸 바이트 (S = {result.data['size_bytes']:,} 바이트, N = {result.world_size})")


def single_rank_table(result):
    """N = 1: what each implementation sent, what the OS saw, and the difference from the input."""
    r = result.ranks[0]
    return html_table(
        ["구현", "보낸 바이트 (직접 셈)", "소켓에 쓴 바이트 (운영체제)", "입력과의 최대 차이"],
        [[label, r[impl]["sent"], r[impl]["os_written"], f"{result.data['max_error'][impl]:.1e}"]
         for impl, label in IMPLEMENTATION_LABELS.items()],
        caption="N = 1: 통신 없이 자기 텐서가 그대로 평균이다")


def calculator_style(div_id: str) -> str:
    """The ``<style>`` of an inline calculator whose root element has id ``div_id`` (theme colours)."""
    return (
        "<style>"
        f"#{div_id}{{border:1px solid var(--pst-color-border,#ccc);border-radius:.5rem;"
        f"padding:.75rem 1rem;margin:1rem 0}}"
        f"#{div_id} label{{display:inline-flex;flex-direction:column;margin:.2rem .8rem .4rem 0;font-size:.9rem}}"
        f"#{div_id} input,#{div_id} select{{width:9rem;padding:.2rem .3rem;font:inherit;"
        f"color:var(--pst-color-text-base,#222);background:var(--pst-color-background,#fff);"
        f"border:1px solid var(--pst-color-border,#bbb);border-radius:.3rem}}"
        f"#{div_id} table{{border-collapse:collapse;margin-top:.5rem}}"
        f"#{div_id} td,#{div_id} th{{padding:.25rem .6rem;text-align:left;"
        f"border-bottom:1px solid var(--pst-color-border,#ddd)}}"
        f"#{div_id} td{{white-space:nowrap}}"
        f"#{div_id} .bar{{height:.8rem;border-radius:.2rem;display:inline-block;vertical-align:middle}}"
        "</style>"
    )


def cost_calculator(div_id: str, world_size: int = 8, params_millions: float = 25.6, bytes_per_value: int = 4,
                    bandwidth_gbs: float = 12.5, latency_us: float = 20.0):
    """A self-contained HTML+JS calculator (no kernel, no network): ring vs naive time per step.

    Model: every message costs α plus its bytes over the bandwidth. Ring: 2(N−1) steps, each
    sending S/N while receiving S/N at the same time. Naive: rank 0 receives (N−1) whole
    tensors, then sends (N−1), one after another.
    """
    from IPython.display import HTML

    ids = {k: f"{div_id}-{k}" for k in ("n", "p", "dtype", "bw", "alpha", "out")}
    dtype_options = "".join(
        f'<option value="{b}"{" selected" if b == bytes_per_value else ""}>{html.escape(label)}</option>'
        for b, label in ((4, "float32 (4바이트)"), (2, "bfloat16/float16 (2바이트)")))
    body = (
        f'<div id="{div_id}" class="ddp-calculator" role="group" aria-label="All-Reduce 통신 시간 계산기">'
        f'<p><strong>All-Reduce 통신 시간 계산기</strong> — 값을 바꾸면 바로 다시 계산합니다.</p>'
        f'<label>N (랭크 수)<input id="{ids["n"]}" type="number" min="1" max="4096" step="1" value="{world_size}"></label>'
        f'<label>모델 파라미터 수 (백만 개)<input id="{ids["p"]}" type="number" min="0" step="any" '
        f'value="{params_millions}"></label>'
        f'<label>그래디언트 자료형<select id="{ids["dtype"]}">{dtype_options}</select></label>'
        f'<label>대역폭 BW (GB/s)<input id="{ids["bw"]}" type="number" min="0.001" step="any" '
        f'value="{bandwidth_gbs}"></label>'
        f'<label>지연 시간 α (μs)<input id="{ids["alpha"]}" type="number" min="0" step="any" value="{latency_us}"></label>'
        f'<div id="{ids["out"]}" aria-live="polite"></div></div>'
    )
    script = _CALCULATOR_JS.replace("__IDS__", json.dumps(ids))
    return HTML(f"{calculator_style(div_id)}{body}<script>{script}</script>")


_CALCULATOR_JS = """
(function () {
  // 링: t = 2(N-1)/N * S/BW + 2(N-1)α,  단순 방식(랭크 0 병목): t = 2(N-1) * S/BW + 2(N-1)α
  var ids = __IDS__;
  function num(id) { var v = parseFloat(document.getElementById(ids[id]).value); return isFinite(v) ? v : 0; }
  function fmtBytes(b) { return b >= 1e9 ? (b / 1e9).toFixed(2) + " GB" : (b / 1e6).toFixed(2) + " MB"; }
  function fmtTime(s) { return s >= 1 ? s.toFixed(2) + " s" : (s * 1e3).toFixed(2) + " ms"; }
  function row(name, sent, received, t, max, color) {
    var w = max > 0 ? Math.max(1, Math.round(200 * t / max)) : 1;
    return "<tr><th scope='row'>" + name + "</th><td>" + fmtBytes(sent) + "</td><td>" + fmtBytes(received) +
      "</td><td>" + fmtTime(t) + "</td><td><span class='bar' style='width:" + w + "px;background:" + color +
      "'></span></td></tr>";
  }
  function update() {
    var n = Math.max(1, Math.round(num("n"))), s = num("p") * 1e6 * num("dtype");
    var bw = Math.max(num("bw"), 1e-9) * 1e9, alpha = num("alpha") * 1e-6;
    var ringBytes = 2 * (n - 1) / n * s, rootBytes = (n - 1) * s;
    // 링은 보내기와 받기가 동시에 일어나고, 단순 방식의 랭크 0은 다 받은 뒤에 보낸다
    var tRing = ringBytes / bw + 2 * (n - 1) * alpha, tNaive = 2 * rootBytes / bw + 2 * (n - 1) * alpha;
    var max = Math.max(tRing, tNaive);
    document.getElementById(ids.out).innerHTML =
      "<p>그래디언트 크기 S = " + fmtBytes(s) + (n === 1 ? " · N=1이면 통신이 없습니다." : "") + "</p>" +
      "<table><thead><tr><th scope='col'>방식</th><th scope='col'>랭크 0이 보내는 양</th>" +
      "<th scope='col'>랭크 0이 받는 양</th><th scope='col'>스텝당 통신 시간</th><th scope='col'>비교</th></tr></thead><tbody>" +
      row("링 All-Reduce (보내기·받기 동시)", ringBytes, ringBytes, tRing, max, "#4C78A8") +
      row("단순 방식 (랭크 0이 다 받은 뒤 보냄)", rootBytes, rootBytes, tNaive, max, "#E45756") +
      "</tbody></table><p>단순 방식 ÷ 링 = " + (tRing > 0 ? (tNaive / tRing).toFixed(1) + "배" : "—") + "</p>";
  }
  ["n", "p", "dtype", "bw", "alpha"].forEach(function (k) {
    var el = document.getElementById(ids[k]);
    el.addEventListener("input", update);
    el.addEventListener("change", update);
  });
  update();
})();
"""
