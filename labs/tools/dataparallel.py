"""Chapter 11: DDP (one process per rank) against ``nn.DataParallel`` (one process, a thread per GPU), measured."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from ..context import RankContext
from .models import mse_backward, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from .primitives import sync

DP_STEPS = 3  # DataParallel과 DDP의 스텝 시간을 재는 스텝 수


def sharding_model(hidden: int) -> nn.Module:
    """The model of the sharding and DataParallel parts: 16 → hidden → 8."""
    return tiny_mlp(in_features=16, hidden=hidden, out_features=8)


class CountingDataParallel(nn.DataParallel):
    """``nn.DataParallel`` that counts the four things its ``forward`` does on every call."""

    COUNTED = ("scatter", "replicate", "parallel_apply", "gather")

    def __init__(self, module: nn.Module, **kwargs):
        super().__init__(module, **kwargs)
        self.calls = dict.fromkeys(self.COUNTED, 0)
        for name in self.COUNTED:  # forward()가 부르는 self.scatter 등을 세는 함수로 바꿔 끼운다
            setattr(self, name, self._counted(name, getattr(self, name)))

    def _counted(self, name: str, method):
        def counted(*args, **kwargs):
            self.calls[name] += 1
            return method(*args, **kwargs)
        return counted


def where_forward_runs(module: nn.Module) -> list:
    """Register a hook that appends (pid, thread id) each time the first layer runs forward."""
    seen = []
    first = next(m for m in module.modules() if isinstance(m, nn.Linear))
    first.register_forward_pre_hook(lambda *_: seen.append([os.getpid(), threading.get_ident()]))
    return seen


def timed_steps(model: nn.Module, batches, device: torch.device, lr: float) -> list[float]:
    """Seconds per SGD step (forward, backward, update) over ``batches``."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    times = []
    for x, y in batches:
        sync(device)
        start = time.perf_counter()
        mse_backward(model, x, y)
        optimizer.step()
        optimizer.zero_grad()
        sync(device)
        times.append(time.perf_counter() - start)
    return times


def measure_dataparallel(model: nn.Module, data: tuple, steps: int, lr: float) -> dict:
    """DataParallel over every visible GPU (none on a CPU machine), on the whole global batch."""
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", 0) if gpus else torch.device("cpu")
    model = model.to(device)
    dp = CountingDataParallel(model)
    seen = where_forward_runs(model)
    x, y = (t.to(device) for t in data)
    with torch.no_grad():
        same_as_module = bool(torch.equal(dp(x), model(x)))
    dp.calls = dict.fromkeys(dp.calls, 0)
    del seen[:]
    times = timed_steps(dp, [(x, y)] * steps, device, lr)
    return {"device_ids": list(dp.device_ids), "gpus": gpus, "calls": dp.calls, "forward_where": seen,
            "step_seconds": times, "output_equals_module": same_as_module, "pid": os.getpid(),
            "main_thread": threading.main_thread().ident}


def dataparallel_part(ctx: RankContext, hidden: int, per_rank_batch: int, steps: int, lr: float,
                      seed: int) -> dict:
    data = synthetic_regression(ctx.world_size * per_rank_batch, in_features=16, out_features=8, seed=seed)
    torch.manual_seed(seed)
    ddp = wrap_ddp(sharding_model(hidden), ctx.device)
    seen = where_forward_runs(ddp.module)
    x, y = (t.to(ctx.device) for t in rank_batch(*data, ctx.rank, ctx.world_size, per_rank_batch))
    record: dict[str, Any] = {"pid": os.getpid(), "ppid": os.getppid(), "main_thread": threading.main_thread().ident,
              "threads_alive": threading.active_count(),
              "ddp_step_seconds": timed_steps(ddp, [(x, y)] * steps, ctx.device, lr), "forward_where": seen}
    dist.barrier()  # 모든 랭크의 DDP 측정이 끝난 뒤, 랭크 0만 DataParallel을 재고 나머지는 기다린다
    if ctx.rank == 0:
        torch.manual_seed(seed)
        record["dataparallel"] = measure_dataparallel(sharding_model(hidden), data, steps, lr)
    dist.barrier()
    return record
