"""Chapter 5 figures: parameter trajectories per rank, with and without gradient synchronization."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from . import html_table, rank_color

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


def fingerprint_table(result):
    """Rank 0's fingerprint and the number of distinct fingerprints over the ranks, per step (SGD, Adam)."""
    distinct = result.data["distinct_fingerprints"]
    rank0 = result.ranks[0]
    return html_table(
        ["스텝", "SGD: 랭크 0의 지문", "SGD: 지문 종류 수", "Adam: 랭크 0의 지문", "Adam: 지문 종류 수"],
        [[s, rank0["sgd"]["fingerprints"][s], distinct["sgd"][s], rank0["adam"]["fingerprints"][s], distinct["adam"][s]]
         for s in range(len(distinct["sgd"]))],
        caption=f"스텝별 파라미터 지문 (N={result.world_size}, 스텝 0 = 학습 전)")


def collective_calls(result, run: str, where: str) -> dict[str, int]:
    """Collectives of one run, summed over ranks and steps: ``where`` is train_collectives or step_collectives."""
    counts: dict[str, int] = {}
    for r in result.ranks:
        for step in r[run][where]:
            for op, k in step.items():
                counts[op] = counts.get(op, 0) + k
    return dict(sorted(counts.items()))


def _calls_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{op} {k}회" for op, k in counts.items()) or "없음"


def collectives_table(result):
    """Which collectives ran inside forward+backward and inside ``optimizer.step()``, per run."""
    steps = len(result.ranks[0]["sgd"]["step_collectives"])
    return html_table(
        ["실행", "순전파·역전파 안의 집합 통신", "optimizer.step() 안의 집합 통신"],
        [[label, _calls_text(collective_calls(result, run, "train_collectives")),
          _calls_text(collective_calls(result, run, "step_collectives"))]
         for run, label in (("sgd", "SGD (DDP)"), ("adam", "Adam (DDP)"), ("no_sync", "SGD, no_sync()"))],
        caption=f"랭크 {result.world_size}개 × {steps}스텝 동안 프로세스 그룹이 실행한 집합 통신 (프로파일러로 측정)")


def spread_table(result):
    """Per step, the largest |w_rank − w_rank0| over all parameters, for the three runs."""
    spread = result.data["spread"]
    return html_table(
        ["스텝", "DDP SGD: 랭크 간 최대 차이", "DDP Adam: 랭크 간 최대 차이", "no_sync SGD: 랭크 간 최대 차이"],
        [[s, f"{spread['sgd'][s]:.3g}", f"{spread['adam'][s]:.3g}", f"{spread['no_sync'][s]:.3g}"]
         for s in range(len(spread["sgd"]))],
        caption="스텝별로 모든 파라미터에서 잰 max |w_랭크 − w_랭크0|")


def equivalence_table(runs: dict):
    """DDP (N ranks × B/N) against one process (B) for each N in ``runs`` ({N: LabResult})."""
    first = next(iter(runs.values()))
    batch = first.data["per_rank_batch"] * first.world_size
    return html_table(
        ["N", "B/N", "최대 파라미터 차이", "최대 그래디언트 차이", "허용 오차", "스텝별 파라미터 차이"],
        [[n, r.data["per_rank_batch"], f"{r.data['max_param_diff']:.3g}", f"{r.data['max_grad_diff']:.3g}",
          f"{r.data['tolerance']:.3g}", ", ".join(f"{d:.1e}" for d in r.data["param_diff_per_step"])]
         for n, r in runs.items()],
        caption=f"DDP(N개 랭크 × B/N) 대 한 프로세스(B개)의 최대 절대 차이, 전역 배치 B = {batch}, "
                f"SGD {len(first.data['param_diff_per_step'])}스텝")


def sum_orders_table(sums: dict[int, float], exact: float):
    """The same values summed in float32 in k chunks, against the float64 sum."""
    return html_table(
        ["나눈 묶음 수 k", "float32 합", "float64 합과의 차이"],
        [[k, f"{s:.6f}", f"{s - exact:+.2e}"] for k, s in sums.items()] + [["(float64 기준)", f"{exact:.6f}", "0"]],
        caption="같은 10만 개를 다른 순서로 더한 float32 합")
