"""Count the collective operations a process group really issues during a block of code.

DDP's gradient All-Reduce is launched from C++ (its reducer's autograd hooks), so wrapping the
Python ``torch.distributed`` functions would miss it. The profiler sees every operation the
process group runs, whoever called it: work items are recorded as ``gloo:all_reduce``,
``nccl:broadcast`` and so on, with the shape and dtype of what they carried. Nothing here is
hard-coded: the counts are what ran.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch.distributed as dist
from torch.autograd.profiler import profile, record_function

PROC_IO = Path("/proc/self/io")
BACKEND_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")
MARK_PREFIX = "labs:"  # mark()로 남긴 표시: 집합 통신과 같은 시계로 잰 시각
# 집합 통신을 부른 스레드에서 디스패처가 남기는 연산(c10d::allreduce_ 등): 부른 순간. 백엔드의 작업 항목
# (gloo:all_reduce)은 gloo의 작업 스레드가 그 항목을 꺼내 실행을 시작한 순간에 찍힌다
LAUNCH_PREFIX = "c10d::"
# DDP 리듀서가 그래디언트와 버킷 사이에서 복사할 때 남기는 이름(RECORD_FUNCTION): 그래디언트 → 버킷은
# torch::distributed::reducer::copy_(통신 훅이 있을 때) 또는 ::mul_out(없을 때, 나누며 복사),
# 버킷 → 그래디언트는 torch.distributed.ddp.reducer::copy_bucket_to_grad
REDUCER_COPIES = {"torch::distributed::reducer::copy_": "grad_to_bucket",
                  "torch::distributed::reducer::mul_out": "grad_to_bucket",
                  "torch.distributed.ddp.reducer::copy_bucket_to_grad": "bucket_to_grad"}
# C++ type names the profiler reports for a work item's input, as torch dtype names.
_PROFILER_DTYPES = {"float": "float32", "double": "float64", "long int": "int64", "int": "int32",
                    "c10::Half": "float16", "c10::BFloat16": "bfloat16", "bool": "bool"}


@contextmanager
def quiet_stderr():
    """Silence what C++ writes straight to fd 2 inside the block (the profiler's start/stop banners, gloo's
    log lines for an error the caller catches and records): the page would show it as stray stderr."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


class CollectiveCounter:
    """``with CollectiveCounter() as c: ...`` then ``c.counts == {"all_reduce": 1, ...}``.

    ``items`` lists, in launch order, ``{"op": "broadcast", "numel": 16, "dtype": "float32"}``:
    the element count and dtype of each work item's first input tensor, as the profiler saw it (what
    the labs record). ``work`` lists the same items with the element counts of all input tensors
    (``numels``: a coalesced call carries several) and ``start_ns``, when the backend started running
    it: gloo's worker threads take queued items one after another, so under load that can be well
    after the call. ``launches`` lists ``(op, ns)`` for each call as the caller made it (the
    dispatcher's ``c10d::allreduce_``, ``c10d::allreduce_coalesced_``, ``c10d::barrier`` … recorded
    in the calling thread, whatever Python path led there), which is what the grader times.
    ``marks`` lists ``(name, ns)`` for each :func:`mark` made inside the block, on the same clock.
    ``copies`` counts the copies DDP's reducer made between gradients and buckets (``grad_to_bucket``,
    ``bucket_to_grad``), by the names it records for them.
    It uses the autograd profiler that ``torch.profiler.profile`` wraps: the same events, but it
    starts in milliseconds (``torch.profiler`` imports ``torch._inductor`` on first use).
    """

    def __init__(self):
        self.counts: Counter[str] = Counter()
        self.items: list[dict] = []
        self.work: list[dict] = []
        self.marks: list[tuple[str, int]] = []
        self.launches: list[tuple[str, int]] = []
        self.copies: Counter[str] = Counter()
        self._prof = profile(use_cpu=True, record_shapes=True)

    def __enter__(self) -> "CollectiveCounter":
        with quiet_stderr():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        with quiet_stderr():
            self._prof.__exit__(*exc)
        # The profiler's raw (kineto) events, not ``function_events``: that property turns every
        # recorded event (thousands per training step) into a Python object with its call tree,
        # which cost more than the training itself; only the process group's work items are needed.
        results = self._prof.kineto_results
        assert results is not None, "the profiler ran"
        events = sorted((e for e in results.events() if not e.is_hidden_event()),
                        key=lambda e: e.start_ns())
        self.marks = [(e.name(), e.start_ns()) for e in events if e.name().startswith(MARK_PREFIX)]
        self.launches = [(e.name().removeprefix(LAUNCH_PREFIX).rstrip("_"), e.start_ns())
                         for e in events if e.name().startswith(LAUNCH_PREFIX)]
        self.copies.update(REDUCER_COPIES[e.name()] for e in events if e.name() in REDUCER_COPIES)
        for event in (e for e in events if e.name().startswith(BACKEND_PREFIXES)):
            op = event.name().split(":", 1)[1]
            self.counts[op] += 1
            numels = [_numel(shape) for shape in event.shapes() or [[]]]
            dtypes = event.dtypes() or [""]
            item = {"op": op, "numel": numels[0], "dtype": _PROFILER_DTYPES.get(dtypes[0], dtypes[0])}
            self.items.append(item)
            self.work.append({**item, "numels": numels, "start_ns": event.start_ns()})

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))


def settle_collectives() -> None:
    """Wait, as the last thing inside a counter's block, until the default group's backend has finished every
    collective launched so far, so that no worker thread still writes to the profiler when the block ends.

    DDP's reducer and comm hooks wait on a collective's *future*, and gloo completes that future before its
    worker thread ends the work's profiler event: ``finishWorkGloo`` marks the future completed (running its
    ``then`` callbacks, waking the waiter), and only then ``Work::finish`` runs the event's end callback. Ending
    the block right after a backward can stop the profiler in between: ``disableProfiler`` frees the block of
    events, and the worker then writes the end time into the freed memory, a heap corruption that aborts the
    rank later (``malloc(): invalid size (unsorted)``). gloo's barrier first waits (``Work::wait``, which
    returns after ``finish``) for every work in progress or queued. It is a collective itself (``barrier`` in
    the counter's items): every rank calls it, as every rank runs the backward before it.
    """
    dist.barrier()


def carried_bytes(items: list[dict]) -> int:
    """Bytes the collectives in ``items`` (a counter's ``items``) carried: numel × element size, summed."""
    import torch

    return sum(item["numel"] * torch.empty((), dtype=getattr(torch, item["dtype"])).element_size() for item in items)


def _numel(shape: list) -> int:
    numel = 1
    for size in shape:
        numel *= size
    return numel if shape else 0


def mark(name: str) -> None:
    """A zero-length profiler event ``name`` (it must start with ``labs:``) that a counter's ``marks`` lists."""
    with record_function(name):
        pass


def written_bytes() -> int | None:
    """Bytes this process has written to files and sockets so far (Linux), else ``None``."""
    try:
        fields = dict(line.split(": ") for line in PROC_IO.read_text().splitlines())
        return int(fields["wchar"])
    except (OSError, KeyError, ValueError):
        return None
