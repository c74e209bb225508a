"""When each All-Reduce of a from-scratch DDP started and finished, from outside its code (chapter 9's timeline).

:class:`AllReduceTrace` replaces ``torch.distributed.all_reduce`` for the duration of a ``with``
block. Each call is recorded (its size, when it was launched and when it finished) and then passed
to the real function, so the staircase's steps need no recording interface of their own. The
grader does not use it: it judges any call path from the process group's own work items
(:mod:`labs.grading.probes`).
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d


class AllReduceTrace:
    """``with AllReduceTrace(device) as trace: ...``; ``trace.calls`` lists every All-Reduce, in launch order."""

    def __init__(self, device: torch.device):
        self.device = device
        self._real = dist.all_reduce
        self.start = time.perf_counter()
        self.calls: list[dict] = []

    def __enter__(self) -> "AllReduceTrace":
        dist.all_reduce = distributed_c10d.all_reduce = self._all_reduce
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = distributed_c10d.all_reduce = self._real

    def reset(self) -> None:
        """Start a new iteration: times count from now, the call list is empty."""
        self.start = time.perf_counter()
        self.calls = []

    def now(self) -> float:
        return time.perf_counter() - self.start

    def _all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        record = {"numel": tensor.numel(), "launch": self.now(), "done": None}
        self.calls.append(record)
        work = self._real(tensor, op=op, group=group, async_op=async_op)
        if not async_op:
            record["done"] = self.now()
            return work

        def finished(fut):
            record["done"] = self.now()
            return fut.value()

        work.get_future().then(finished)
        return work
