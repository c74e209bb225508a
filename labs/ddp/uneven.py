"""Chapter 7: uneven per-rank batches. What DDP's 1/N average gives, and three fixes that restore the global mean."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.context import RankContext
from labs.tools.models import flat_gradients, mse_backward


def all_reduce_count(n: int, op: dist.ReduceOp.RedOpType, device: torch.device) -> int:
    count = torch.tensor([n], device=device)
    dist.all_reduce(count, op=op)
    return int(count.item())


def ddp_grad(ddp: DDP, x: torch.Tensor, y: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
    """The gradient DDP leaves in ``.grad`` after one forward+backward (All-Reduce included)."""
    ddp.module.zero_grad(set_to_none=True)
    mse_backward(ddp, x, y, scale)
    return flat_gradients(ddp.module)


def pad_to(x: torch.Tensor, size: int) -> torch.Tensor:
    """Repeat ``x``'s rows from the start until it has ``size`` rows."""
    return x[torch.arange(size, device=x.device) % len(x)]


def fix_gradients(ctx: RankContext, ddp: DDP, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """DDP's averaged gradient for the naive loss and for each fix, on this rank's ``n_i`` samples."""
    n = len(x)
    total = all_reduce_count(n, dist.ReduceOp.SUM, ctx.device)  # Σn: 각 랭크는 자기 n_i만 안다
    smallest = all_reduce_count(n, dist.ReduceOp.MIN, ctx.device)
    largest = all_reduce_count(n, dist.ReduceOp.MAX, ctx.device)
    return {
        "naive": ddp_grad(ddp, x, y),
        # (가) 손실에 n_i·N/Σn을 곱하면 DDP의 1/N 평균이 Σ n_i g_i / Σn, 즉 전역 배치의 평균이 된다.
        "weighted": ddp_grad(ddp, x, y, scale=n * ctx.world_size / total),
        # (나) 모든 랭크를 가장 작은 n_i에 맞춰 자르거나(drop_last), 가장 큰 n_i까지 반복해 채운다(pad).
        "drop_last": ddp_grad(ddp, x[:smallest], y[:smallest]),
        "pad": ddp_grad(ddp, pad_to(x, largest), pad_to(y, largest)),
    }

