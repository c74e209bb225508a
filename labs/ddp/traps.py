"""Chapter 10: DDP mistakes as bug/fix pairs of functions, the lines the chapter shows.

Each pair takes the same arguments; the lab (:mod:`labs.lessons.traps`) runs one of them on real ranks and
checks the symptom of the bug or the repair of the fix.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

from labs.context import RankContext
from labs.models import rank_batch, tiny_mlp


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


def eval_rank0_fix(ctx: RankContext, ddp: nn.Module, xv: torch.Tensor,
                   yv: torch.Tensor) -> tuple[float | None, float]:
    module_loss = evaluate(ddp.module, xv, yv) if ctx.rank == 0 else None   # 고침 1: 감싸지 않은 모델
    xs, ys = rank_batch(xv, yv, ctx.rank, ctx.world_size, 8)                 # 고침 2: 모든 랭크가 제 몫을 평가
    total = torch.tensor([evaluate(ddp, xs, ys) * len(xs), len(xs)], dtype=torch.float64, device=ctx.device)
    dist.all_reduce(total)
    dist.barrier()
    return module_loss, float(total[0] / total[1])


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
