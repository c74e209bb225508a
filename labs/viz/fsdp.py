"""Chapter 13 FSDP figures and tables: what one rank stores, the gathers and frees of one step, the
collectives of a step, torch's fully_shard next to the reader's FullyShardedDP, and the mistakes."""

from __future__ import annotations

import plotly.graph_objects as go

from ..ddp.fsdp_bugs import BUGS
from . import html_table
from .zero import failed_checks, kib

EVENT_LABELS = {"gather_forward": "모음(순)", "free_forward": "버림(순)", "gather_backward": "모음(역)",
                "free_backward": "버림(역)"}
# 13.4절의 실수: fsdp 실습의 mistake= 값 → 무엇을 잘못하는가 (갤러리의 표 labs/ddp/fsdp_bugs.py의 BUGS와, 인자로 만드는 실수)
MISTAKES = {**{bug.mistake: bug.claim for bug in BUGS.values() if bug.mistake},
            "shard_by_class": "나눌 층을 클래스(nn.Linear, nn.Embedding)로 고른다: 직접 만든 선형 층의 모델"}
# 표에 쓰는 짧은 주장 (확인의 전체 설명은 접힌 확인 표에 있다)
CLAIMS = {
    "backward_completes": "역전파가 끝난다",
    "timeline_gather_free_order": "층마다 모으고 버리는 순서",
    "peak_one_layer": "한 번에 한 층만 모여 있다",
    "matches_single": "한 프로세스와 같다",
    "adamw_matches_ddp": "AdamW가 DDP와 같다",
    "matches_torch_fsdp": "fully_shard와 같다",
    "gathers_twice_per_step": "스텝마다 두 번 모은다",
    "reduction_carries_the_gradients": "그래디언트를 줄이는 통신량",
    "bf16_grads_stored_fp32": ".grad가 float32다",
    "bf16_communication": "통신이 bfloat16이다",
    "bf16_close_to_fp32": "bfloat16 결과가 float32에 가깝다",
    "params_shard_bytes": "랭크마다 샤드만 저장한다",
    "every_matrix_sharded": "모든 가중치 행렬을 나눈다",
    "sharded_norm_matches_single": "그래디언트 노름이 한 프로세스와 같다",
    "plain_clip_norm_is_local": "clip_grad_norm_의 노름이 랭크마다 다르다",
}


def memory_table(runs: dict):
    """One row per N: parameter bytes rank 0 stores under DDP, FullyShardedDP (at rest and at its peak), fully_shard."""
    rows = []
    for n, result in sorted(runs.items()):
        held = result.data["params_bytes"]
        rows.append([n, kib(held["ddp"]), kib(held["ours"]), kib(result.data["peak_bytes"]), kib(held["torch"]),
                     f"{held['ours'] / held['ddp']:.0%}"])
    first = next(iter(runs.values())).data
    return html_table(["N", "DDP", "FullyShardedDP: 저장", "FullyShardedDP: 한 스텝의 최대", "fully_shard: 저장",
                       "저장 ÷ DDP"], rows,
                      caption=f"랭크 0의 파라미터 바이트 (Linear {first['depth']}층, 파라미터 {first['n_params']:,}개, "
                              "스토리지 크기로 셈, 실제 실행)")


def timeline_figure(result) -> go.Figure:
    """Live parameter bytes after each hook of one training step on rank 0, against DDP's constant bytes."""
    timeline = result.data["timeline"]
    labels = [f"{i + 1}. 층{layer} {EVENT_LABELS[kind]}" for i, (kind, layer, _) in enumerate(timeline)]
    ddp = result.data["params_bytes"]["ddp"]
    fig = go.Figure([
        go.Scatter(x=labels, y=[ddp] * len(labels), name="DDP (언제나 전체)", mode="lines",
                   line={"color": "#9AA0A6", "dash": "dash"}, hovertemplate="DDP: %{y:,}바이트<extra></extra>"),
        go.Scatter(x=labels, y=[alive for _, _, alive in timeline], name="FullyShardedDP", mode="lines+markers",
                   line={"color": "#4C78A8", "shape": "hv"},
                   hovertemplate="%{x}<br>살아 있는 파라미터: %{y:,}바이트<extra></extra>"),
    ])
    fig.update_layout(
        title=f"한 스텝 동안 살아 있는 파라미터 바이트 (랭크 0, N={result.world_size}, 실제 실행)",
        height=380, margin={"l": 10, "r": 10, "t": 30, "b": 10}, paper_bgcolor="rgba(0,0,0,0)",
        yaxis={"title": "바이트", "rangemode": "tozero"}, xaxis={"tickangle": -45},
        legend={"orientation": "h", "x": 0.5, "xanchor": "center", "y": 1.02, "yanchor": "bottom"},
    )
    return fig


def _step_text(items: list[dict]) -> str:
    """The collectives in order, runs of the same op and size folded: ``all_gather 512×5 → all_reduce 1,024``."""
    runs: list[list] = []
    for item in items:
        if runs and runs[-1][:2] == [item["op"], item["numel"]]:
            runs[-1][2] += 1
        else:
            runs.append([item["op"], item["numel"], 1])
    return " → ".join(f"{op} {numel:,}" + (f"×{count}" if count > 1 else "") for op, numel, count in runs)


def comms_table(result):
    """One training step on rank 0: the collectives of FullyShardedDP, fully_shard and DDP, as the counter saw them."""
    ranks = result.ranks[0]["sgd"]
    rows = [["FullyShardedDP", _step_text(ranks["ours"]["steps"][0])],
            ["fully_shard", _step_text(ranks["torch"]["steps"][0])],
            ["DDP", _step_text(ranks["ddp"]["steps"][0])]]
    return html_table(["방식", "한 스텝의 집합 통신, 순서대로 (이름, 작업 항목의 첫 입력 원소 수 × 횟수)"], rows,
                      caption=f"첫 스텝의 집합 통신 (N={result.world_size}, gloo, 집합 통신 카운터, 실제 실행)")


def torch_table(runs: dict):
    """One row per N: how far FullyShardedDP and fully_shard end from one process and from each other."""
    rows = []
    for n, result in sorted(runs.items()):
        d = result.data["diffs"]
        rows.append([n, f"{d['sgd']['ours_vs_single']:.2g}", f"{d['sgd']['torch_vs_single']:.2g}",
                     f"{d['sgd']['ours_vs_torch']:.2g}", f"{d['adamw']['ours_vs_ddp']:.2g}",
                     f"{d['adamw']['ours_vs_torch']:.2g}"])
    steps = next(iter(runs.values())).params["steps"]
    return html_table(["N", "SGD: 우리 − 한 프로세스", "SGD: fully_shard − 한 프로세스", "SGD: 우리 − fully_shard",
                       "AdamW: 우리 − DDP", "AdamW: 우리 − fully_shard"], rows,
                      caption=f"{steps}스텝 뒤 파라미터의 최대 절대 차이 (0 = 비트 단위로 같음, 실제 실행)")


def mistakes_table(results: dict):
    """Each mistake of MISTAKES, run on real ranks: the claims it broke."""
    rows = [[MISTAKES[mistake], " / ".join(failed_checks(result, CLAIMS)) or "없음"] for mistake, result in results.items()]
    n = next(iter(results.values())).world_size
    return html_table(["실수", "깨진 주장"], rows, caption=f"일부러 틀린 FullyShardedDP (N={n}, 실제 실행)")
