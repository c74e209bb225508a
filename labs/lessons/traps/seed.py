"""Trap 8: the same seed for the data's randomness on every rank: N ranks draw the same dropout and noise."""

from __future__ import annotations

import math
from typing import TypedDict

import torch

from ...context import RankContext
from ...ddp.traps import seeded_model_bug, seeded_model_fix
from ...result import Summary, check_at_least, check_close, check_equal, not_applicable
from ...tools.models import flat_parameters, rank_batch, synthetic_regression, wrap_ddp
from .common import LR, PER_RANK_BATCH, SEED, STEPS, gathered_equal, loss_of

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "steps": STEPS, "lr": LR, "seed": SEED}


class SeedRecord(TypedDict):
    init: list[float]
    masks: list[list]  # per step, this rank's dropout mask per sample
    noises: list[list]  # per step, the augmentation noise this rank drew
    params: list[float]


class SeedData(TypedDict):
    distinct_masks: list[int]
    global_batch: int


RECORDS = {"bug": SeedRecord, "fix": SeedRecord}
DATA = {"bug": SeedData, "fix": SeedData}


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, steps: int, lr: float, seed: int) -> SeedRecord:
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, in_features=16, seed=seed)
    model = (seeded_model_fix if variant == "fix" else seeded_model_bug)(ctx, seed)
    init = flat_parameters(model).tolist()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    masks: list[list] = []
    noises: list[list] = []
    for s in range(steps):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s)
        noise = 0.1 * torch.randn_like(xb)                # 데이터 증강: 입력에 잡음
        optimizer.zero_grad()
        loss_of(ddp, (xb + noise).to(ctx.device), yb.to(ctx.device)).backward()
        optimizer.step()
        assert model.last_mask is not None  # 순전파가 방금 남겼다
        masks.append(model.last_mask.cpu().tolist())
        noises.append(noise.tolist())
    return {"init": init, "masks": masks, "noises": noises, "params": flat_parameters(model).tolist()}


def summarize(ranks: list[SeedRecord], variant: str, params: dict) -> Summary[SeedData]:
    n, b, steps = len(ranks), params["per_rank_batch"], params["steps"]
    # 전역 배치(모든 랭크의 샘플)에서 서로 다른 드롭아웃 마스크 수: 한 프로세스라면 N·(B/N)개
    distinct = [len({tuple(row) for r in ranks for row in r["masks"][s]}) for s in range(steps)]
    own = [len({tuple(row) for row in ranks[0]["masks"][s]}) for s in range(steps)]  # 랭크 0 혼자의 마스크 수
    # 랭크마다 따로 뽑은 n·b개의 마스크(입력 16개, p=0.5: 2^16가지)가 우연히 겹치는 쌍의 기댓값 λ; 6λ까지 허용
    k = n * b
    chance = math.ceil(6 * k * (k - 1) / 2 / 2 ** 16)
    same_noise = sum(r["noises"] == ranks[0]["noises"] for r in ranks[1:])
    checks = [check_close("same_initial_model", gathered_equal(ranks, "init"), 0.0, 0.0,
                          "모델 초기값은 모든 랭크에서 같다(같은 시드, 최대 차이)"),
              check_close("replicas_identical", gathered_equal(ranks, "params"), 0.0, 0.0,
                          "학습 뒤 복제본이 모든 랭크에서 같다: 데이터 난수가 달라도 그래디언트는 평균된다(최대 차이)")]
    if n == 1:
        checks.append(not_applicable("distinct_masks_in_global_batch", "N=1이면 비교할 다른 랭크가 없다"))
    elif variant == "bug":
        checks.append(check_equal("distinct_masks_in_global_batch", distinct, own,
                                  f"시드가 같으면 전역 배치 {n * b}개 샘플의 마스크가 랭크 0 혼자 뽑은 마스크(보통 {b}개)뿐이다: "
                                  "랭크마다 똑같이 뽑는다(스텝별 서로 다른 마스크 수)"))
        checks.append(check_equal("identical_noise_ranks", same_noise, n - 1,
                                  "증강 잡음도 랭크 0과 똑같이 뽑는 랭크 수"))
    else:
        checks.append(check_at_least("distinct_masks_in_global_batch", min(distinct), k - 1 - chance,
                                     f"랭크마다 시드를 다르게 하면 전역 배치 {k}개 샘플의 마스크가 (거의) 모두 다르다(스텝별 최소; "
                                     f"2^16가지 마스크가 우연히 겹치는 만큼 {chance}개와 1개를 뺀 수 이상)"))
        checks.append(check_equal("identical_noise_ranks", same_noise, 0,
                                  "증강 잡음이 랭크 0과 똑같은 랭크 수"))
    return Summary({"distinct_masks": distinct, "global_batch": n * b}, checks)
