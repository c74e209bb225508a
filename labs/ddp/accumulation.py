"""Chapter 7: gradient accumulation over K micro-batches, synchronizing only on the last one."""

from __future__ import annotations

from contextlib import nullcontext

from torch.nn.parallel import DistributedDataParallel as DDP

from labs.tools.models import flat_gradients, mse_backward


def accumulate(ddp: DDP, micro_batches: list, skip_sync: bool) -> list[float]:
    """K forward+backward passes, each loss scaled by 1/K; returns the local gradients before the last one."""
    k = len(micro_batches)
    local = []
    for step, (x, y) in enumerate(micro_batches):
        last = step == k - 1
        if last:
            local = flat_gradients(ddp.module).tolist()
        # 마지막 마이크로 스텝만 동기화한다. 순전파도 no_sync() 안에 있어야 한다.
        with ddp.no_sync() if skip_sync and not last else nullcontext():
            mse_backward(ddp, x, y, scale=1.0 / k)  # 1/K: K개 평균의 평균 = 큰 배치의 평균
    return local

