"""A lab that fails on purpose: how the launcher reports a raising, hanging or dying rank.

Real DDP jobs fail this way (a shape error on one rank, a rank that skips a collective, an
OOM kill). Hangs without a message are the most common complaint about distributed code, so
the launcher turns each of these into a Korean error that names the rank.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from typing import Any, TypedDict

import torch
import torch.distributed as dist

from ..context import MAX_CPU_RANKS, Described, RankContext
from ..errors import LabConfigError
from ..params import Choice, Int
from ..registry import Lab
from ..result import Summary, check_close, largest

MODES = ("none", "raise", "hang", "exit", "kill", "abort")


def validate(params: dict, world_size: int) -> None:
    if params["mode"] != "none" and not 0 <= params["fault_rank"] < world_size:
        raise LabConfigError(f"인자 fault_rank의 값이 맞지 않습니다. 허용: 0 이상 N-1={world_size - 1} 이하의 정수. "
                             f"받은 값: {params['fault_rank']}")


class FaultsRecord(Described):
    """What each rank of the 'faults' lab returns."""

    sum: float


def rank_fn(ctx: RankContext, mode: str, fault_rank: int) -> FaultsRecord:
    if ctx.rank == fault_rank:
        if mode == "raise":
            raise RuntimeError(f"의도한 실패: 랭크 {ctx.rank}에서 예외를 일으켰습니다")
        if mode == "hang":
            while True:  # 집합 통신에 끝내 나타나지 않는 랭크
                time.sleep(0.1)
        if mode == "exit":
            print(f"의도한 종료: 랭크 {ctx.rank}, 종료 코드 17", file=sys.stderr, flush=True)
            os._exit(17)  # 결과를 보내지 못하고 끝나는 프로세스 (sys.exit, 확장 모듈의 exit와 비슷)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)  # 메모리가 모자랄 때 OOM killer가 하는 일
        if mode == "abort":
            os.abort()  # C++ 쪽 오류(assert, std::terminate)로 죽는 프로세스: SIGABRT
    # 나머지 랭크는 all_reduce에서 고장 난 랭크를 기다린다.
    value = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
    dist.all_reduce(value)
    return {**ctx.describe(), "sum": float(value.item())}


class FaultsData(TypedDict):
    """The summary data of the 'faults' lab."""

    expected_sum: float


def summarize(ranks: list[FaultsRecord], backend: str, params: dict[str, Any]) -> Summary[FaultsData]:
    n = len(ranks)
    expected = n * (n + 1) / 2
    worst = largest(abs(r["sum"] - expected) for r in ranks)
    checks = [check_close("all_reduce_sum", worst, 0.0, 0.0,
                          f"고장이 없으면 all_reduce(1+2+…+N) = {expected:g}가 모든 랭크에 도착한다(최대 오차)")]
    return Summary({"expected_sum": expected}, checks)


LAB = Lab(
    name="faults",
    description="한 랭크가 예외를 내거나(raise), 멈추거나(hang), 죽을 때(exit, kill, abort) "
                "런처가 어느 랭크인지 알려 주는 모습 (기본은 고장 없음)",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=3,
    params={"mode": Choice("none", MODES, help="고장 종류"),
            "fault_rank": Int(2, min=0, max=MAX_CPU_RANKS - 1, help="고장 낼 랭크")},
    record=FaultsRecord,
    data=FaultsData,
    validate=validate,
)
