"""Chapter 2: each rank's training loop, with the collectives of every forward and every backward counted apart."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.context import RankContext
from labs.tools.comms import CollectiveCounter
from labs.tools.models import rank_batch


def _rebuilt(ddp: nn.Module) -> bool:
    # DDP가 "버킷을 다시 만들었다"고 기록하는 내부 플래그 (_pre_forward에서 한 번 True가 된다)
    return bool(getattr(ddp, "_has_rebuilt_buckets", False))


def train_loop(ctx: RankContext, ddp: DDP, optimizer: torch.optim.Optimizer, data: tuple[torch.Tensor, torch.Tensor],
               per_rank_batch: int, iterations: int, record: dict, bn: nn.Module | None) -> dict:
    """``iterations`` DDP steps; each forward's and backward's collectives go to ``record``."""
    for step in range(iterations):
        x, y = (t.to(ctx.device) for t in rank_batch(*data, ctx.rank, ctx.world_size, per_rank_batch, step))
        if bn is None:  # 비교용: 같은 파라미터로 전역 배치 B개 전체의 손실 (DDP를 거치지 않음)
            xg, yg = (t.to(ctx.device) for t in rank_batch(*data, 0, 1, ctx.world_size * per_rank_batch, step))
            with torch.no_grad():
                record["global_losses"].append(float(nn.functional.mse_loss(ddp.module(xg), yg)))
        rebuilt_before = _rebuilt(ddp)
        with CollectiveCounter() as fwd:              # 순전파: L_i = loss(model(x_i))
            loss = nn.functional.mse_loss(ddp(x), y)
        with CollectiveCounter() as bwd:              # 역전파
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        record["rebuilt"].append(_rebuilt(ddp) and not rebuilt_before)
        record["losses"].append(float(loss.detach()))
        for phase, counter in (("forward", fwd), ("backward", bwd)):
            record[phase].append(counter.as_dict())
            record[f"{phase}_items"].append(counter.items)
    return record
