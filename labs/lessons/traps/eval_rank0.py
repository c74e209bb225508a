"""Trap 3: evaluation through the DDP wrapper on rank 0 only: the other ranks wait in a collective forever."""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ...context import RankContext
from ...ddp.traps import eval_rank0_bug, eval_rank0_fix
from ...errors import LabConfigError
from ...result import Check, Summary, check_close, check_equal
from ...tools.models import bn_mlp, flat_parameters, synthetic_regression, wrap_ddp
from .common import LR, PER_RANK_BATCH, SEED, STEPS, NoData, finished_anyway, gathered_equal, needs_a_peer, rank_batches, train_steps

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "steps": STEPS, "lr": LR, "seed": SEED}
BUG_OUTCOME = "hang"  # the bug never returns records: the launcher ends it at the deadline


class EvalFixRecord(TypedDict):
    module_loss: float | None  # rank 0 evaluates ddp.module alone
    all_ranks_loss: float
    params: list[float]


class EvalFixData(TypedDict):
    module_loss: float
    all_ranks_loss: float


RECORDS = {"bug": NoData, "fix": EvalFixRecord}
DATA = {"bug": NoData, "fix": EvalFixData}


def validate(params: dict, world_size: int) -> None:
    if params["per_rank_batch"] < 2:
        raise LabConfigError("함정 eval_rank0의 모델은 BatchNorm을 쓰므로 학습 중 랭크마다 샘플이 2개 이상이어야 합니다. "
                             "per_rank_batch=2 이상으로 실행하세요.")
    needs_a_peer("eval_rank0", params, world_size)


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, steps: int, lr: float,
            seed: int) -> NoData | EvalFixRecord:
    batches = rank_batches(ctx, steps, per_rank_batch, seed)
    xv, yv = (t.to(ctx.device) for t in synthetic_regression(8 * ctx.world_size, seed=seed + 1))
    torch.manual_seed(seed)
    ddp = wrap_ddp(bn_mlp(), ctx.device)  # BatchNorm: 버퍼(running mean/var)가 있는 모델
    train_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=lr), batches)
    if variant == "bug":
        eval_rank0_bug(ctx, ddp, xv, yv)
        return NoData()
    module_loss, all_ranks_loss = eval_rank0_fix(ctx, ddp, xv, yv)
    return EvalFixRecord(module_loss=module_loss, all_ranks_loss=all_ranks_loss,
                         params=flat_parameters(ddp.module).tolist())


def summarize(ranks: list[EvalFixRecord], variant: str, params: dict) -> Summary[Any]:
    if variant == "bug":  # 버그 실행은 끝나지 않는다: observe()가 멈춘 모습을 확인한다
        return finished_anyway(BUG_OUTCOME, "랭크 0만 DDP 래퍼로 평가하면 끝나지 않아야 한다")
    a, b = ranks[0]["module_loss"], ranks[0]["all_ranks_loss"]
    assert a is not None, "rank 0 evaluates ddp.module"
    checks = [check_close("same_validation_loss", abs(a - b), 0.0, 1e-6,
                          "랭크 0의 ddp.module 평가와 모든 랭크가 나눠 한 평가의 손실이 같다(절대 차이)"),
              check_close("replicas_identical", gathered_equal(ranks, "params"), 0.0, 0.0,
                          "평가 뒤에도 복제본은 모든 랭크에서 같다(최대 절대 차이)")]
    return Summary(EvalFixData(module_loss=a, all_ranks_loss=b), checks)


def outcome_checks(outcome: dict, backend: str) -> list[Check]:
    """What the bug must do, read from what the launcher saw: every rank ended at the deadline, waiting in a
    collective."""
    where = outcome.get("where", {})
    waiting = sorted(r for r, text in where.items() if text.startswith("집합 통신에서"))
    return [check_equal("outcome", outcome["kind"], "hang", "끝나지 않고 런처의 제한 시간에 걸린다(결과 종류)"),
            check_equal("ranks_waiting_in_collective", waiting, sorted(where) or [-1],
                        "멈춘 랭크가 모두 집합 통신 안에서 서로를 기다린다(그런 랭크 번호)")]
