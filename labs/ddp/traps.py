"""Chapter 10: DDP mistakes as bug/fix pairs of functions, the lines the chapter shows.

The two functions of a pair take the same arguments; the ``traps`` lab (:mod:`labs.lessons.traps`) runs one of
them on real ranks and checks the symptom of the bug or the repair of the fix. The unused-parameter trap has
no pair: its model (:class:`TwoHeads`) is the bug, and the fix is an argument of ``DistributedDataParallel``.
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, DistributedSampler

from labs.context import RankContext
from labs.tools.models import rank_batch, tiny_mlp

# ----------------------------------------------------------------------------- 1. no_sync


def micro_step_bug(ddp, x, y, k: int, last: bool) -> None:
    loss = F.mse_loss(ddp(x), y) / k             # 순전파가 no_sync() 밖에 있다
    with nullcontext() if last else ddp.no_sync():
        loss.backward()                           # 역전파만 no_sync() 안에


def micro_step_fix(ddp, x, y, k: int, last: bool) -> None:
    with nullcontext() if last else ddp.no_sync():
        loss = F.mse_loss(ddp(x), y) / k         # 순전파도 no_sync() 안에
        loss.backward()


# ----------------------------------------------------------------------------- 2. unused parameter

class TwoHeads(nn.Module):
    """A body and two heads; ``forward`` uses only ``head`` (``aux_head`` never gets a gradient)."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)
        self.aux_head = nn.Linear(8, 2)  # 쓰지 않는 파라미터

    def forward(self, x):
        return self.head(self.body(x))


# ----------------------------------------------------------------------------- 3. evaluation on rank 0 only

def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    was_training = model.training
    model.eval()
    with torch.no_grad():
        loss = float(F.mse_loss(model(x), y))
    model.train(was_training)  # 평가가 끝나면 학습 모드로 되돌린다
    return loss


def eval_rank0_bug(ctx: RankContext, ddp: nn.Module, xv: torch.Tensor, yv: torch.Tensor) -> None:
    if ctx.rank == 0:
        evaluate(ddp, xv, yv)         # 버그: DDP 래퍼로, 랭크 0에서만 평가
    dist.barrier()                    # 예: 체크포인트를 저장하기 전에 모두 기다린다


def eval_rank0_fix(ctx: RankContext, ddp: DDP, xv: torch.Tensor,
                   yv: torch.Tensor) -> tuple[float | None, float]:
    module_loss = evaluate(ddp.module, xv, yv) if ctx.rank == 0 else None   # 고침 1: 감싸지 않은 모델
    xs, ys = rank_batch(xv, yv, ctx.rank, ctx.world_size, 8)                 # 고침 2: 모든 랭크가 제 몫을 평가
    total = torch.tensor([evaluate(ddp, xs, ys) * len(xs), len(xs)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(total)
    dist.barrier()
    return module_loss, float(total[0] / total[1])


# ----------------------------------------------------------------------------- 4. sampler.set_epoch

def epoch_orders_bug(sampler: DistributedSampler, loader: DataLoader, epochs: int) -> list[list[int]]:
    orders = []
    for epoch in range(epochs):       # 버그: set_epoch()를 부르지 않는다
        orders.append([int(i) for (batch,) in loader for i in batch])
    return orders


def epoch_orders_fix(sampler: DistributedSampler, loader: DataLoader, epochs: int) -> list[list[int]]:
    orders = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)      # 고침: 에폭마다 섞는 시드를 바꾼다
        orders.append([int(i) for (batch,) in loader for i in batch])
    return orders


# ----------------------------------------------------------------------------- 5. a collective only rank 0 calls

def log_loss_bug(ctx: RankContext, loss: float) -> float | None:
    total = torch.tensor([loss, 1.0], device=ctx.device)
    if ctx.rank == 0:
        dist.all_reduce(total)            # 버그: 랭크 0만 집합 통신을 부른다
        return float(total[0] / total[1])
    return None


def log_loss_fix(ctx: RankContext, loss: float) -> float | None:
    total = torch.tensor([loss, 1.0], device=ctx.device)
    dist.all_reduce(total)                # 고침: 모든 랭크가 부르고, 출력만 랭크 0이 한다
    return float(total[0] / total[1]) if ctx.rank == 0 else None


# ----------------------------------------------------------------------------- 6. different models across ranks

def shape_model_bug(ctx: RankContext, seed: int) -> nn.Module:
    torch.manual_seed(seed + ctx.rank)               # 초기값은 일부러 랭크마다 다르게
    return tiny_mlp(hidden=8 + ctx.rank)             # 버그: 랭크마다 다른 은닉층 크기


def shape_model_fix(ctx: RankContext, seed: int) -> nn.Module:
    torch.manual_seed(seed + ctx.rank)               # 초기값은 일부러 랭크마다 다르게
    return tiny_mlp(hidden=8)                        # 고침: 모든 랭크가 같은 모양 (값은 DDP가 맞춘다)


# ----------------------------------------------------------------------------- 7. more ranks, same lr

def learning_rate_bug(base_lr: float, world_size: int, step: int, warmup_steps: int) -> float:
    return base_lr                                    # 버그: 랭크 수를 바꿔도 η 그대로


def learning_rate_fix(base_lr: float, world_size: int, step: int, warmup_steps: int) -> float:
    target = base_lr * world_size                     # 고침: 선형 스케일링 Nη
    if step < warmup_steps:                           # + 워밍업: η에서 Nη까지 선형으로
        return base_lr + (target - base_lr) * (step + 1) / warmup_steps
    return target


# ----------------------------------------------------------------------------- 8. the same seed for data randomness

class DropoutMLP(nn.Module):
    """Dropout on the inputs, then the perceptron; the last dropout mask is kept for inspection."""

    def __init__(self, in_features: int):
        super().__init__()
        self.dropout = nn.Dropout(0.5)
        self.net = tiny_mlp(in_features=in_features)
        self.last_mask = None

    def forward(self, x):
        dropped = self.dropout(x)
        self.last_mask = (dropped != 0).to(torch.uint8)
        return self.net(dropped)


def seeded_model_bug(ctx: RankContext, seed: int) -> DropoutMLP:
    torch.manual_seed(seed)                          # 버그: 모델도 데이터 쪽 난수(드롭아웃, 증강)도 같은 시드
    return DropoutMLP(16)


def seeded_model_fix(ctx: RankContext, seed: int) -> DropoutMLP:
    torch.manual_seed(seed)                          # 모델 초기화: 모든 랭크가 같은 시드
    model = DropoutMLP(16)
    torch.manual_seed(seed + 1 + ctx.rank)           # 고침: 데이터 쪽 난수는 랭크마다 다른 시드
    return model


# ----------------------------------------------------------------------------- 9. activation checkpointing

class TiedBlocks(nn.Module):
    """One hidden block applied twice (its weights shared across depth), each pass under activation checkpointing:
    its activations are recomputed in backward instead of kept."""

    def __init__(self, use_reentrant: bool, width: int = 16):
        super().__init__()
        self.inp, self.block, self.out = nn.Linear(4, width), nn.Linear(width, width), nn.Linear(width, 2)
        self.use_reentrant = use_reentrant

    def hidden(self, h: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.block(h))

    def forward(self, x):
        h = self.inp(x)
        for _ in range(2):  # 같은 block을 두 번: 그 파라미터의 그래디언트가 역전파에서 두 번 쌓인다
            h = checkpoint(self.hidden, h, use_reentrant=self.use_reentrant)
        return self.out(h)


def checkpointed_bug(device: torch.device) -> DDP:
    return DDP(TiedBlocks(use_reentrant=True).to(device))   # 버그: 재진입(reentrant) 체크포인트 + 두 번 쓰는 파라미터


def checkpointed_fix(device: torch.device) -> DDP:
    return DDP(TiedBlocks(use_reentrant=False).to(device))  # 고침: 재진입하지 않는 체크포인트


def checkpointed_static_fix(device: torch.device) -> DDP:
    # 고침 2: 재진입 체크포인트는 그대로, DDP가 첫 반복에서 그래프를 배운다(반복마다 같은 그래프일 때만)
    return DDP(TiedBlocks(use_reentrant=True).to(device), static_graph=True)
