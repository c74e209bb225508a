"""One optimizer step with ``GradScaler`` and gradient clipping, in the order PyTorch documents.

``scaler.scale(loss).backward()`` leaves every ``.grad`` multiplied by the loss scale (65536 by default).
Clipping must see the gradients at their real size, so ``scaler.unscale_(optimizer)`` divides them back
first; ``scaler.step`` then knows they are unscaled and does not divide again (torch 2.13,
``torch/amp/grad_scaler.py``, ``GradScaler.unscale_``: "to enable clipping of unscaled gradients").
Under DDP the backward has averaged the gradients, so every rank clips the same values.
"""

from __future__ import annotations

import torch


def clipped_scaled_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                        loss: torch.Tensor, max_norm: float) -> float:
    """scale → backward → unscale_ → clip → step → update; the total norm clipping saw (unscaled)."""
    scaler.scale(loss).backward()  # .grad = 배율 × 진짜 그래디언트 (DDP: 여기서 All-Reduce)
    scaler.unscale_(optimizer)  # .grad를 배율로 나눠 진짜 크기로 되돌린다 (inf/NaN도 여기서 찾아 둔다)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # 진짜 크기의 노름으로 자른다
    scaler.step(optimizer)  # inf가 없으면 optimizer.step(): 이미 unscale_ 했으므로 다시 나누지 않는다
    scaler.update()
    return float(norm)
