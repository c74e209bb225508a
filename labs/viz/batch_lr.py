"""Chapter 4.3 table and figure: the three batch/learning-rate regimes of the ``batch_lr`` lab per N."""

from __future__ import annotations

import plotly.graph_objects as go

from . import html_table, rank_color

REGIME_LABELS = {"fixed_global": "(가) B 고정 (b = B/N), η",
                 "fixed_per_rank": "(나) b 고정 (전역 배치 N·B), η 그대로",
                 "linear_scaled": "(다) b 고정, N·η + 워밍업"}


def regime_table(results):
    """One row per (N, regime): batches, peak η, steps per epoch, final loss and its ratio to one process."""
    rows = []
    for result in results:
        d, n = result.data, result.world_size
        single = d["single"]
        rows.append([n, "한 프로세스 (기준, DDP 없음)", "—", result.params["global_batch"], f"{result.params['lr']:g}",
                     single["steps_per_epoch"][-1], f"{single['curve'][-1]:.4f}", "1"])
        for regime, label in REGIME_LABELS.items():
            r = d["regimes"][regime]
            rows.append([n, label, r["per_rank_batch"], r["global_batch"], f"{r['peak_lr']:g}",
                         r["steps_per_epoch"][-1], f"{r['curve'][-1]:.4f}", f"{d['final_ratio'][regime]:.2f}"])
    epochs = results[0].params["epochs"]
    return html_table(["N", "방식", "랭크당 배치 b", "전역 배치", "학습률 (워밍업 뒤)", "에폭당 스텝",
                       f"{epochs}에폭 뒤 손실", "한 프로세스 대비"], rows,
                      caption=f"6장의 숫자 분류 과제를 SGD로 {epochs}에폭: 세 방식의 손실을 한 프로세스(배치 B, η)와 비교 "
                              "(랭크 0이 학습 데이터 전체로 잰 교차 엔트로피)")


def curves_figure(result) -> go.Figure:
    """Loss after each epoch, one process against the three regimes, for one run."""
    d, n = result.data, result.world_size
    epochs = list(range(len(d["single"]["curve"])))
    fig = go.Figure()
    fig.add_scatter(x=epochs, y=d["single"]["curve"], name="한 프로세스, 배치 B, η", mode="lines+markers",
                    line={"color": "#222", "dash": "dot"})
    for i, (regime, label) in enumerate(REGIME_LABELS.items()):
        fig.add_scatter(x=epochs, y=d["regimes"][regime]["curve"], name=f"N={n}, {label}", mode="lines+markers",
                        line={"color": rank_color(i + 1)})
    fig.update_layout(xaxis_title="에폭 (본 데이터 양)", yaxis_title="학습 데이터 전체의 손실 (교차 엔트로피)",
                      height=400, margin={"l": 60, "r": 20, "t": 30, "b": 50},
                      legend={"orientation": "h", "y": -0.25})
    return fig


def curves_alt(result) -> str:
    n = result.world_size
    return (f"에폭별 학습 손실. N={n}에서 전역 배치 B를 고정한 곡선은 한 프로세스 기준선과 겹치고, 랭크당 배치를 고정하고 "
            f"η를 그대로 둔 곡선은 덜 내려가며, 학습률을 {n}배로 키우고 워밍업한 곡선은 기준선에 가깝게 붙는다.")
