"""Watch the All-Reduce calls a from-scratch DDP makes, from outside its code (chapter 9).

:class:`AllReduceTrace` replaces ``torch.distributed.all_reduce`` for the duration of a ``with``
block. Each call is recorded (its size, when it was launched and finished, how many gradients
were ready at launch, whether its handle was waited on) and then passed to the real function,
so the code under test needs no recording interface of its own.

With ``checked=True`` every call is first compared across ranks (one small All-Gather of its
element count): ranks that disagree on the bucket layout raise :class:`CollectiveMismatch`,
naming each rank's call, instead of hanging or silently adding unrelated numbers. The same idea
as ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which checks every collective's shapes across ranks.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d

END = 0  # end_iteration()이 보내는 표시: "이번 반복에는 All-Reduce가 더 없다"


class CollectiveMismatch(RuntimeError):
    """Ranks issued different All-Reduce calls at the same position."""

    def __init__(self, index: int, numels: list[int]):
        self.index = index
        self.numels = numels
        calls = ", ".join(f"랭크 {r}: " + ("호출 없음(반복 끝)" if n == END else f"{n}개 원소") for r, n in enumerate(numels))
        super().__init__(f"{index + 1}번째 All-Reduce에서 랭크들이 서로 다른 호출을 했습니다 ({calls})")


class _TracedWork:
    """The async handle given back to the caller: records ``wait()``, forwards everything else."""

    def __init__(self, work, record: dict):
        self._work = work
        self._record = record

    def wait(self, *args, **kwargs):
        self._record["waited"] = True
        return self._work.wait(*args, **kwargs)

    def get_future(self):
        self._record["waited"] = True  # 퓨처를 받아 간 코드가 기다린다고 본다
        return self._work.get_future()

    def __getattr__(self, name):
        return getattr(self._work, name)


class AllReduceTrace:
    """``with AllReduceTrace() as trace: ...``; ``trace.calls`` lists every All-Reduce, in launch order."""

    def __init__(self, device: torch.device, checked: bool = False, ready: Callable[[], int] | None = None):
        self.device = device
        self.checked = checked
        self._ready = ready or (lambda: 0)
        self._real = dist.all_reduce
        self.start = time.perf_counter()
        self.calls: list[dict] = []
        self._works: list[tuple[dict, object]] = []

    def __enter__(self) -> "AllReduceTrace":
        dist.all_reduce = distributed_c10d.all_reduce = self._all_reduce
        return self

    def __exit__(self, *exc) -> None:
        dist.all_reduce = distributed_c10d.all_reduce = self._real

    def reset(self) -> None:
        """Start a new iteration: times count from now, the call list is empty."""
        self.start = time.perf_counter()
        self.calls, self._works = [], []

    def now(self) -> float:
        return time.perf_counter() - self.start

    def _all_reduce(self, tensor, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if self.checked:
            self._agree(tensor.numel())
        record = {"numel": tensor.numel(), "launch": self.now(), "ready": self._ready(), "async": bool(async_op),
                  "waited": not async_op, "done": None}
        self.calls.append(record)
        work = self._real(tensor, op=op, group=group, async_op=async_op)
        if not async_op:
            record["done"] = self.now()
            return work

        def finished(fut):
            record["done"] = self.now()
            return fut.value()

        work.get_future().then(finished)
        self._works.append((record, work))
        return _TracedWork(work, record)

    def _agree(self, numel: int) -> None:
        mine = torch.tensor([numel], dtype=torch.int64, device=self.device)
        gathered = [torch.zeros_like(mine) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, mine)
        numels = [int(t) for t in gathered]
        if len(set(numels)) > 1:
            raise CollectiveMismatch(len(self.calls), numels)

    def end_iteration(self) -> None:
        """With ``checked``: make sure no rank still has an All-Reduce to make in this iteration."""
        if self.checked:
            self._agree(END)

    def unwaited(self) -> int:
        """Async handles nobody waited on (so far)."""
        return sum(not record["waited"] for record, _ in self._works)

    def wait_leftovers(self) -> None:
        """Wait on the handles the code under test forgot, so the next collective is not mixed up with them."""
        for record, work in self._works:
            if not record["waited"]:
                work.wait()
