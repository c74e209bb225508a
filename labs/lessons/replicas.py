"""Chapter 1 lab: replicas become identical under DDP, and DistributedSampler splits the data.

Every rank builds the model with a *different* seed on purpose. Wrapping it in
``DistributedDataParallel`` broadcasts rank 0's parameters, so afterwards every replica is
bit-identical. Each rank also records which samples ``DistributedSampler`` hands it, for a
dataset of D = N·(B/N)·steps + ``extra_samples`` samples: when N does not divide D the sampler
pads the *dataset* (repeating leading indices) and the last per-rank batch comes out shorter.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict

import torch
from torch.utils.data.distributed import DistributedSampler

from ..context import Described, RankContext
from ..ddp.replicas import rank_loader, replicate
from ..params import Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal
from ..tools.models import count_parameters, fingerprint, flat_parameters, index_dataset
from ..tools.primitives import max_abs_diff


def sampler_shards(dataset_size: int, world_size: int, seed: int = 0, epoch: int = 0,
                   drop_last: bool = False) -> list[list[int]]:
    """The indices ``DistributedSampler`` gives each rank (the same code the ranks run)."""
    shards = []
    for rank in range(world_size):
        sampler: DistributedSampler[int] = DistributedSampler(index_dataset(dataset_size), num_replicas=world_size, rank=rank,
                                                              shuffle=True, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


class ReplicasRecord(Described):
    """What each rank of the 'replicas' lab returns."""

    n_params: int
    params_before: list[float]
    params_after: list[float]
    checksum_before: float
    checksum_after: float
    fingerprint_before: str
    fingerprint_after: str
    shard: list[int]
    shard_drop_last: list[int]
    batches: list[list[int]]


def rank_fn(ctx: RankContext, per_rank_batch: int, steps: int, extra_samples: int, seed_base: int,
            sampler_seed: int) -> ReplicasRecord:
    ddp_model, before, fingerprint_before = replicate(ctx, seed_base)
    after = flat_parameters(ddp_model.module)
    dataset = index_dataset(ctx.world_size * per_rank_batch * steps + extra_samples)
    sampler, loader = rank_loader(ctx, dataset, per_rank_batch, sampler_seed)
    dropping: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                                           shuffle=True, seed=sampler_seed, drop_last=True)
    dropping.set_epoch(0)
    return {
        **ctx.describe(),
        "n_params": count_parameters(ddp_model.module),
        "params_before": before.tolist(),
        "params_after": after.tolist(),
        "checksum_before": float(before.sum()),
        "checksum_after": float(after.sum()),
        "fingerprint_before": fingerprint_before,
        "fingerprint_after": fingerprint(ddp_model.module),
        "shard": list(sampler),
        "shard_drop_last": list(dropping),
        "batches": [batch.tolist() for batch in loader],
    }


def expected_batch_sizes(dataset_size: int, world_size: int, per_rank_batch: int) -> list[int]:
    """Per-rank batch sizes: the padded shard of ceil(D/N) samples cut into B/N, the last one shorter."""
    shard = math.ceil(dataset_size / world_size)
    return [min(per_rank_batch, shard - start) for start in range(0, shard, per_rank_batch)]


def leading_indices(dataset_size: int, count: int, seed: int, epoch: int = 0) -> list[int]:
    """The first ``count`` indices of the epoch's shuffled order (``randperm`` seeded seed+epoch),
    recomputed here from the documented algorithm, not by calling DistributedSampler."""
    gen = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(dataset_size, generator=gen)[:count].tolist()


def _duplicates(indices: list[int]) -> list[int]:
    """Every index beyond its first occurrence (sorted): the samples two ranks both received."""
    seen, extra = set(), []
    for i in indices:
        if i in seen:
            extra.append(i)
        seen.add(i)
    return sorted(extra)


class ReplicasData(TypedDict):
    """The summary data of the 'replicas' lab."""

    dataset_size: int
    padded_size: int
    global_batch: int
    n_params: int
    global_batches: list[list[int]]
    batch_sizes: list[int]
    duplicates: list[int]


def summarize(ranks: list[ReplicasRecord], backend: str, params: dict[str, Any]) -> Summary[ReplicasData]:
    n = len(ranks)
    b = params["per_rank_batch"]
    dataset_size = n * b * params["steps"] + params["extra_samples"]
    padded = math.ceil(dataset_size / n) * n
    after = [r["params_after"] for r in ranks]

    max_after_diff = max(max_abs_diff(a, after[0]) for a in after)
    max_diff_from_rank0_init = max(max_abs_diff(a, ranks[0]["params_before"]) for a in after)
    all_indices = [i for r in ranks for i in r["shard"]]
    dropped = [i for r in ranks for i in r["shard_drop_last"]]
    steps = max(len(r["batches"]) for r in ranks)
    # 전역 배치(global batch): 같은 스텝의 모든 랭크 미니배치를 합친 것
    global_batches = [sorted(i for r in ranks if s < len(r["batches"]) for i in r["batches"][s])
                      for s in range(steps)]
    expected_sizes = expected_batch_sizes(dataset_size, n, b)
    duplicates = _duplicates(all_indices)
    leading = leading_indices(dataset_size, padded - dataset_size, params["sampler_seed"])

    checks = [
        check_equal("distinct_processes", len({(r["host"], r["pid"]) for r in ranks}), n,
                    "랭크마다 서로 다른 OS 프로세스(PID)가 실행했다"),
        check_equal("replicas_differ_before_ddp", len({r["fingerprint_before"] for r in ranks}), n,
                    "DDP로 감싸기 전에는 랭크마다 시드가 달라 복제본이 모두 다르다"),
        check_close("replicas_identical_after_ddp", max_after_diff, 0.0, 0.0,
                    "DDP로 감싼 뒤 모든 랭크의 파라미터가 비트 단위까지 같다(최대 절대 차이)"),
        check_close("equal_to_rank0_initial", max_diff_from_rank0_init, 0.0, 0.0,
                    "감싼 뒤의 파라미터는 랭크 0의 초기 파라미터를 브로드캐스트한 것이다"),
        check_equal("fingerprints_after_ddp", len({r["fingerprint_after"] for r in ranks}), 1,
                    "감싼 뒤 파라미터 바이트의 해시(fingerprint)가 하나뿐이다"),
        check_equal("per_rank_batch_sizes", sorted({tuple(len(bt) for bt in r["batches"]) for r in ranks}),
                    [tuple(expected_sizes)],
                    f"모든 랭크의 스텝별 미니배치 크기 = ⌈D/N⌉개를 B/N = {b}개씩 자른 것(마지막만 짧을 수 있음)"),
        check_equal("no_overlap", len(duplicates), padded - dataset_size,
                    "두 랭크에 배정된 샘플 수 = 패딩 수 ⌈D/N⌉·N − D (나누어떨어지면 0: 어떤 샘플도 겹치지 않는다)"),
        check_equal("padding_repeats_leading", sorted(set(duplicates) - set(leading)), [],
                    "두 번 배정된 샘플은 모두 섞인 순서의 맨 앞 ⌈D/N⌉·N − D개 안에 있다(벗어난 샘플 목록)"),
        check_close("full_coverage", len(set(all_indices)) / dataset_size, 1.0, 0.0,
                    "한 에폭(epoch) 동안 모든 랭크를 합치면 데이터셋 전체를 본다(본 샘플 비율)"),
        check_equal("drop_last_shards", [len(dropped), len(set(dropped))], [dataset_size // n * n] * 2,
                    "drop_last=True인 샘플러는 패딩 대신 뒤쪽을 버린다: 모든 랭크 합계 ⌊D/N⌋·N개, 중복 없음"),
    ]
    data: ReplicasData = {
        "dataset_size": dataset_size,
        "padded_size": padded,
        "global_batch": n * b,
        "n_params": ranks[0]["n_params"],
        "global_batches": global_batches,
        "batch_sizes": expected_sizes,
        "duplicates": duplicates,
    }
    return Summary(data, checks)


LAB = Lab(
    name="replicas",
    description="랭크마다 다른 초기값으로 만든 모델이 DDP로 감싸는 순간 똑같아지고, "
                "DistributedSampler가 데이터셋을 나누는(필요하면 패딩하는) 방식을 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=1,
    params={"per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "steps": Int(2, min=1, max=100, help="샘플이 나누어떨어질 때 한 에폭의 스텝 수"),
            "extra_samples": Int(0, min=0, max=1024, help="데이터셋 크기 D = N·(B/N)·steps에 더할 샘플 수"),
            "seed_base": seed(1000), "sampler_seed": seed()},
    record=ReplicasRecord,
    data=ReplicasData,
)
