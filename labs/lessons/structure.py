"""Chapter 1 lab: replicas become identical under DDP, and DistributedSampler splits the data.

Every rank builds the model with a *different* seed on purpose. Wrapping it in
``DistributedDataParallel`` broadcasts rank 0's parameters, so afterwards every replica is
bit-identical. Each rank also records which samples ``DistributedSampler`` hands it.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from ..context import RankContext
from ..models import count_parameters, fingerprint, flat_parameters, tiny_mlp
from ..params import Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal


def sampler_shards(dataset_size: int, world_size: int, seed: int = 0, epoch: int = 0) -> list[list[int]]:
    """The indices ``DistributedSampler`` gives each rank (the same code the ranks run)."""
    shards = []
    for rank in range(world_size):
        sampler = DistributedSampler(range(dataset_size), num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=seed)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
    return shards


def rank_fn(ctx: RankContext, per_rank_batch: int, steps: int, seed_base: int, sampler_seed: int) -> dict:
    # 1) 랭크마다 일부러 다른 시드로 모델을 만든다: 이 시점의 복제본은 서로 다르다.
    torch.manual_seed(seed_base + ctx.rank)
    model = tiny_mlp().to(ctx.device)
    before = flat_parameters(model)
    fingerprint_before = fingerprint(model)

    # 2) DDP로 감싸면 생성자가 랭크 0의 파라미터를 모든 랭크에 브로드캐스트한다.
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp_model = DDP(model, device_ids=device_ids)
    after = flat_parameters(ddp_model.module)

    # 3) DistributedSampler: 전체 데이터를 N개로 겹치지 않게 나눈 뒤, 각 랭크가 B/N씩 미니배치를 만든다.
    dataset = range(ctx.world_size * per_rank_batch * steps)
    sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank,
                                 shuffle=True, seed=sampler_seed)
    sampler.set_epoch(0)
    loader = DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler)

    return {
        **ctx.describe(),
        "n_params": count_parameters(model),
        "params_before": before.tolist(),
        "params_after": after.tolist(),
        "checksum_before": float(before.sum()),
        "checksum_after": float(after.sum()),
        "fingerprint_before": fingerprint_before,
        "fingerprint_after": fingerprint(ddp_model.module),
        "shard": list(sampler),
        "batches": [batch.tolist() for batch in loader],
    }


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    n = len(ranks)
    b = params["per_rank_batch"]
    dataset_size = n * b * params["steps"]
    before = [torch.tensor(r["params_before"], dtype=torch.float64) for r in ranks]
    after = [torch.tensor(r["params_after"], dtype=torch.float64) for r in ranks]

    max_after_diff = max(float((a - after[0]).abs().max()) for a in after)
    max_diff_from_rank0_init = max(float((a - before[0]).abs().max()) for a in after)
    shards = [r["shard"] for r in ranks]
    all_indices = [i for shard in shards for i in shard]
    # 전역 배치(global batch): 같은 스텝의 모든 랭크 미니배치를 합친 것
    global_batches = [sorted(i for r in ranks for i in r["batches"][s]) for s in range(params["steps"])]

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
        check_equal("per_rank_batch_sizes", sorted({len(bt) for r in ranks for bt in r["batches"]}), [b],
                    f"모든 랭크가 스텝마다 B/N = {b}개 샘플을 받는다"),
        check_equal("global_batch_size", sorted({len(g) for g in global_batches}), [n * b],
                    f"한 스텝의 전역 배치는 N × B/N = {n} × {b} = {n * b}개 샘플이다"),
        check_equal("no_overlap", len(all_indices) - len(set(all_indices)), 0,
                    "어떤 샘플도 두 랭크에 동시에 배정되지 않는다(중복 수)"),
        check_close("full_coverage", len(set(all_indices)) / dataset_size, 1.0, 0.0,
                    "한 에폭(epoch) 동안 모든 랭크를 합치면 데이터셋 전체를 정확히 한 번 본다(비율)"),
    ]
    data = {
        "dataset_size": dataset_size,
        "global_batch": n * b,
        "n_params": ranks[0]["n_params"],
        "global_batches": global_batches,
    }
    return Summary(data, checks)


LAB = Lab(
    name="replicas",
    description="랭크마다 다른 초기값으로 만든 모델이 DDP로 감싸는 순간 똑같아지고, DistributedSampler가 데이터를 겹치지 않게 나누는지 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=1,
    params={"per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "steps": Int(2, min=1, max=100, help="한 에폭의 스텝 수"),
            "seed_base": seed(1000), "sampler_seed": seed()},
)
