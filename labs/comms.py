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


from torch.autograd.profiler import profile as _autograd_profile  # noqa: E402


class _AutogradProfile(_autograd_profile):
    """The profiler that ``torch.profiler.profile`` wraps, with the same ``events()`` accessor."""

    def events(self):
        return self.function_events


class QuickCollectiveCounter(CollectiveCounter):
    """:class:`CollectiveCounter` without the first-use cost of ``torch.profiler.profile``.

    ``torch.profiler.profile`` imports ``torch._inductor`` the first time it starts (seconds of
    CPU in every fresh rank process); the autograd profiler underneath it records the same
    process-group events and starts in milliseconds, so labs that count many short blocks use this.
    """

    def __init__(self):
        super().__init__()
        self._prof = _AutogradProfile(use_cpu=True)


# C++ type names the profiler reports for a work item's input, as torch dtype names.
_PROFILER_DTYPES = {"float": "float32", "double": "float64", "long int": "int64", "int": "int32",
                    "c10::Half": "float16", "c10::BFloat16": "bfloat16", "bool": "bool"}


class CollectiveRecorder(QuickCollectiveCounter):
    """A :class:`QuickCollectiveCounter` that also keeps what each collective carried.

    ``items`` lists, in launch order, ``{"op": "broadcast", "numel": 16, "dtype": "float32"}``:
    the element count and dtype of the work item's first input tensor, as the profiler saw it.
    """

    def __init__(self):
        super().__init__()
        self._prof = _AutogradProfile(use_cpu=True, record_shapes=True)
        self.items: list[dict] = []

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        for event in sorted(self._prof.events(), key=lambda e: e.time_range.start):
            if event.name.startswith(BACKEND_PREFIXES):
                shape = (event.input_shapes or [[]])[0]
                dtypes = getattr(event, "input_dtypes", None) or [""]
                numel = 1
                for size in shape:
                    numel *= size
                self.items.append({"op": event.name.split(":", 1)[1], "numel": numel if shape else 0,
                                   "dtype": _PROFILER_DTYPES.get(dtypes[0], dtypes[0])})

