"""Chapter 6 figures: DDP vs one-process learning curves, sample order per epoch, resume after a failure."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from ..result import LabResult
from . import WAITING_COLOR, html_table, rank_color

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


def ops_text(counts: dict[str, int]) -> str:
    """``{"all_reduce": 1, "broadcast": 2}`` -> ``"all_reduce 1번, broadcast 2번"`` (or ``"없음"``)."""
    return ", ".join(f"{op} {k}번" for op, k in sorted(counts.items()) if k) or "없음"


def phase_rows(result: LabResult) -> list[list[str]]:
    """(단계, 코드, 언제, 센 집합 통신) for each phase of the training script, from rank 0's counts."""
    p = result.data["phases"]
    steps = p["steps"]
    return [
        ["① 모델 복제", "make_ddp_model: DDP(model, ...)", "한 번", ops_text(p["construct"])],
        ["③–⑥ 학습 스텝 1", "train_one_epoch: 순전파, loss.backward(), optimizer.step()", "첫 스텝", ops_text(steps[0])],
        ["③–⑥ 학습 스텝 2", "같은 코드 (DDP가 버킷을 다시 짠다)", "둘째 스텝", ops_text(steps[1])],
        [f"③–⑥ 학습 스텝 {len(steps)} 이후", "같은 코드", "스텝마다", ops_text(steps[-1])],
        ["평가", "evaluate: 맞힌 수와 채점한 수", "에폭마다", ops_text(p["evaluate"])],
        ["로그 손실", "global_mean: 손실의 합과 개수", "에폭마다", ops_text(p["log"])],
        ["체크포인트", "save_checkpoint: 랭크 0이 쓰고 dist.barrier()", "에폭마다 (ckpt_dir를 주면)",
         ops_text(p["checkpoint"])],
    ]


def phase_table(result: LabResult):
    """The collectives of each phase of the training script, counted on real ranks."""
    return html_table(["단계", "코드", "언제", "집합 통신 (랭크 0, 프로파일러로 셈)"], phase_rows(result),
                      caption=f"학습 스크립트의 단계별 집합 통신 (N={result.world_size}, {result.backend})")


def run_total_text(result: LabResult) -> str:
    """One sentence: what the whole uninterrupted run issued, from rank 0's count."""
    d = result.data
    return (f"에폭 {d['epochs_trained']}개 × 스텝 {d['steps_per_epoch']}개를 학습한 실행 전체에서 랭크 0이 실행한 "
            f"집합 통신: {ops_text(d['run_collectives'])}")


def order_table(result: LabResult, k: int = 8):
    """Rank 0's first ``k`` sample indices per epoch, with and without ``set_epoch``."""
    rank0 = result.ranks[0]
    n_train = len(rank0["orders"][1]) * result.world_size
    return html_table(
        ["에폭", f"set_epoch(epoch) 호출: 처음 {k}개", f"호출하지 않음: 처음 {k}개"],
        [[e, rank0["orders"][e][:k], rank0["orders_without_set_epoch"][e - 1][:k]] for e in sorted(rank0["orders"])],
        caption=f"랭크 0의 DistributedSampler가 에폭마다 낸 순서 (학습 데이터 {n_train}개, N={result.world_size})")


def history_table(result: LabResult, lr: float):
    """Per-epoch global loss and test accuracy: DDP against the one-process reference."""
    n, batch = result.world_size, result.data["global_batch"]
    return html_table(
        ["에폭", f"DDP 손실 (N={n})", "한 프로세스 손실", "차이", "DDP 정확도", "한 프로세스 정확도"],
        [[d["epoch"], f"{d['loss']:.7f}", f"{r['loss']:.7f}", f"{d['loss'] - r['loss']:+.1e}",
          f"{d['correct']}/{d['total']}", f"{r['correct']}/{r['total']}"]
         for d, r in zip(result.data["summary"]["history"], result.data["reference_history"])],
        caption=f"에폭별 전역 평균 손실과 테스트 정확도 (B={batch}, 모멘텀 SGD, 학습률 {lr:g})")


def resume_table(resumed: dict, uninterrupted: dict, fail_at_epoch: int):
    """Per epoch: where the resumed run's record came from, and its loss against the uninterrupted run."""
    done = resumed["resumed_from"]
    return html_table(
        ["에폭", "재개한 실행의 기록", "재개한 실행 손실", "끊기지 않은 실행 손실", "차이"],
        [[a["epoch"], "첫 시도 (체크포인트에서 읽음)" if a["epoch"] <= done else "재시작 후 다시 학습",
          f"{a['loss']:.9f}", f"{b['loss']:.9f}", f"{a['loss'] - b['loss']:+.1e}"]
         for a, b in zip(resumed["history"], uninterrupted["history"])],
        caption=f"에폭 {fail_at_epoch} 중간에 랭크 {resumed['world_size'] - 1}이 죽은 뒤 재개한 실행과 "
                f"끊기지 않은 실행 (N={resumed['world_size']})")
