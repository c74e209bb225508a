"""Trap 4: ``sampler.set_epoch`` never called: every epoch sees the data in the same order."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ...context import RankContext
from ...ddp.traps import epoch_orders_bug, epoch_orders_fix
from ...result import Summary, check_equal, check_true
from .common import EPOCHS, PER_RANK_BATCH, SAMPLES, SEED, needs_a_global_batch

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "epochs": EPOCHS, "samples": SAMPLES, "seed": SEED}


class SetEpochRecord(TypedDict):
    orders: list[list[int]]  # per epoch, the sample indices this rank received


class SetEpochData(TypedDict):
    orders_rank0: list[list[int]]
    repeated_global_batches: int
    compared_global_batches: int


RECORDS = {"bug": SetEpochRecord, "fix": SetEpochRecord}
DATA = {"bug": SetEpochData, "fix": SetEpochData}


def validate(params: dict, world_size: int) -> None:
    needs_a_global_batch(params, world_size)


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, epochs: int, samples: int,
            seed: int) -> SetEpochRecord:
    dataset = TensorDataset(torch.arange(samples))
    sampler: DistributedSampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True,
                                                     seed=seed)
    loader = DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler)
    epoch_orders = epoch_orders_bug if variant == "bug" else epoch_orders_fix
    return {"orders": epoch_orders(sampler, loader, epochs)}


def summarize(ranks: list[SetEpochRecord], variant: str, params: dict) -> Summary[SetEpochData]:
    b, epochs, samples = params["per_rank_batch"], params["epochs"], params["samples"]
    distinct = sorted({len({tuple(o) for o in r["orders"]}) for r in ranks})
    # 스텝 t의 전역 배치 = 모든 랭크가 스텝 t에 본 샘플의 집합
    steps = len(ranks[0]["orders"][0]) // b
    global_batches = [[frozenset(i for r in ranks for i in r["orders"][e][t * b:(t + 1) * b]) for t in range(steps)]
                      for e in range(epochs)]
    repeated = sum(global_batches[e][t] == global_batches[0][t] for e in range(1, epochs) for t in range(steps))
    covered = [sorted(i for r in ranks for i in r["orders"][e]) for e in range(epochs)]
    checks = [check_true("each_epoch_covers_dataset",
                         all(set(c) == set(range(samples)) for c in covered), len(covered),
                         "어느 쪽이든 에폭마다 랭크들이 데이터 전체를 나눠 본다(확인한 에폭 수)")]
    if variant == "bug":
        checks.append(check_equal("distinct_epoch_orders", distinct, [1],
                                  f"set_epoch()를 부르지 않으면 {epochs}개 에폭의 순서가 모두 같다(랭크마다 서로 다른 순서 수)"))
    else:
        checks.append(check_equal("distinct_epoch_orders", distinct, [epochs],
                                  f"set_epoch(epoch)를 부르면 {epochs}개 에폭의 순서가 모두 다르다(서로 다른 순서 수)"))
    return Summary({"orders_rank0": ranks[0]["orders"], "repeated_global_batches": repeated,
                    "compared_global_batches": (epochs - 1) * steps}, checks)
