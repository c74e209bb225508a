"""When each gradient of one backward became ready, and when each DDP bucket's All-Reduce started and finished.

Chapter 7 reads torch DDP's buckets with it (through a communication hook, :func:`record_overlap`) and chapter 9
times its own DDPs.
"""

from __future__ import annotations

import time

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from ..context import RankContext
from .models import layer_stack, wrap_ddp

DEFAULT = "default"  # bucket_cap_mb를 주지 않은 경우(DDP 기본값)


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


def ddp_kwargs(cap: str) -> dict:
    """DDP keyword arguments for one cap: ``default`` passes nothing, so DDP picks its own."""
    return {} if cap == DEFAULT else {"bucket_cap_mb": float(cap)}


def record_overlap(ctx: RankContext, cap: str, x: torch.Tensor, iterations: int, width: int,
                   depth: int) -> dict:
    """One timed backward (after the buckets were rebuilt) with a recording communication hook."""
    torch.manual_seed(0)
    model = layer_stack(width, depth)
    ddp = wrap_ddp(model, ctx.device, **ddp_kwargs(cap))
    timeline = Timeline(list(model.parameters()))
    ddp.register_comm_hook(None, timeline.comm_hook)
    for _ in range(iterations):
        timeline.reset()
        loss = ddp(x).square().mean()
        backward_called = time.perf_counter() - timeline.start
        loss.backward()  # 이 호출 안에서 훅이 버킷마다 All-Reduce를 시작한다
        backward_returned = time.perf_counter() - timeline.start
    return {"ready": [timeline.ready[i] for i in range(len(timeline.ready))], "buckets": timeline.launched,
            "backward_called": backward_called, "backward_returned": backward_returned}
