"""Chapter 7 lab: gradient accumulation with ``DDP.no_sync()``.

Accumulating K micro-batches before one optimizer step should give the same update as one
step on a K times larger per-rank batch. Under DDP every backward normally all-reduces, so
K micro-steps would communicate K times; inside ``no_sync()`` the backward only accumulates
local gradients, and the one backward outside it all-reduces the accumulated sum. Each rank
runs three variants from the same initial model and counts the All-Reduce calls of each:

* ``sync_every``: K backwards, all synchronized;
* ``no_sync``: the first K-1 backwards inside ``no_sync()``, the last one synchronized;
* ``big_batch``: one backward on the K micro-batches put together.
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ..context import Described, RankContext
from ..ddp.accumulation import accumulate
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal, largest
from ..tools.comms import CollectiveCounter
from ..tools.models import flat_gradients, flat_parameters, mse_backward, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from ..tools.primitives import max_abs_diff

VARIANTS = ("sync_every", "no_sync", "big_batch")


def run_variant(ctx: RankContext, variant: str, micro_batches: list, lr: float, seed: int) -> dict:
    """One optimizer step from the same initial model; the All-Reduce calls it took are counted."""
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    local = []
    with CollectiveCounter() as counter:
        if variant == "big_batch":
            xs, ys = zip(*micro_batches)
            mse_backward(ddp, torch.cat(xs), torch.cat(ys))
        else:
            local = accumulate(ddp, micro_batches, skip_sync=variant == "no_sync")
    synced = flat_gradients(model).tolist()
    optimizer.step()
    return {"all_reduce": counter.counts["all_reduce"], "grad_before_last": local, "grad": synced,
            "params": flat_parameters(model).tolist()}


class AccumulationRecord(Described):
    """What each rank of the 'accumulation' lab returns."""

    sync_every: dict[str, Any]
    no_sync: dict[str, Any]
    big_batch: dict[str, Any]


def rank_fn(ctx: RankContext, micro_steps: int, micro_batch: int, lr: float, seed: int) -> AccumulationRecord:
    x, y = synthetic_regression(ctx.world_size * micro_steps * micro_batch, seed=seed)
    micro_batches = [tuple(t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, micro_batch, step))
                     for step in range(micro_steps)]
    sync_every, no_sync, big_batch = (run_variant(ctx, v, micro_batches, lr, seed) for v in VARIANTS)
    return {**ctx.describe(), "sync_every": sync_every, "no_sync": no_sync, "big_batch": big_batch}


class AccumulationData(TypedDict):
    """The summary data of the 'accumulation' lab."""

    counts: dict[str, int | list[int]]  # 랭크마다 같으면 그 수 하나, 아니면 랭크들의 값
    max_diff_vs_big: dict[str, float]
    tolerance: float
    global_batch: int


def summarize(ranks: list[AccumulationRecord], backend: str, params: dict[str, Any]) -> Summary[AccumulationData]:
    n, k = len(ranks), params["micro_steps"]
    tol = 1e-6
    counts = {v: sorted({r[v]["all_reduce"] for r in ranks}) for v in VARIANTS}
    saved = [r["sync_every"]["all_reduce"] - r["no_sync"]["all_reduce"] for r in ranks]
    vs_big = {v: largest(max_abs_diff(r[v]["params"], r["big_batch"]["params"]) for r in ranks) for v in VARIANTS[:2]}
    across = largest(max_abs_diff(r["no_sync"]["params"], ranks[0]["no_sync"]["params"]) for r in ranks)
    checks = [
        check_close("no_sync_matches_big_batch", vs_big["no_sync"], 0.0, tol,
                    f"no_sync()로 K={k}개 마이크로배치를 누적한 뒤의 파라미터가 K배 큰 배치로 한 스텝 한 결과와 같다(최대 절대 차이)"),
        check_close("sync_every_matches_big_batch", vs_big["sync_every"], 0.0, tol,
                    "매 마이크로 스텝 동기화해도 결과는 같다: no_sync()는 통신만 줄인다(최대 절대 차이)"),
        check_equal("allreduce_saved", sorted(set(saved)), [k - 1],
                    f"no_sync()를 쓰면 All-Reduce가 K−1 = {k - 1}번 줄어든다(매번 동기화 − no_sync, 모든 랭크)"),
        check_equal("no_sync_same_as_big_batch_count", counts["no_sync"], counts["big_batch"],
                    "no_sync() 누적은 큰 배치 한 번과 같은 횟수만 통신한다(All-Reduce 횟수)"),
        check_close("replicas_identical_after_step", across, 0.0, 0.0,
                    "스텝 뒤 모든 랭크의 파라미터가 같다(최대 절대 차이)"),
    ]
    if n > 1 and k > 1:
        local = {tuple(r["no_sync"]["grad_before_last"]) for r in ranks}
        checks.append(check_equal("grads_local_inside_no_sync", len(local), n,
                                  "no_sync() 안에서 누적한 그래디언트는 랭크마다 다르다: 아직 동기화하지 않았다(서로 다른 벡터 수)"))
    data: AccumulationData = {"counts": {v: c[0] if len(c) == 1 else c for v, c in counts.items()}, "max_diff_vs_big": vs_big,
            "tolerance": tol, "global_batch": n * k * params["micro_batch"]}
    return Summary(data, checks)


LAB = Lab(
    name="accumulation",
    description="no_sync()로 K개 마이크로배치의 그래디언트를 누적하면 K배 큰 배치와 같은 결과를 All-Reduce K−1번 적게 얻는지 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=3,
    chapter=7,
    params={"micro_steps": Int(4, min=1, max=64, help="누적할 마이크로 스텝 수 K"),
            "micro_batch": Int(4, min=1, max=1024, help="마이크로 스텝 하나의 랭크당 배치"),
            "lr": Float(0.1, min=0.0, max=10.0, min_open=True, help="학습률 η"),
            "seed": seed()},
    record=AccumulationRecord,
    data=AccumulationData,
)
