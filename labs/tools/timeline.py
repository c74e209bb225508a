"""When each gradient of one backward became ready, and when each DDP bucket's All-Reduce started and finished.

Chapter 7 reads torch DDP's buckets with it (through a communication hook) and chapter 9 times its own DDPs.
"""

from __future__ import annotations

import time

from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook


class Timeline:
    """Timestamps of one backward: gradients ready per parameter, All-Reduce launch/finish per bucket."""

    def __init__(self, params: list[nn.Parameter]):
        self.start = 0.0
        self.ready: dict[int, float] = {}
        self.launched: list[dict] = []
        self.order: list[int] = []
        self.index = {id(p): i for i, p in enumerate(params)}
        for index, p in enumerate(params):
            p.register_post_accumulate_grad_hook(lambda _, i=index: self._ready(i))

    def reset(self) -> None:
        self.start = time.perf_counter()
        self.ready, self.launched, self.order = {}, [], []

    def _ready(self, index: int) -> None:
        self.ready[index] = time.perf_counter() - self.start
        self.order.append(index)

    def comm_hook(self, state, bucket):  # (no annotations: DDP checks them, and this module postpones them)
        """A DDP communication hook: ``hook(state, dist.GradBucket) -> Future[Tensor]``."""
        # DDP의 기본 동작(allreduce_hook: 나누기 N 후 All-Reduce 합)을 그대로 쓰고, 시작·끝 시각만 적는다.
        record = {"bucket": bucket.index(), "launch": time.perf_counter() - self.start,
                  "bytes": bucket.buffer().numel() * bucket.buffer().element_size(),
                  "params": sorted(self.index[id(p)] for p in bucket.parameters())}
        self.launched.append(record)

        def finished(fut):
            record["done"] = time.perf_counter() - self.start
            return fut.value()

        return allreduce_hook(state, bucket).then(finished)
