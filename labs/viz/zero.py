"""Chapter 13 tables: what one rank holds under DDP and ZeRO-1, and what each reader's mistake breaks."""

from __future__ import annotations

from . import html_table

# 13.3절의 실수: 무엇을 잘못하는가 (labs/lessons/zero.py의 SHARDED)
MISTAKES = {
    "step_all_params": "모든 랭크가 모든 파라미터를 업데이트한다",
    "no_share": "내 몫을 업데이트하고 보내지 않는다",
    "wrong_owner": "모든 파라미터를 랭크 0에서 브로드캐스트한다",
}


def _kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


def memory_table(runs: dict):
    """One row per N: bytes rank 0 holds after AdamW steps, DDP next to ZeRO-1 (ours and torch's)."""
    rows = []
    for n, result in sorted(runs.items()):
        held = result.data["memory"]["adamw"]
        rows.append([n, _kib(held["ddp"]["params"][0]), _kib(held["ddp"]["grads"][0]), _kib(held["ddp"]["state"][0]),
                     _kib(held["sharded"]["state"][0]), _kib(held["zero"]["state"][0])])
    first = next(iter(runs.values())).data
    return html_table(
        ["N", "파라미터", "그래디언트", "AdamW 상태: DDP", "AdamW 상태: ShardedOptimizer", "AdamW 상태: ZeroRedundancyOptimizer"],
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
