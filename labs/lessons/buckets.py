"""Chapter 7 lab: DDP's gradient buckets, and how their All-Reduce overlaps the backward pass.

DDP does not all-reduce every gradient on its own, and it does not wait for the whole backward
either. It packs gradients into buckets of at most ``bucket_cap_mb`` MiB and launches one
All-Reduce per bucket as soon as every gradient in it is ready. Each rank here

1. counts, with :class:`labs.tools.comms.CollectiveCounter`, the All-Reduce calls of each backward for
   several ``bucket_cap_mb`` values, and predicts the count from parameter sizes alone
   (the same greedy rule as ``compute_bucket_assignment_by_size`` in torch's reducer.cpp);
2. records a timeline: when each layer's gradients were ready (tensor hooks) and when each
   bucket's All-Reduce was launched and finished (a communication hook around the default one).
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch
import torch.distributed as dist

from ..context import Described, RankContext
from ..ddp.buckets import ddp_bucket_caps, group_by_size
from ..params import Float, Int, ListOf, seed
from ..registry import Lab
from ..result import Summary, check_equal, check_true, not_applicable
from ..tools.comms import CollectiveCounter
from ..tools.models import layer_stack, wrap_ddp
from ..tools.timeline import DEFAULT, Timeline, ddp_kwargs, record_overlap


def cap_labels(caps_mb: tuple) -> list[str]:
    """``(0.1, 1.0, "default")`` -> ``["0.1", "1", "default"]``: the labels records and tables use."""
    return [cap if cap == DEFAULT else f"{cap:g}" for cap in caps_mb]


def bucket_limits(cap: str) -> tuple[int, int]:
    """:func:`labs.ddp.buckets.ddp_bucket_caps` for a cap label (``default``: ``bucket_cap_mb`` unset)."""
    return ddp_bucket_caps(None if cap == DEFAULT else float(cap))


def _batch(ctx: RankContext, width: int, batch: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed + ctx.rank)  # 랭크마다 다른 데이터
    return torch.randn(batch, width, generator=gen).to(ctx.device)


def count_collectives(ctx: RankContext, cap: str, x: torch.Tensor, iterations: int, width: int,
                      depth: int) -> tuple[list[dict], list[int]]:
    """The collectives of each forward+backward (by kind), and the gradient-ready order of the first one."""
    torch.manual_seed(0)
    model = layer_stack(width, depth)
    ddp = wrap_ddp(model, ctx.device, **ddp_kwargs(cap))
    timeline = Timeline(list(model.parameters()))
    counts: list[dict[str, int]] = []
    order: list[int] = []
    for _ in range(iterations):
        timeline.reset()
        with CollectiveCounter() as counter:
            ddp(x).square().mean().backward()
        counts.append(counter.as_dict())
        order = order or list(timeline.order)
    return counts, order


class BucketsRecord(Described):
    """What each rank of the 'buckets' lab returns."""

    n_params: int
    param_bytes: list[int]
    param_layer: list[int]
    runs: list[dict[str, Any]]


def rank_fn(ctx: RankContext, caps_mb: tuple, width: int, depth: int, batch: int, iterations: int,
            seed: int) -> BucketsRecord:
    x = _batch(ctx, width, batch, seed)
    params = list(layer_stack(width, depth).parameters())
    runs = []
    for cap in cap_labels(caps_mb):
        counts, order = count_collectives(ctx, cap, x, iterations, width, depth)
        runs.append({"cap": cap, "all_reduce": [c.get("all_reduce", 0) for c in counts],
                     "broadcast": [c.get("broadcast", 0) for c in counts], "ready_order": order,
                     "timeline": record_overlap(ctx, cap, x, iterations, width, depth)})
    return {
        **ctx.describe(),
        "n_params": sum(p.numel() for p in params),
        "param_bytes": [p.numel() * p.element_size() for p in params],
        "param_layer": [i // 2 for i in range(len(params))],  # Linear마다 weight, bias
        "runs": runs,
    }


def predicted_counts(param_bytes: list[int], order: list[int], cap: str) -> int:
    first, limit = bucket_limits(cap)
    return len(group_by_size([param_bytes[i] for i in order], limit, first, nbytes=int))


def launched_before_backward_end(timeline: dict) -> bool:
    """The first bucket's All-Reduce started before the first layer's gradients were ready."""
    first_launch = min(b["launch"] for b in timeline["buckets"])
    return first_launch < max(timeline["ready"])


def launched_in_index_order(timeline: dict) -> bool:
    """The buckets' All-Reduces were launched in bucket-index order 0, 1, 2, … (the reducer's
    ``mark_bucket_ready`` launches a ready bucket only after every earlier one)."""
    return [b["bucket"] for b in timeline["buckets"]] == list(range(len(timeline["buckets"])))


def backward_waited(timeline: dict) -> bool:
    """``loss.backward()`` returned only after every bucket's All-Reduce had finished."""
    return all(b["done"] <= timeline["backward_returned"] for b in timeline["buckets"])


class BucketsData(TypedDict):
    """The summary data of the 'buckets' lab."""

    rows: list[dict[str, Any]]
    total_bytes: int
    n_params: int
    first_bucket_bytes: int
    overlap_cases: int


def summarize(ranks: list[BucketsRecord], backend: str, params: dict[str, Any]) -> Summary[BucketsData]:
    n = len(ranks)
    param_bytes = ranks[0]["param_bytes"]
    rows = []
    for j, run in enumerate(ranks[0]["runs"]):
        steady = [r["runs"][j]["all_reduce"][-1] for r in ranks]
        rows.append({"cap": run["cap"], "first_iteration": run["all_reduce"][0], "steady": steady[0],
                     "per_iteration": run["all_reduce"], "broadcast": run["broadcast"],
                     "same_on_all_ranks": len(set(steady)) == 1,
                     "predicted": predicted_counts(param_bytes, run["ready_order"], run["cap"]),
                     "rough": -(-sum(param_bytes) // max(bucket_limits(run["cap"])[1], 1)),  # cap < 1바이트 = 0바이트
                     "limits": list(bucket_limits(run["cap"]))})
    numeric = sorted((float(row["cap"]), row["steady"]) for row in rows if row["cap"] != DEFAULT)
    multi = [(r["rank"], j) for r in ranks for j, run in enumerate(r["runs"]) if len(run["timeline"]["buckets"]) >= 2]
    overlapped = [launched_before_backward_end(ranks[rank]["runs"][j]["timeline"]) for rank, j in multi]
    default_rows = [row for row in rows if row["cap"] == DEFAULT]
    checks = [
        check_equal("counts_match_prediction", [row["steady"] for row in rows], [row["predicted"] for row in rows],
                    "2번째 반복부터의 All-Reduce 횟수가 파라미터 크기와 bucket_cap_mb로 예측한 버킷 수와 같다"),
        check_equal("counts_same_on_all_ranks", all(row["same_on_all_ranks"] for row in rows), True,
                    "모든 랭크가 같은 횟수의 All-Reduce를 했다(버킷 배정은 랭크 0이 정해 브로드캐스트한다)"),
        check_equal("first_iteration_one_bucket", sorted({row["first_iteration"] for row in rows}), [1],
                    "첫 반복은 cap과 상관없이 버킷 하나(All-Reduce 1번)로 보낸다: 버킷은 첫 역전파의 순서로 다시 만든다"),
        check_equal("rebuild_broadcast_in_second_iteration",
                    sorted({tuple(min(b, 1) for b in r["broadcast"]) for r in ranks[0]["runs"]}),
                    [tuple(int(it == 1) for it in range(params["iterations"]))],
                    "broadcast는 2번째 반복에만 있다: 랭크 0이 새 버킷 배정을 모든 랭크에 보낸다(반복별 유무)"),
        check_equal("backward_waits_for_buckets",
                    sum(backward_waited(run["timeline"]) for r in ranks for run in r["runs"]), n * len(rows),
                    "loss.backward()는 모든 버킷의 All-Reduce가 끝난 뒤에 돌아왔다(랭크·cap 조합 수)"),
    ]
    if multi:
        checks.append(check_equal(
            "launched_before_backward_end", sum(overlapped), len(multi),
            "버킷이 2개 이상이면 첫 버킷의 All-Reduce가 첫 층의 그래디언트가 준비되기(역전파가 끝나기) 전에 시작됐다"
            "(랭크·cap 조합 수)"))
        checks.append(check_equal(
            "launched_in_index_order", sum(launched_in_index_order(ranks[rank]["runs"][j]["timeline"]) for rank, j in multi),
            len(multi), "버킷의 All-Reduce는 버킷 번호 순서(0, 1, 2, …)로 시작됐다(랭크·cap 조합 수)"))
    else:
        for name in ("launched_before_backward_end", "launched_in_index_order"):
            checks.append(not_applicable(name, "고른 cap 중에 버킷이 2개 이상인 경우가 없어, 겹침과 버킷 순서를 잴 수 없다"
                                               "(caps_mb에 모델 크기보다 작은 값을 넣으세요)"))
    predicted = sorted((float(row["cap"]), row["predicted"]) for row in rows if row["cap"] != DEFAULT)
    if len(numeric) >= 2 and predicted[0][1] == predicted[-1][1]:
        checks.insert(2, not_applicable("count_decreases_with_cap",
                                        f"고른 cap 모두에서 예측한 버킷 수가 {predicted[0][1]}개로 같다(모델 "
                                        f"{sum(param_bytes)}바이트): caps_mb에 모델 크기보다 작은 값을 넣거나 width·depth를 키우세요"))
    elif len(numeric) >= 2:
        counts = [c for _, c in numeric]
        checks.insert(2, check_true("count_decreases_with_cap", counts == sorted(counts, reverse=True) and counts[0] > counts[-1],
                               counts, "bucket_cap_mb가 커질수록 All-Reduce 횟수가 줄어든다"
                               "(cap이 작은 것부터의 횟수: 늘지 않고, 처음이 끝보다 많다)"))
    if default_rows:
        checks.insert(3, check_equal("default_cap_count", default_rows[0]["steady"], default_rows[0]["predicted"],
                                     "기본값(25 MiB, 첫 버킷만 1 MiB)에서 All-Reduce 횟수가 예측과 같다"))
    data: BucketsData = {"rows": rows, "total_bytes": sum(param_bytes), "n_params": ranks[0]["n_params"],
            "first_bucket_bytes": dist._DEFAULT_FIRST_BUCKET_BYTES, "overlap_cases": len(multi)}
    return Summary(data, checks)


LAB = Lab(
    name="buckets",
    description="bucket_cap_mb에 따라 역전파 한 번의 All-Reduce 횟수(버킷 수)가 어떻게 바뀌는지 세고, "
                "버킷 통신이 역전파와 겹치는 시각을 기록",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=3,
    chapter=7,
    params={"caps_mb": ListOf(Float(1.0, min=0.0, max=4096.0, min_open=True), (0.1, 0.5, 1.0, 25.0, DEFAULT),
                               words=(DEFAULT,), help="비교할 bucket_cap_mb 값들(MiB), default는 DDP 기본값"),
            "width": Int(256, min=1, max=4096, help="층의 너비"),
            "depth": Int(12, min=1, max=64, help="층 수"),
            "batch": Int(64, min=1, max=4096, help="랭크당 배치"),
            "iterations": Int(3, min=2, max=20, help="반복 수 (버킷 재구성은 2번째 반복: 2 이상)"),
            "seed": seed()},
    record=BucketsRecord,
    data=BucketsData,
)
