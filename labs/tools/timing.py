"""Timing on real ranks, the way nccl-tests does it: barrier, (device sync), clock, call, (sync), clock.

Variants are interleaved (a, b, a, b, ...) so a burst of load from other programs hits them alike,
and a comparison is the median of per-pair ratios, reported with its spread.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
import torch.distributed as dist

from .primitives import sync


def time_calls(fns: dict[str, Callable[[], object]], device: torch.device, warmup: int,
               repeats: int) -> dict[str, list[float]]:
    """Seconds of each of ``repeats`` calls of every function in ``fns``, after ``warmup`` untimed ones.

    The functions take turns (a, b, a, b, ...), so a burst of load from other programs hits them
    alike. Every timed call starts right after a barrier, so all ranks start together; with CUDA
    the device is synchronized before the clock starts and before it stops (kernels are async).
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    seconds: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            dist.barrier()
            sync(device)
            start = time.perf_counter()
            fn()
            sync(device)
            seconds[name].append(time.perf_counter() - start)
    return seconds


def slowest(per_rank: list[list[float]]) -> list[float]:
    """Per repeat, the slowest rank's time: a collective step ends when its last rank does."""
    return [max(times) for times in zip(*per_rank, strict=True)]


def paired_ratio(numerator: list[float], denominator: list[float]) -> dict:
    """Median of the per-repeat ratios ``numerator[i] / denominator[i]`` and their spread.

    The two lists come from one :func:`time_calls` run, so pair ``i`` saw the same machine state.
    """
    if not numerator or len(numerator) != len(denominator):
        raise ValueError("paired_ratio needs two non-empty lists of the same length")
    ratios = sorted(a / b for a, b in zip(numerator, denominator, strict=True))
    return {"median": statistics.median(ratios), "min": ratios[0], "max": ratios[-1], "n": len(ratios)}
