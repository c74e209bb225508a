"""Chapters 5, 7 and 11: each rank's training loop. The update w ← w − ηg runs on every replica without
communication, and without DDP (a bare module per rank) the replicas drift apart."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, TypedDict

import torch
from torch import nn

from labs.context import RankContext
from labs.tools.comms import CollectiveCounter
from labs.tools.models import (
    fingerprint,
    fingerprint_tensors,
    flat_parameters,
    mse_backward,
    rank_batch,
    synthetic_regression,
    tiny_mlp,
    wrap_ddp,
)
from labs.tools.primitives import make_optimizer


class TrainRun(TypedDict):
    """One run of :func:`train` on one rank: after every step (and before the first)."""

    params: list[list[float]]
    fingerprints: list[str]
    train_collectives: list[dict[str, int]]  # 스텝마다 순전파·역전파의 집합 통신 수
    step_collectives: list[dict[str, int]]   # 스텝마다 optimizer.step()의 집합 통신 수
    optimizer_state: str


def optimizer_state_fingerprint(optimizer: torch.optim.Optimizer) -> str:
    """A hash of every state tensor (momentum buffers, Adam's exp_avg/exp_avg_sq, step counts)."""
    return fingerprint_tensors(value for per_param in optimizer.state.values()
                               for _, value in sorted(per_param.items()) if torch.is_tensor(value))


def train(ctx: RankContext, optimizer: str, synced: bool, steps: int, per_rank_batch: int,
          lr: float, seed: int) -> TrainRun:
    """``steps`` updates on this rank's B/N samples per step; records after every step."""
    torch.manual_seed(seed)
    model = wrap_ddp(tiny_mlp(), ctx.device)
    opt = make_optimizer(optimizer, model.parameters(), lr)
    x, y = synthetic_regression(steps * ctx.world_size * per_rank_batch, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    record: TrainRun = {"params": [flat_parameters(model.module).tolist()], "fingerprints": [fingerprint(model.module)],
                        "train_collectives": [], "step_collectives": [], "optimizer_state": ""}
    for step in range(steps):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, step)  # 이 스텝 전역 배치 중 내 몫
        with CollectiveCounter() as in_fwd_bwd, (nullcontext() if synced else model.no_sync()):
            mse_backward(model, xb, yb)  # DDP: 여기서 그래디언트 All-Reduce
        with CollectiveCounter() as in_step:
            opt.step()  # w ← w − η g: 각 랭크가 자기 복사본에서 혼자 계산한다
        opt.zero_grad()
        record["train_collectives"].append(in_fwd_bwd.as_dict())
        record["step_collectives"].append(in_step.as_dict())
        record["params"].append(flat_parameters(model.module).tolist())
        record["fingerprints"].append(fingerprint(model.module))
    record["optimizer_state"] = optimizer_state_fingerprint(opt)
    return record


def full_data_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))


def train_replica(ctx: RankContext, synced: bool, data: tuple, steps: int, per_rank_batch: int,
                  batches_per_epoch: int, lr: float, seed: int) -> dict:
    """SGD on this rank's shard, cycling over its mini-batches; records after every step."""
    torch.manual_seed(seed)  # 모든 랭크가 같은 초기값에서 출발한다
    plain = tiny_mlp().to(ctx.device)
    model = wrap_ddp(plain, ctx.device) if synced else plain  # DDP는 plain을 감쌀 뿐: 파라미터는 같은 텐서
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x_all, y_all = (t.to(ctx.device) for t in data)
    record: dict[str, Any] = {"params": [flat_parameters(plain).tolist()], "full_loss": [full_data_loss(plain, x_all, y_all)]}
    for step in range(steps):
        xb, yb = rank_batch(x_all, y_all, ctx.rank, ctx.world_size, per_rank_batch, step % batches_per_epoch)
        mse_backward(model, xb, yb)  # DDP: 여기서 그래디언트 평균. 맨 모듈: 자기 g_i 그대로
        optimizer.step()
        optimizer.zero_grad()
        record["params"].append(flat_parameters(plain).tolist())
        record["full_loss"].append(full_data_loss(plain, x_all, y_all))
    record["fingerprint"] = fingerprint(plain)
    return record
