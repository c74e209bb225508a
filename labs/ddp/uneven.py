"""Chapter 7: uneven per-rank batches. What DDP's 1/N average gives, three fixes that restore the global mean, and
``Join([ddp])`` for ranks with different numbers of batches."""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from labs.context import RankContext
from labs.tools.comms import CollectiveCounter
from labs.tools.models import fingerprint, flat_gradients, mse_backward, synthetic_regression, tiny_mlp, wrap_ddp


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


def rank_counts(world_size: int, base: int, extra: int) -> list[int]:
    """Samples (or batches) per rank: rank r gets ``base + r·extra``."""
    return [base + r * extra for r in range(world_size)]


def reference_grad(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The mean-loss gradient over all rows of ``x`` in one process (``.grad`` is not touched)."""
    loss = torch.nn.functional.mse_loss(model(x), y)
    grads = torch.autograd.grad(loss, list(model.parameters()))
    return torch.cat([g.reshape(-1).to("cpu", torch.float64) for g in grads])


def join_training(ctx: RankContext, join_batches: int, extra_batches: int, batch: int, lr: float,
                  seed: int, join: bool = True) -> dict:
    """Rank r trains on ``join_batches + r·extra_batches`` batches inside ``Join([ddp])``."""
    counts = rank_counts(ctx.world_size, join_batches, extra_batches)
    x, y = (t.to(ctx.device) for t in synthetic_regression(sum(counts) * batch, seed=seed + 1))
    start = sum(counts[:ctx.rank]) * batch
    others = max((c for r, c in enumerate(counts) if r != ctx.rank), default=0)
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    steps, solo_diff, solo_scale = [], [], []
    with CollectiveCounter() as counter:
        dist.barrier()  # 모든 랭크의 시계 0초를 맞춘다(타임라인용)
        began = time.perf_counter()
        with Join([ddp], enable=join):  # 먼저 끝난 랭크는 남은 랭크의 All-Reduce에 0을 내며 따라간다
            for step in range(counts[ctx.rank]):
                rows = slice(start + step * batch, start + (step + 1) * batch)
                local = reference_grad(model, x[rows], y[rows])  # 확인용: 통신 없이 계산한 내 그래디언트
                t0 = time.perf_counter() - began
                optimizer.zero_grad(set_to_none=True)
                mse_backward(ddp, x[rows], y[rows])
                if step >= others:  # 나머지 랭크가 모두 Join한 뒤: 혼자 남은 반복
                    solo_diff.append(float((flat_gradients(model) - local / ctx.world_size).abs().max()))
                    solo_scale.append(float((local / ctx.world_size).abs().max()))
                optimizer.step()
                steps.append([t0, time.perf_counter() - began])
        left = time.perf_counter() - began  # Join을 빠져나온 시각: 모든 랭크가 끝난 뒤
    return {"iterations": len(steps), "steps": steps, "left_join": left, "all_reduce": counter.counts["all_reduce"],
            "solo_diff": solo_diff, "solo_scale": solo_scale, "fingerprint": fingerprint(model)}
