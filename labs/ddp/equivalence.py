"""Chapter 5: N ranks × B/N samples under DDP against one model on the whole global batch B, step by step."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.context import RankContext
from labs.tools.models import mse_backward
from labs.tools.primitives import max_abs_diff


def step_permutation(global_batch: int, seed: int, step: int) -> torch.Tensor:
    """The same reshuffle of the global batch on every rank (a seeded permutation per step)."""
    return torch.randperm(global_batch, generator=torch.Generator().manual_seed(seed * 1000 + step))


def train_both(ctx: RankContext, local: nn.Module, ddp: DDP, x: torch.Tensor, y: torch.Tensor, steps: int,
               lr: float, seed: int, scale: float) -> tuple[list, list, list]:
    """Each step, ``local`` learns from the whole global batch and ``ddp`` from this rank's B/N of it; the largest
    gradient and parameter differences after every step, and every step's permutation of the batch."""
    b = len(x) // ctx.world_size
    opt_local = torch.optim.SGD(local.parameters(), lr=lr)
    opt_ddp = torch.optim.SGD(ddp.parameters(), lr=lr)
    diffs, grad_diffs, perms = [], [], []
    for step in range(steps):
        perm = step_permutation(len(x), seed, step)
        xs, ys = x[perm.to(ctx.device)], y[perm.to(ctx.device)]
        mine = slice(ctx.rank * b, (ctx.rank + 1) * b)
        mse_backward(local, xs, ys)  # 전역 배치 전체의 평균 손실
        mse_backward(ddp, xs[mine], ys[mine], scale)  # 내 몫의 평균 손실 L_i (DDP가 그래디언트를 평균)
        grad_diffs.append(max_abs_diff([p.grad for p in local.parameters()], [p.grad for p in ddp.parameters()]))
        for opt in (opt_local, opt_ddp):
            opt.step()
            opt.zero_grad()
        diffs.append(max_abs_diff(list(local.parameters()), list(ddp.module.parameters())))
        perms.append(perm.tolist())
    return diffs, grad_diffs, perms

