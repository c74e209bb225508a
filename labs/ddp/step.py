"""Chapter 8: one training step, the same for every variant that is timed.

Without communication, with the loop DDP replaces (:func:`labs.ddp.allreduce.average_gradients` after
backward), under DDP, and under DDP with gradient accumulation in ``no_sync()``.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Callable

import torch
from torch.nn.parallel import DistributedDataParallel as DDP


def make_train_step(model: DDP, optimizer: torch.optim.Optimizer, x: torch.Tensor,
                    after_backward: Callable[[], None] | None = None, micro_steps: int = 1) -> Callable[[], None]:
    """One optimizer step over ``micro_steps`` micro-batches (gradient accumulation).

    Under DDP every backward all-reduces, except inside ``no_sync()``: there the first K-1
    micro-steps only accumulate, and the last one all-reduces the sum (chapter 7).
    """
    def step() -> None:
        optimizer.zero_grad(set_to_none=False)
        for i in range(micro_steps):
            with model.no_sync() if i < micro_steps - 1 else nullcontext():
                (model(x).square().mean() / micro_steps).backward()
        if after_backward:
            after_backward()
        optimizer.step()
    return step
