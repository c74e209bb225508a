"""Count the collective operations a process group really issues during a block of code.

DDP's gradient All-Reduce is launched from C++ (its reducer's autograd hooks), so wrapping the
Python ``torch.distributed`` functions would miss it. The profiler sees every operation the
process group runs, whoever called it: work items are recorded as ``gloo:all_reduce``,
``nccl:broadcast`` and so on. Nothing here is hard-coded: the counts are what ran.
"""

from __future__ import annotations

import os
from collections import Counter
from contextlib import contextmanager

from torch.profiler import ProfilerActivity, profile

BACKEND_PREFIXES = ("gloo:", "nccl:", "mpi:", "ucc:")


@contextmanager
def _quiet_stderr():
    """Silence the C++ profiler's start/stop banner lines (they are written straight to fd 2)."""
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
    """``with CollectiveCounter() as c: ...`` then ``c.counts == {"all_reduce": 1, ...}``."""

    def __init__(self):
        self.counts: Counter[str] = Counter()
        self._prof = profile(activities=[ProfilerActivity.CPU])

    def __enter__(self) -> "CollectiveCounter":
        with _quiet_stderr():
            self._prof.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        with _quiet_stderr():
            self._prof.__exit__(*exc)
        for event in self._prof.events():
            if event.name.startswith(BACKEND_PREFIXES):
                self.counts[event.name.split(":", 1)[1]] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def as_dict(self) -> dict[str, int]:
        return dict(sorted(self.counts.items()))
