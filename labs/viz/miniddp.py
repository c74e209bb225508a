"""Chapter 9 figures and tables: the staircase of a from-scratch DDP and the bug gallery (all recorded)."""

from __future__ import annotations

import plotly.graph_objects as go

from . import html_table

ALLREDUCE_COLOR = "#F58518"
BACKWARD_COLOR = "#4C78A8"
FONT = {"family": "Noto Sans CJK KR, Noto Sans KR, sans-serif"}
STEP_LABELS = {"single": "0. 단일 프로세스", "naive": "1. 단순", "flat": "2. 평탄화", "overlap": "3. 겹치기",
               "buckets": "4. 버킷", "forward": "4′. 버킷(순전파 순서)", "ddp": "torch DDP"}
STEP_NOTES = {"single": "전역 배치 B를 한 프로세스가", "naive": "역전파 뒤 파라미터마다 all_reduce",
              "flat": "역전파 뒤 한 버퍼로 한 번", "overlap": "훅에서 파라미터마다 비동기로",
              "buckets": "역순으로 채운 버킷이 차면 비동기로", "forward": "갤러리의 버그: 순전파 순서로 채움",
              "ddp": "같은 bucket_cap_mb"}


def timeline_figure(rank: dict, variants: list[str]) -> go.Figure:
    """One iteration per step, in ms from the call of ``backward()``: the span in which gradients
    became ready (blue), each All-Reduce from launch to finish (orange), and where
    ``finish_gradient_synchronization()`` returned (black tick). Rows top to bottom follow ``variants``."""
    ms = 1000.0
    fig = go.Figure()
    rows = [STEP_LABELS[v] for v in variants]
    for v, row in zip(variants, rows):
        line = rank["timelines"][v]
        fig.add_trace(go.Bar(orientation="h", y=[row], base=[0.0], x=[max(line["ready"]) * ms], width=0.7,
                             marker_color=BACKWARD_COLOR, opacity=0.35, showlegend=v == variants[0],
                             name="역전파(그래디언트가 준비되는 구간)", legendgroup="backward",
                             hovertemplate=f"{row}: 역전파 0 → %{{x:.2f}} ms<extra></extra>"))
        calls = line["calls"]
        if calls:
            fig.add_trace(go.Bar(orientation="h", y=[row] * len(calls), base=[c["launch"] * ms for c in calls],
                                 x=[max(c["done"] - c["launch"], 0.0) * ms for c in calls], width=0.35,
                                 marker_color=ALLREDUCE_COLOR, marker_line={"color": "#7f3f00", "width": 0.5},
                                 name="All-Reduce(시작 → 끝)", legendgroup="comm", showlegend=v == "naive",
                                 hovertemplate=[f"{row}: All-Reduce {i + 1} 시작 {c['launch'] * ms:.2f} → "
                                                f"끝 {c['done'] * ms:.2f} ms<extra></extra>" for i, c in enumerate(calls)]))
    fig.add_trace(go.Scatter(x=[rank["timelines"][v]["finish_end"] * ms for v in variants], y=rows, mode="markers",
                             marker={"symbol": "line-ns-open", "size": 22, "color": "#202124", "line": {"width": 3}},
                             name="동기화 끝(optimizer.step() 가능)",
                             hovertemplate="%{y}: 동기화 끝 %{x:.2f} ms<extra></extra>"))
    fig.update_layout(
        barmode="overlay", height=90 + 52 * len(variants), font=FONT, paper_bgcolor="rgba(0,0,0,0)",
        margin={"l": 10, "r": 10, "t": 70, "b": 40},
        title={"text": f"랭크 {rank['rank']}의 한 반복: 통신이 역전파와 겹치기 시작하는 단계", "font": {"size": 15}},
        xaxis={"title": {"text": "backward() 호출부터의 시간 (ms)"}, "rangemode": "tozero"},
        yaxis={"autorange": "reversed", "type": "category"},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0})
    return fig


def staircase_table(result):
    """Calls, step time (median and range over the interleaved repeats), differences after K steps."""
    d = result.data
    rows = [[STEP_LABELS[r["variant"]], STEP_NOTES[r["variant"]], r["calls"],
             f"{r['median_ms']:.2f} ({r['min_ms']:.2f}–{r['max_ms']:.2f})",
             f"{r['diff_ddp']:.1e}", f"{r['diff_single']:.1e}", "예" if r["overlap"] else "아니오"]
            for r in d["rows"]]
    return html_table(["단계", "방법", "All-Reduce/반복", "스텝 시간 ms: 중앙값 (최소–최대)",
                       "torch DDP와 최대 차이", "단일 프로세스와 최대 차이", "역전파와 겹침"], rows,
                      caption=f"N={result.world_size} ({result.backend}), 텐서 {d['n_tensors']}개 · "
                              f"{d['total_bytes'] / 1024:.0f} KiB, 반복 {d['repeats']}번을 번갈아 잰 값, "
                              f"{result.params['steps']}스텝 뒤의 파라미터 차이")


def gallery_table(result, bugs: dict, diagnosis, failed_checks):
    """One row per bug: the check that must catch it, the grader's diagnosis, and the measured symptom."""
    rows = []
    for cls in result.data["classes"]:
        name = cls["name"]
        cause = diagnosis(result, name)
        check = result.checks[f"{name}.{cause}"] if cause else None
        symptom = cls["mismatch"] or cls["errors"].get("frozen") or (
            "" if check is None else str(check.value if not isinstance(check.value, float) else f"{check.value:.2e}"))
        rows.append([name, bugs[name], cause or "(통과)", "○" if cause == bugs[name] else "×",
                     symptom[:140], ", ".join(sorted(failed_checks(result, name)))])
    return html_table(["버그", "잡아야 할 확인", "채점기의 진단", "일치", "측정된 증상", "실패한 확인 전체"], rows,
                      caption=f"버그 갤러리를 실제 랭크 N={result.world_size} ({result.backend})에서 채점한 결과",
                      wide_only=(1, 5))
