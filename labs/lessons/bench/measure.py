"""The ``bench`` lab's rank side: what every rank of the group measures (see :mod:`labs.lessons.bench`).

The sweep settings (message sizes, bucket caps, the quick preset that is the lab's default) and the size labels
("4K" <-> 4096) live here with the measurements that use them.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import nn

from ...context import Described, RankContext
from ...ddp.allreduce import average_gradients
from ...ddp.ring import P2P, all_reduce_fns, pipelined_ring_all_reduce_, ring_all_reduce_
from ...ddp.step import make_train_step
from ...params import Int, ListOf
from ...tools.comms import CollectiveCounter, written_bytes
from ...tools.models import count_parameters, layer_stack, wrap_ddp
from ...tools.primitives import sync
from ...tools.timing import time_calls

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
SIZES_QUICK = (4 << 10, 64 << 10, 1 << 20, 8 << 20)
CAPS = (0.1, 1.0, 25.0, 100.0)
QUICK: dict[str, Any] = {"sizes": SIZES_QUICK, "repeats": 5, "warmup": 2, "memcpy_mb": 16, "ddp_steps": 8}
IMPLS = ("library", "ring", "pipelined")  # 라이브러리, 4장의 링, 세그먼트로 파이프라이닝한 링
CHECK_NUMEL = 100_003  # 정확성 확인용 크기: N으로도, 세그먼트 원소 수로도 나누어떨어지지 않는다
CHECK_SEGMENT_BYTES = 4096  # 정확성 확인에서는 세그먼트를 작게 잘라 청크마다 여러 개가 되게 한다
SIZES = ListOf(Int(4096, min=4, max=1 << 30), SIZES_QUICK, sizes=True,
               help="All-Reduce할 메시지 크기(바이트, 4의 배수), 예: '4K 1M 64M'")


def parse_sizes(value: str | tuple) -> list[int]:
    """``"4K 1M 64M"`` (or a tuple of bytes) -> bytes, sorted, once each (K, M, G are powers of 1024)."""
    return sorted(set(SIZES.parse("sizes", value) if isinstance(value, str) else value))


def parse_caps(value: tuple) -> list[float]:
    """bucket_cap_mb values (MiB), sorted, once each."""
    return sorted(set(value))


def size_label(nbytes: int) -> str:
    """4096 -> "4K", 1048576 -> "1M" (the way the sizes are given)."""
    for unit in ("G", "M", "K"):
        if nbytes >= _UNITS[unit] and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


# --- 측정 도구 (모든 랭크에서 실행) -----------------------------------------------------------

def copy_seconds(ctx: RankContext, nbytes: int, warmup: int, repeats: int) -> dict:
    """``dst.copy_(src)`` of ``nbytes``: by rank 0 while the others wait, and by all ranks at once."""
    src = torch.ones(nbytes // 4, device=ctx.device)
    dst = torch.empty_like(src)

    def copy() -> None:
        dst.copy_(src)

    seconds = time_calls({"alone": copy if ctx.is_main else (lambda: None), "together": copy},
                         ctx.device, warmup, repeats)
    return {"bytes": nbytes, **seconds}


def allreduce_seconds(ctx: RankContext, sizes: list[int], warmup: int, repeats: int,
                      segment_bytes: int) -> list[dict]:
    """Library, ring and pipelined ring All-Reduce (float32), interleaved L, R, P, L, R, P, ..."""
    rows = []
    for size in sizes:
        buf = torch.zeros(size // 4, device=ctx.device)  # 0의 합은 0: 몇 번을 반복해도 값이 그대로다
        rows.append({"bytes": size, **time_calls(all_reduce_fns(buf, segment_bytes), ctx.device, warmup, repeats)})
    return rows


def segment_timeline(ctx: RankContext, size: int, segment_bytes: int) -> dict:
    """One pipelined ring All-Reduce of ``size`` bytes with its events timed on this rank.

    Per received segment: when this rank began to wait for it, when it arrived, when it was added
    (seconds from the start). With one segment per chunk this is chapter 4's ring step by step.
    """
    buf = torch.zeros(size // 4, device=ctx.device)
    pipelined_ring_all_reduce_(buf, P2P(), segment_bytes)  # 워밍업
    events: list[list] = []
    dist.barrier()
    start = time.perf_counter()

    def record(event: str, step: int, chunk: int, segment: int) -> None:
        sync(ctx.device)
        if event == "wait":
            events.append([step, segment, time.perf_counter() - start])
        else:
            events[-1].append(time.perf_counter() - start)

    pipelined_ring_all_reduce_(buf, P2P(), segment_bytes, on_segment=record)
    sync(ctx.device)
    total = time.perf_counter() - start
    return {"bytes": size, "segment_bytes": segment_bytes, "total": total,
            "segments": [dict(zip(("step", "segment", "wait", "arrived", "added"), e)) for e in events]}


def ring_timelines(ctx: RankContext, size: int, segment_bytes: int) -> dict:
    """The same size with one segment per chunk (chapter 4's ring) and with ``segment_bytes`` segments."""
    return {"one_segment": segment_timeline(ctx, size, max(size, 4)),
            "pipelined": segment_timeline(ctx, size, segment_bytes)}


def ring_errors(ctx: RankContext, numel: int) -> dict:
    """Largest difference of each ring's sum from ``dist.all_reduce``'s on the same random input."""
    gen = torch.Generator().manual_seed(1000 + ctx.rank)
    x = (torch.rand(numel, generator=gen) * 2 - 1).to(ctx.device)
    reference = x.clone()
    dist.all_reduce(reference)
    ring = ring_all_reduce_(x.clone(), P2P())
    pipelined = pipelined_ring_all_reduce_(x.clone(), P2P(), CHECK_SEGMENT_BYTES)
    return {"ring": float((ring - reference).abs().max()), "pipelined": float((pipelined - reference).abs().max())}


def pipelined_socket_bytes(ctx: RankContext, size: int, segment_bytes: int) -> dict:
    """Bytes this process wrote (kernel counter) during one pipelined ring All-Reduce of ``size``,
    next to the payload bytes its sends carried: the segments must not add traffic."""
    buf = torch.zeros(size // 4, device=ctx.device)
    p2p = P2P()
    dist.barrier()
    before = written_bytes()
    pipelined_ring_all_reduce_(buf, p2p, segment_bytes)
    after = written_bytes()
    return {"bytes": size, "payload": p2p.sent,
            "written": None if before is None or after is None else after - before}


ACCUM = "accum"  # 가장 큰 cap의 DDP + no_sync()로 K개 마이크로 스텝 누적


def variant_names(caps: list[float]) -> list[str]:
    return ["compute", "manual", *(f"ddp:{cap:g}" for cap in caps), ACCUM]


def _variant_step(ctx: RankContext, name: str, width: int, depth: int, x: torch.Tensor, seed: int,
                  accum_steps: int, accum_cap: float) -> Callable[[], None]:
    """The step function of one variant, on a fresh copy of the same model."""
    torch.manual_seed(seed)
    model: nn.Module = layer_stack(width, depth).to(ctx.device)
    if name == ACCUM:
        model = wrap_ddp(model, ctx.device, bucket_cap_mb=accum_cap)
    elif name.startswith("ddp:"):
        model = wrap_ddp(model, ctx.device, bucket_cap_mb=float(name[4:]))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    after = (lambda: average_gradients(model.parameters(), ctx.world_size)) if name == "manual" else None
    # no_sync() runs only under accumulation, where the model is a DDP
    return make_train_step(model, optimizer, x, after, accum_steps if name == ACCUM else 1)  # type: ignore[arg-type]


def ddp_variants(ctx: RankContext, caps: list[float], width: int, depth: int, batch: int,
                 warmup: int, steps: int, seed: int, accum_steps: int) -> dict:
    """Step times of the same model without communication, with a manual loop, and under DDP.

    The variants take turns step by step (see :func:`time_calls`); ``comm_alone`` is one
    All-Reduce of a buffer as large as all gradients together, to compare with what a step exposes.
    """
    gen = torch.Generator().manual_seed(seed + ctx.rank)
    x = torch.randn(batch, width, generator=gen).to(ctx.device)
    steps_by_name = {name: _variant_step(ctx, name, width, depth, x, seed, accum_steps, max(caps))
                     for name in variant_names(caps)}
    n_params = count_parameters(layer_stack(width, depth))
    flat = torch.zeros(n_params, device=ctx.device)
    # 워밍업(2번 이상)에 DDP의 버킷 재구성(2번째 반복)이 들어가므로, 잰 스텝은 모두 재구성 뒤의 스텝이다
    seconds = time_calls({**steps_by_name, "comm_alone": lambda: dist.all_reduce(flat)}, ctx.device,
                         max(warmup, 2), steps)
    calls = {}
    for name, step in steps_by_name.items():
        with CollectiveCounter() as counter:
            step()
            sync(ctx.device)
        calls[name] = counter.counts.get("all_reduce", 0)
    return {"seconds": seconds, "all_reduce": calls, "n_params": n_params, "n_tensors": 2 * depth,
            "micro_steps": {name: accum_steps if name == ACCUM else 1 for name in steps_by_name}}


class BenchRecord(Described):
    """What each rank of the 'bench' lab returns."""

    cpu_count: int
    threads: int
    memcpy: dict[str, Any]
    allreduce: list[dict[str, Any]]
    timeline: dict[str, dict[str, Any]]
    ring_error: dict[str, float]
    socket: dict[str, int]
    ddp: dict[str, Any]


def rank_fn(ctx: RankContext, sizes: tuple[int, ...], repeats: int, warmup: int, memcpy_mb: int, caps_mb: tuple,
            width: int, depth: int, batch: int, ddp_steps: int, accum_steps: int, segment_kb: int,
            seed: int) -> BenchRecord:
    message_sizes = parse_sizes(sizes)
    return {
        **ctx.describe(),
        "cpu_count": os.cpu_count() or 1,
        "threads": torch.get_num_threads(),
        "memcpy": copy_seconds(ctx, memcpy_mb << 20, warmup, repeats),
        "allreduce": allreduce_seconds(ctx, message_sizes, warmup, repeats, segment_kb << 10),
        "timeline": ring_timelines(ctx, message_sizes[-1], segment_kb << 10),
        "ring_error": ring_errors(ctx, CHECK_NUMEL),
        "socket": pipelined_socket_bytes(ctx, message_sizes[-1], segment_kb << 10),
        "ddp": ddp_variants(ctx, parse_caps(caps_mb), width, depth, batch, warmup, ddp_steps, seed, accum_steps),
    }
