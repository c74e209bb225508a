"""Chapter 1: the replication step every rank runs, and the loader that gives a rank its own data."""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from labs.context import RankContext
from labs.tools.models import fingerprint, flat_parameters, tiny_mlp
from labs.tools.primitives import device_ids


def replicate(ctx: RankContext, seed_base: int) -> tuple[DDP, torch.Tensor, str]:
    """A model built from a different seed on every rank, then wrapped in DDP; its parameters before wrapping."""
    # 랭크마다 일부러 다른 시드로 모델을 만든다: 이 시점의 복제본은 서로 다르다.
    torch.manual_seed(seed_base + ctx.rank)
    model = tiny_mlp().to(ctx.device)
    before, fingerprint_before = flat_parameters(model), fingerprint(model)

    # DDP로 감싸면 생성자가 랭크 0의 파라미터를 모든 랭크에 브로드캐스트한다.
    return DDP(model, device_ids=device_ids(ctx.device)), before, fingerprint_before


def rank_loader(ctx: RankContext, dataset, per_rank_batch: int,
                sampler_seed: int) -> tuple[DistributedSampler[int], DataLoader]:
    """This rank's shard of ``dataset`` and the loader that cuts it into mini-batches of B/N."""
    # DistributedSampler: 데이터셋 인덱스를 섞어 N개 샤드로 나누고, 각 랭크가 B/N씩 미니배치를 만든다.
    sampler: DistributedSampler[int] = DistributedSampler(
        dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=sampler_seed)
    sampler.set_epoch(0)
    return sampler, DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler)

