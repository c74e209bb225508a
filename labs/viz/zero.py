"""Chapter 13 tables: what one rank holds under DDP and ZeRO-1, and what each reader's mistake breaks."""

from __future__ import annotations

from ..ddp.zero_bugs import BUGS
from . import html_table

# 13.4절의 실수: zero 실습의 mistake= 값 → 무엇을 잘못하는가 (갤러리의 표 labs/ddp/zero_bugs.py의 BUGS)
MISTAKES = {bug.mistake: bug.claim for bug in BUGS.values() if bug.mistake}


def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def memory_table(runs: dict):
    """One row per N: bytes rank 0 holds after AdamW steps, DDP next to ZeRO-1 (ours and torch's), and DDP's buckets."""
    rows = []
    for n, result in sorted(runs.items()):
        held = result.data["memory"]["adamw"]
        rows.append([n, kib(held["ddp"]["params"][0]), kib(held["ddp"]["grads"][0]),
                     kib(result.data["ddp_bucket_bytes"]), kib(held["ddp"]["state"][0]),
                     kib(held["sharded"]["state"][0]), kib(held["zero"]["state"][0])])
    first = next(iter(runs.values())).data
    return html_table(
        ["N", "파라미터", "그래디언트", "DDP 버킷", "AdamW 상태: DDP", "AdamW 상태: ShardedOptimizer",
         "AdamW 상태: ZeroRedundancyOptimizer"],
        rows, caption=f"랭크 0이 가진 바이트 (파라미터 {first['n_params']:,}개, 텐서 {first['n_tensors']}개, "
                      "스토리지 크기로 셈, 실제 실행)")


# 표에 쓰는 짧은 주장 (확인의 전체 설명은 접힌 확인 표에 있다)
CLAIMS = {
    "sharded_state_matches_assignment": "상태가 자기 몫만큼만 있다",
    "sharded_matches_single": "한 프로세스와 같은 곳에 도착한다",
    "sharded_equals_ddp": "평범한 DDP와 비트 단위로 같다",
    "sharded_step_broadcasts_each_param": "파라미터마다 broadcast를 한 번 한다",
    "sharded_step_sends_param_bytes": "파라미터 바이트만큼 보낸다",
    "sharded_replicas_identical": "복제본이 같다",
}


def failed_checks(result, claims: dict = CLAIMS) -> list[str]:
    """The claims of the checks a run failed, short (``claims``) where there is a short form."""
    return [claims.get(c.name, c.description) for c in result.checks.values() if c.applicable and not c.ok]


def mistakes_table(results: dict):
    """Each mistake of MISTAKES, run on real ranks: the claims it broke and whether the replicas still agree."""
    rows = []
    for mistake, result in results.items():
        same = result.checks["sharded_replicas_identical"]
        rows.append([MISTAKES[mistake], " / ".join(failed_checks(result)) or "없음",
                     "같다" if same.ok else "다르다"])
    n = next(iter(results.values())).world_size
    return html_table(["실수", "깨진 주장", "복제본"], rows, caption=f"일부러 틀린 ShardedOptimizer (N={n}, 실제 실행)")


# 13.7절: 저장하는 방법마다 (이름, 무엇을 누가 저장하는가)
CHECKPOINT_WAYS = {
    "consolidated": ("ShardedOptimizer: 모아서", "consolidate_state_dict(to=0) 뒤 랭크 0이 파일 하나"),
    "per_rank": ("ShardedOptimizer: 랭크마다", "랭크 0이 모델, 랭크마다 자기 샤드를 자기 파일에"),
    "rank0_only": ("ShardedOptimizer: 랭크 0만", "랭크 0이 모델과 자기 샤드 (6장의 DDP 방식)"),
    "zero": ("ZeroRedundancyOptimizer: 모아서", "consolidate_state_dict(to=0) 뒤 랭크 0이 파일 하나"),
}


def checkpoint_table(result):
    """Per way of saving: who saves what, and how far the resumed run ends from the uninterrupted one."""
    d = result.data
    rows = [[name, who, f"{d['diffs'][way]:.3g}", f"{d['diffs'][way] / d['moved']:.2%}"]
            for way, (name, who) in CHECKPOINT_WAYS.items()]
    rows.append(["fully_shard: torch.distributed.checkpoint", "랭크마다 자기 샤드를 (dcp.save)",
                 f"{result.checks['fsdp2_dcp_resume_equals_uninterrupted'].value:.3g}",
                 f"{result.checks['fsdp2_dcp_resume_equals_uninterrupted'].value / d['moved']:.2%}"])
    return html_table(["저장 방법", "누가 무엇을", "끊기지 않은 학습과의 최대 차이", "학습의 이동량 대비"], rows,
                      caption=f"AdamW {result.params['steps']}스텝 뒤 저장·재개하고 {result.params['steps']}스텝 더 "
                              f"(N={result.world_size}, 실제 실행)")
