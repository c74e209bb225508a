"""Chapters 3, 4 and 7: a rank's own gradient g_i, the gradient DDP leaves after backward, and why it is averaged."""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.context import RankContext
from labs.tools.comms import CollectiveCounter
from labs.tools.models import flat_gradients, mse_backward, rank_batch, synthetic_regression, tiny_mlp
from labs.tools.primitives import max_abs_diff


def local_gradient(ddp: DDP, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, CollectiveCounter]:
    """This rank's own gradient g_i, and the collectives its forward and backward ran."""
    # 로컬 그래디언트 g_i: no_sync() 안에서는 순전파·역전파 모두 통신 없이 끝난다
    with ddp.no_sync(), CollectiveCounter() as local_comm:
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
    local = flat_gradients(ddp.module)
    ddp.zero_grad(set_to_none=True)
    return local, local_comm


class DDPGradient(NamedTuple):
    """What :func:`ddp_gradient` measured."""

    synced: torch.Tensor                    # backward가 돌아온 직후의 .grad (평탄화)
    loss: torch.Tensor
    backward_comm: CollectiveCounter        # 역전파 동안의 집합 통신
    seen_in_backward: list[list[float]]     # 훅이 본, 막 계산된 그래디언트


def ddp_gradient(ddp: DDP, x: torch.Tensor, y: torch.Tensor, watched: torch.Tensor) -> DDPGradient:
    """The same computation under DDP: the gradient after ``loss.backward()``, the loss, the collectives of the
    backward and what a hook on ``watched`` saw while autograd computed it."""
    # DDP 그래디언트: 같은 계산, 이번에는 loss.backward() 안에서 All-Reduce가 일어난다
    seen_in_backward: list[list[float]] = []  # 훅: autograd가 이 파라미터의 그래디언트를 막 계산한 순간의 값
    hook = watched.register_hook(lambda grad: seen_in_backward.append(grad.detach().cpu().reshape(-1).tolist()))
    loss = nn.functional.mse_loss(ddp(x), y)
    with CollectiveCounter() as backward_comm:
        loss.backward()
    hook.remove()
    synced = flat_gradients(ddp.module)       # backward가 돌아온 직후의 .grad
    return DDPGradient(synced, loss, backward_comm, seen_in_backward)


def gradient_mean_vs_global(ctx: RankContext, per_rank_batch: int, seed: int) -> dict:
    """g_i on this rank's B/N samples vs. the gradient one process gets on all B samples."""
    n = ctx.world_size
    x, y = synthetic_regression(n * per_rank_batch, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    torch.manual_seed(seed)
    model = tiny_mlp().to(ctx.device)  # 모든 랭크가 같은 시드: 같은 복제본
    mse_backward(model, *rank_batch(x, y, ctx.rank, n, per_rank_batch))
    g_i = flat_gradients(model)  # 내 미니배치(B/N개)의 평균 손실 L_i의 그래디언트
    model.zero_grad()
    mse_backward(model, x, y)
    g_global = flat_gradients(model)  # 한 프로세스가 전역 배치 B개 전체로 구한 그래디언트
    total = g_i.to(ctx.device, torch.float32)
    dist.all_reduce(total)  # Σ g_i
    total = total.to("cpu", torch.float64)
    return {
        "grad_local_vs_global": max_abs_diff(g_i, g_global),
        "grad_mean_vs_global": max_abs_diff(total / n, g_global),
        "grad_sum_norm_ratio": float(total.norm() / g_global.norm()),
        "grad_global_max": float(g_global.abs().max()),
    }

