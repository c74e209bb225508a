"""Chapter 9 lab: the staircase of a from-scratch DDP, each step measured on real ranks.

Steps (:mod:`labs.ddp.miniddp`): 0 one process on the global batch, 1 naive (one All-Reduce per
gradient after backward), 2 flat (one All-Reduce of one buffer), 3 overlap (async per-parameter
All-Reduce from a hook), 4 buckets; plus torch's DDP with the same cap, and the forward-order
buckets of the bug gallery (same results, lost overlap). For each: All-Reduce calls per
iteration (profiler), step time (interleaved repeats, :func:`labs.tools.timing.time_calls`), the
largest parameter difference after K steps vs torch DDP and vs the single process, and one
iteration's timeline: when each gradient was ready and when each All-Reduce started and ended.
The per-call cost α is measured with a one-element All-Reduce, to explain step 3 vs step 4.
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Any, TypedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..context import Described, RankContext
from ..ddp.buckets import MIB, group_by_size
from ..ddp.bugs import ForwardOrderBuckets
from ..ddp.miniddp import STEPS, BucketedDDP
from ..params import Bool, Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_at_most, check_equal, largest, not_applicable
from ..tools.comms import CollectiveCounter
from ..tools.models import layer_stack, mse_backward, rank_batch, wrap_ddp
from ..tools.primitives import max_abs_diff, sync
from ..tools.timeline import Timeline
from ..tools.timing import paired_ratio, slowest, time_calls
from ..tools.trace import AllReduceTrace

VARIANTS = ("single", "naive", "flat", "overlap", "buckets", "forward", "ddp")
OURS = ("naive", "flat", "overlap", "buckets", "forward")
# 재는 순서: 판정하는 두 단계(버킷과 torch DDP)를 나란히 두어, 한 쌍이 같은 기계 상태를 보게 한다
TIMING_ORDER = ("single", "naive", "flat", "overlap", "forward", "buckets", "ddp")
SPEED_BOUND = 1.2  # BucketedDDP의 스텝 시간은 torch DDP의 1.2배 이내 (이슈 #16)


def build(name: str, init: nn.Module, ctx: RankContext, cap: float, watch=None) -> nn.Module:
    """A fresh copy of ``init`` wrapped as variant ``name`` (the single process is not wrapped).

    ``watch(params)`` is called before wrapping, so its gradient hooks run before the variant's.
    """
    model = copy.deepcopy(init).to(ctx.device)
    if watch:
        watch(list(model.parameters()))
    if name == "single":
        return model
    if name == "ddp":
        return wrap_ddp(model, ctx.device, bucket_cap_mb=cap)
    if name == "forward":
        return ForwardOrderBuckets(model, cap)
    return BucketedDDP(model, cap) if name == "buckets" else STEPS[name](model)


def finish(model: nn.Module) -> None:
    """Our steps finish the synchronization explicitly; torch DDP and the single process need nothing."""
    finish_sync = getattr(model, "finish_gradient_synchronization", None)
    if finish_sync is not None:
        finish_sync()


def batch_for(name: str, x, y, ctx: RankContext, per_rank: int, step: int):
    if name == "single":  # 한 프로세스가 전역 배치 B = N·(B/N)개 전체를 본다
        return rank_batch(x, y, 0, 1, ctx.world_size * per_rank, step)
    return rank_batch(x, y, ctx.rank, ctx.world_size, per_rank, step)


def step_fn(name: str, model: nn.Module, x, y, ctx: RankContext, per_rank: int, lr: float):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    xb, yb = batch_for(name, x, y, ctx, per_rank, 0)

    def step() -> None:
        optimizer.zero_grad()
        mse_backward(model, xb, yb)
        finish(model)
        optimizer.step()
    return step


def train(name: str, init: nn.Module, ctx: RankContext, cap: float, x, y, per_rank: int, steps: int,
          lr: float) -> list[torch.Tensor]:
    """K SGD steps of variant ``name``; the parameters afterwards."""
    model = build(name, init, ctx, cap)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for step in range(steps):
        optimizer.zero_grad()
        mse_backward(model, *batch_for(name, x, y, ctx, per_rank, step))
        finish(model)
        optimizer.step()
    return [p.detach().clone() for p in getattr(model, "module", model).parameters()]


def timeline(name: str, model: nn.Module, clock: Timeline, ctx: RankContext, x, y, per_rank: int,
             samples: int = 3) -> dict:
    """Iterations of a warmed-up ``model``, timestamps relative to the call of backward(); of ``samples``
    recorded iterations the one with the median duration (one iteration alone is at the mercy of the load)."""
    if isinstance(model, DDP):
        model.register_comm_hook(None, clock.comm_hook)  # DDP의 버킷 All-Reduce 시작·끝 시각
    xb, yb = batch_for(name, x, y, ctx, per_rank, 0)
    lines: list[dict[str, Any]] = []
    with AllReduceTrace(ctx.device) as trace:  # 우리 단계들의 dist.all_reduce 시작·끝 시각
        for _ in range(samples):
            model.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            dist.barrier()
            clock.reset()
            trace.reset()
            trace.start = clock.start
            loss.backward()
            backward_end = time.perf_counter() - clock.start
            finish(model)
            sync(ctx.device)
            finish_end = time.perf_counter() - clock.start
            calls = clock.launched if name == "ddp" else trace.calls
            lines.append({"ready": [clock.ready[i] for i in sorted(clock.ready)], "backward_end": backward_end,
                          "finish_end": finish_end,
                          "calls": [{"launch": c["launch"], "done": c["done"]} for c in calls]})
    return sorted(lines, key=lambda line: line["finish_end"])[samples // 2]


def count_calls(step) -> int:
    """All-Reduce calls of one more step (the models are warm: DDP rebuilt its buckets in the 2nd)."""
    with CollectiveCounter() as counter:
        step()
    return counter.counts.get("all_reduce", 0)


def alpha_seconds(ctx: RankContext, repeats: int) -> list[float]:
    """Seconds of a one-element All-Reduce: the per-call cost α (no bandwidth term to speak of)."""
    tiny = torch.zeros(1, device=ctx.device)
    return time_calls({"tiny": lambda: dist.all_reduce(tiny)}, ctx.device, 3, repeats)["tiny"]


class MiniDDPRecord(Described):
    """What each rank of the 'miniddp' lab returns."""

    sizes: list[int]
    diffs: dict[str, dict[str, float]]
    calls: dict[str, int]
    timelines: dict[str, dict[str, Any]]
    seconds: dict[str, list[float]]
    alpha: list[float]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, bucket_cap_mb: float, steps: int,
            repeats: int, lr: float, check_speed: bool, seed: int) -> MiniDDPRecord:
    torch.manual_seed(seed)
    init = layer_stack(width, depth)
    gen = torch.Generator().manual_seed(seed)
    rows = steps * ctx.world_size * per_rank_batch
    x = torch.randn(rows, width, generator=gen).to(ctx.device)
    y = torch.randn(rows, width, generator=gen).to(ctx.device)
    final = {name: train(name, init, ctx, bucket_cap_mb, x, y, per_rank_batch, steps, lr) for name in VARIANTS}
    clocks: dict[str, Timeline] = {}  # 감싸기 전에 건 훅이라 각 단계의 훅보다 먼저 불린다: 그래디언트가 준비된 시각
    models = {name: build(name, init, ctx, bucket_cap_mb, watch=lambda ps, name=name: clocks.setdefault(name, Timeline(ps)))
              for name in VARIANTS}
    fns = {name: step_fn(name, m, x, y, ctx, per_rank_batch, lr) for name, m in models.items()}
    # 번갈아 재기; 워밍업에 DDP의 버킷 재구성이 들어간다
    seconds = time_calls({name: fns[name] for name in TIMING_ORDER}, ctx.device, 2, repeats)
    return {
        **ctx.describe(),
        "sizes": [p.numel() * p.element_size() for p in init.parameters()],
        "diffs": {name: {"ddp": max_abs_diff(final[name], final["ddp"]),
                         "single": max_abs_diff(final[name], final["single"])} for name in VARIANTS},
        "calls": {name: count_calls(fn) for name, fn in fns.items()},
        "timelines": {name: timeline(name, models[name], clocks[name], ctx, x, y, per_rank_batch) for name in VARIANTS},
        "seconds": seconds,
        "alpha": alpha_seconds(ctx, repeats),
    }


def overlapped(line: dict) -> bool:
    """Some All-Reduce started before the last gradient was ready: communication overlaps backward."""
    return bool(line["calls"]) and min(c["launch"] for c in line["calls"]) < max(line["ready"])


class MiniDDPData(TypedDict):
    """The summary data of the 'miniddp' lab."""

    rows: list[dict[str, Any]]
    n_tensors: int
    n_buckets: int
    total_bytes: int
    alpha_us: float
    buckets_vs_ddp: dict[str, float]
    overlap_vs_buckets: dict[str, float]
    gap_ms: float
    predicted_gap_ms: float
    repeats: int


def summarize(ranks: list[MiniDDPRecord], backend: str, params: dict[str, Any]) -> Summary[MiniDDPData]:
    n = len(ranks)
    sizes = ranks[0]["sizes"]
    cap = int(params["bucket_cap_mb"] * MIB)
    n_buckets = len(group_by_size(sizes[::-1], cap, nbytes=int))
    times = {name: slowest([r["seconds"][name] for r in ranks]) for name in VARIANTS}
    alpha = statistics.median(slowest([r["alpha"] for r in ranks]))
    rows: list[dict[str, Any]] = []
    for name in VARIANTS:
        t = sorted(times[name])
        rows.append({"variant": name, "calls": ranks[0]["calls"][name],
                     "median_ms": statistics.median(t) * 1e3, "min_ms": t[0] * 1e3, "max_ms": t[-1] * 1e3,
                     "diff_ddp": largest(r["diffs"][name]["ddp"] for r in ranks),
                     "diff_single": largest(r["diffs"][name]["single"] for r in ranks),
                     "overlap": all(overlapped(r["timelines"][name]) for r in ranks)})
    by = {row["variant"]: row for row in rows}
    ratio = paired_ratio(times["buckets"], times["ddp"])
    per_param_vs_buckets = paired_ratio(times["overlap"], times["buckets"])
    gap_ms = (by["overlap"]["median_ms"] - by["buckets"]["median_ms"])
    predicted_gap_ms = (by["overlap"]["calls"] - by["buckets"]["calls"]) * alpha * 1e3
    expected_calls = {"single": 0, "naive": len(sizes), "flat": 1, "overlap": len(sizes), "buckets": n_buckets,
                      "ddp": n_buckets}
    checks = [
        check_at_most("same_as_ddp_and_single", max(max(by[v]["diff_ddp"], by[v]["diff_single"]) for v in OURS),
                      1e-5, f"{params['steps']}스텝 뒤 모든 단계(1~4와 순전파 순서 버킷)의 파라미터가 torch DDP, 전역 배치 "
                      "단일 프로세스와 같다(최대 절대 차이)"),
        check_equal("calls_per_iteration", {v: by[v]["calls"] for v in expected_calls}, expected_calls,
                    "반복마다의 All-Reduce 횟수: 단일 0, 단순 = 텐서 수, 평탄화 1, 겹치기 = 텐서 수, "
                    "버킷 = torch DDP = 크기로 정한 버킷 수"),
        check_equal("overlap_appears_at_step_3", {v: by[v]["overlap"] for v in ("naive", "flat", "overlap", "buckets")},
                    {"naive": False, "flat": False, "overlap": True, "buckets": n_buckets >= 2},
                    "마지막 그래디언트가 준비되기 전에 All-Reduce가 시작된 단계(모든 랭크): 3단계부터 통신이 역전파와 겹친다"
                    f"(4단계는 버킷이 2개 이상일 때만: 이번 버킷 {n_buckets}개)"),
        check_equal("forward_order_loses_overlap", by["forward"]["overlap"], False,
                    "버킷을 순전파 순서로 채우면 첫 All-Reduce가 마지막 그래디언트가 준비된 뒤에야 시작한다(결과는 같다)"),
    ]
    if params["check_speed"] and n >= 2:
        checks.append(check_at_most("buckets_within_1_2x_ddp", ratio["median"], SPEED_BOUND,
                                    "BucketedDDP의 스텝 시간 ÷ torch DDP의 스텝 시간(반복마다 짝지은 비의 중앙값)"))
    else:
        checks.append(not_applicable("buckets_within_1_2x_ddp", "check_speed=false이거나 N=1: 시간 비교는 판정하지 "
                                     "않고 표로만 보인다(--param check_speed=true로 판정)"))
    data: MiniDDPData = {"rows": rows, "n_tensors": len(sizes), "n_buckets": n_buckets, "total_bytes": sum(sizes),
            "alpha_us": alpha * 1e6, "buckets_vs_ddp": ratio, "overlap_vs_buckets": per_param_vs_buckets,
            "gap_ms": gap_ms, "predicted_gap_ms": predicted_gap_ms, "repeats": params["repeats"]}
    return Summary(data, checks)


LAB = Lab(
    name="miniddp",
    description="직접 만드는 DDP의 계단(단일·단순·평탄화·겹치기·버킷)을 torch DDP와 같은 모델로 실행해 횟수·시간·차이·타임라인을 측정",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=9,
    default_nproc=2,
    params={"width": Int(64, min=2, max=2048, help="층의 너비"),
            "depth": Int(16, min=2, max=64, help="층 수 (텐서 수 = 2×층 수)"),
            "per_rank_batch": Int(16, min=1, max=1024, help="랭크당 배치 B/N"),
            "bucket_cap_mb": Float(0.05, min=0.0, max=1024.0, min_open=True, help="4단계와 torch DDP의 bucket_cap_mb"),
            "steps": Int(3, min=1, max=20, help="비교할 학습 스텝 수 K"),
            "repeats": Int(30, min=1, max=500,
                           help="시간을 잴 반복 수 (check_speed 판정에는 30번 이상: 적으면 쌍별 비율의 중앙값이 실행마다 크게 흔들린다)"),
            "lr": Float(0.05, min=0.0, max=10.0, min_open=True, help="학습률 η"),
            "check_speed": Bool(False, help="BucketedDDP가 torch DDP의 1.2배 이내인지 판정한다(조용한 기계에서)"),
            "seed": seed()},
    record=MiniDDPRecord,
    data=MiniDDPData,
)
