"""Trap 1: the forward pass outside ``no_sync()``: every micro step of gradient accumulation All-Reduces."""

from __future__ import annotations

from typing import TypedDict

import torch

from ...context import RankContext
from ...ddp.traps import micro_step_bug, micro_step_fix
from ...params import Int
from ...result import Summary, check_at_least, check_close, check_equal
from ...tools.comms import CollectiveCounter
from ...tools.models import flat_gradients, flat_parameters, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from .common import LR, PER_RANK_BATCH, SEED, gathered_equal

PARAMS = {"micro_steps": Int(4, min=1, max=64, help="누적할 마이크로 스텝 수 K"), "per_rank_batch": PER_RANK_BATCH,
          "lr": LR, "seed": SEED}


class NoSyncRecord(TypedDict):
    all_reduce_per_micro_step: list[int]
    grad_after_first: list[float]
    params: list[float]


class NoSyncData(TypedDict):
    all_reduce_per_micro_step: list[int]
    total_all_reduce: int


RECORDS = {"bug": NoSyncRecord, "fix": NoSyncRecord}
DATA = {"bug": NoSyncData, "fix": NoSyncData}


def rank_fn(ctx: RankContext, variant: str, *, micro_steps: int, per_rank_batch: int, lr: float,
            seed: int) -> NoSyncRecord:
    k, b = micro_steps, per_rank_batch
    x, y = synthetic_regression(ctx.world_size * k * b, seed=seed)
    torch.manual_seed(seed)
    ddp = wrap_ddp(tiny_mlp(), ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    step = micro_step_bug if variant == "bug" else micro_step_fix
    counts, first_grad = [], []
    for i in range(k):
        xb, yb = (t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, b, i))
        with CollectiveCounter() as counter:
            step(ddp, xb, yb, k, last=i == k - 1)
        counts.append(counter.counts["all_reduce"])
        if i == 0:
            first_grad = flat_gradients(ddp.module).tolist()
    optimizer.step()
    return {"all_reduce_per_micro_step": counts, "grad_after_first": first_grad,
            "params": flat_parameters(ddp.module).tolist()}


def summarize(ranks: list[NoSyncRecord], variant: str, params: dict) -> Summary[NoSyncData]:
    k, n = params["micro_steps"], len(ranks)
    per_step = [r["all_reduce_per_micro_step"] for r in ranks]
    synced = sorted({sum(c > 0 for c in counts) for counts in per_step})
    grad_spread = gathered_equal(ranks, "grad_after_first")
    checks = [check_close("replicas_identical", gathered_equal(ranks, "params"), 0.0, 0.0,
                          "어느 쪽이든 스텝 뒤 모든 랭크의 파라미터는 같다(최대 절대 차이): 틀리는 것은 통신량이다")]
    if variant == "bug":
        checks.insert(0, check_equal("synced_micro_steps", synced, [k],
                                     f"순전파를 no_sync() 밖에 두면 K={k}개 마이크로 스텝이 모두 All-Reduce한다(동기화한 스텝 수)"))
        if n > 1 and k > 1:
            checks.insert(1, check_close("first_grad_already_averaged", grad_spread, 0.0, 0.0,
                                         "첫 마이크로 스텝 뒤 그래디언트가 이미 모든 랭크에서 같다: 동기화가 일어났다(최대 차이)"))
    else:
        checks.insert(0, check_equal("synced_micro_steps", synced, [1],
                                     "순전파까지 no_sync() 안에 넣으면 마지막 마이크로 스텝만 All-Reduce한다(동기화한 스텝 수)"))
        if n > 1 and k > 1:
            checks.insert(1, check_at_least("first_grad_still_local", grad_spread, 1e-6,
                                            "첫 마이크로 스텝 뒤 그래디언트는 랭크마다 다르다: 아직 로컬이다(최대 차이)"))
    return Summary({"all_reduce_per_micro_step": per_step[0], "total_all_reduce": sum(per_step[0])}, checks)
