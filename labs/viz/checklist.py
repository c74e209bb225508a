"""Chapter 12 table: one row per core claim of the course, with the value its lab measured on this build."""

from __future__ import annotations

from typing import Any

from . import html_table

# (장, 주장, 실행 이름(RUNS), 확인 항목, 측정값의 뜻)
SUMMARY = (
    ("1장 구조", "DDP로 감싸면 복제본이 비트 단위까지 같아진다", "replicas", "replicas_identical_after_ddp", "랭크 간 최대 차이"),
    ("1장 구조", "DistributedSampler는 데이터를 겹치지 않게 나눈다", "replicas", "no_overlap", "중복 샘플 수"),
    ("2장 순전파", "순전파에는 그래디언트 통신이 없다", "forward", "plain_forward_steady_zero", "재구성 반복 밖 순전파의 통신 수"),
    ("3장 역전파", "DDP 그래디언트는 로컬 그래디언트의 평균이다", "backward", "ddp_grad_is_mean", "평균과의 최대 차이"),
    ("4장 All-Reduce", "링 All-Reduce는 랭크마다 2(N−1)/N·S 바이트를 보낸다", "allreduce", "ring_bytes_vs_theory",
     "이론값과의 차이(바이트)"),
    ("5장 업데이트", "매 스텝 모든 복제본이 같다", "update", "sgd_max_param_diff", "랭크 간 최대 차이"),
    ("5장 업데이트", "optimizer.step()은 통신하지 않는다", "update", "optimizer_step_collectives", "step 안의 집합 통신 수"),
    ("5장 업데이트", "DDP = 한 프로세스의 전역 배치 학습", "equivalence", "matches_single_process", "파라미터 최대 차이"),
    ("6장 학습 흐름", "실제 학습 스크립트도 한 프로세스 학습과 같은 곳에 도착한다", "train", "ddp_equals_single_process",
     "파라미터 최대 차이"),
    ("6장 학습 흐름", "학습 스크립트의 통신은 단계별로 센 통신의 합이다", "train", "phases_explain_whole_run",
     "랭크마다 종류별 횟수"),
    ("7장 내부", "bucket_cap_mb가 All-Reduce 횟수를 정한다", "buckets", "counts_match_prediction", "cap별 All-Reduce 횟수"),
    ("7장 내부", "버킷은 번호 순서대로 보낸다", "buckets", "launched_in_index_order", "순서대로 보낸 랭크·cap 조합 수"),
    ("7장 내부", "no_sync() 누적은 All-Reduce를 K−1번 줄인다", "accumulation", "allreduce_saved", "줄어든 All-Reduce 수"),
    ("7장 내부", "Join은 배치 수가 다른 랭크의 멈춤을 막는다", "uneven", "join_finished", "랭크별로 끝낸 반복 수"),
    ("8장 비용", "버킷을 키우면 All-Reduce 호출 수가 준다", "bench", "fewer_calls_with_bigger_buckets",
     "cap을 키워 가며 센 스텝당 호출 수"),
    ("8장 비용", "직접 만든 링 All-Reduce는 라이브러리와 같은 합을 낸다", "bench", "rings_match_library", "최대 차이"),
    ("9장 직접 만들기", "직접 만든 DDP의 계단은 torch DDP·단일 프로세스와 같은 곳에 도착한다", "miniddp",
     "same_as_ddp_and_single", "파라미터 최대 차이"),
    ("10장 함정", "no_sync()는 순전파까지 감싸야 마지막 마이크로 스텝만 통신한다", "traps no_sync", "synced_micro_steps",
     "All-Reduce한 마이크로 스텝"),
    ("11장 오해", "DDP는 모델을 나누지 않는다", "myths", "ddp_full_params_every_rank", "랭크마다 가진 파라미터 수"),
    ("11장 오해", "동기화하지 않으면 복제본이 갈라진다", "myths", "unsynced_drift_grows", "마지막 스텝의 최대 L2 거리"),
    ("13장 메모리", "ZeRO-1은 랭크마다 자기 몫의 옵티마이저 상태만 둔다", "zero", "sharded_state_matches_assignment",
     "랭크별 AdamW 상태 바이트"),
    ("13장 메모리", "FSDP는 랭크마다 가중치의 샤드만 저장한다", "fsdp", "params_shard_bytes", "랭크가 저장한 파라미터 바이트"),
    ("13장 메모리", "샤딩한 상태를 모아 저장하고 재개하면 끊기지 않은 학습과 같다", "sharded_checkpoint",
     "consolidated_resume_equals_uninterrupted", "파라미터 최대 차이"),
)
# 실행 이름 → (실습, 인자): 인자가 없으면 실습 이름 그대로 기본 인자로 실행한다
RUNS: dict[str, tuple[str, dict[str, Any]]] = {name: (name, {}) for name in dict.fromkeys(run for _, _, run, _, _ in SUMMARY)}
RUNS["traps no_sync"] = ("traps", {"trap": "no_sync", "variant": "fix"})


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return ", ".join(map(str, value)) if isinstance(value, list) else str(value)


def course_summary_table(runs: dict):
    """The course's core claims with the values measured by ``runs`` ({run name of RUNS: LabResult}), as three
    tables (chapters 1–4, 5–7, 8 on) so none grows taller than two phone screens."""
    from IPython.display import HTML

    rows = []
    for chapter, claim, run, check, meaning in SUMMARY:
        c = runs[run].checks[check]
        rows.append([chapter, claim, f"{check} ({runs[run].lab}, N={runs[run].world_size})",
                     f"{meaning}: {_fmt(c.value)}" + ("" if c.ok else " (실패)")])
    # 장 묶음마다 표 하나: 휴대폰에서도 표 하나가 두 화면을 넘지 않게 (1–4장, 5–7장, 8장부터)
    starts = [next(i for i, (chapter, *_) in enumerate(SUMMARY) if chapter.startswith(first)) for first in ("5장", "8장")]
    headers = ["장", "주장", "확인 항목 (실습, N)", "측정값"]
    caption = "코스 요약 ({}): 장마다의 핵심 주장과 이 페이지를 만들 때 측정한 값"
    parts = zip(("1–4장", "5–7장", "8–13장"), [0, *starts], [*starts, len(rows)])
    return HTML("".join(html_table(headers, rows[a:b], caption.format(label), wide_only=(2,)).data
                        for label, a, b in parts))
