"""Chapter 7 lab: ranks with different amounts of data.

Part 1, per-rank batch sizes. DDP averages the per-rank gradients, ``g = (1/N) Σ g_i``, and each
``g_i`` is a mean over that rank's own ``n_i`` samples. The result is the gradient of the global
batch only when every ``n_i`` is the same: otherwise a sample on a small rank weighs more. Each
rank measures that gap, and three ways to close it: weighting each rank's loss by
``n_i · N / Σn`` (after an All-Reduce of the counts), dropping samples to the smallest count,
and padding to the largest.

Part 2, per-rank numbers of batches. A rank that runs out of batches stops calling backward,
so the others would wait forever in their gradient All-Reduce. ``Join([ddp])`` lets the finished
ranks shadow those All-Reduces with zeros until every rank is done.
"""

from __future__ import annotations

import math
from typing import Any, TypedDict, cast

import torch

from ..context import Described, RankContext
from ..ddp.uneven import fix_gradients, join_training, pad_to, rank_counts, reference_grad
from ..params import Bool, Float, Int, seed
from ..registry import Lab
from ..result import Check, Summary, check_at_least, check_close, check_equal, largest, not_applicable
from ..tools.models import synthetic_regression, tiny_mlp, wrap_ddp

FIXES = ("naive", "weighted", "drop_last", "pad")


def references(model: torch.nn.Module, parts: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """What each DDP gradient should equal: the mean gradient of the batch each variant really used."""
    smallest, largest = min(len(x) for x, _ in parts), max(len(x) for x, _ in parts)

    def union(cut) -> torch.Tensor:
        return reference_grad(model, torch.cat([cut(x) for x, _ in parts]), torch.cat([cut(y) for _, y in parts]))

    full = union(lambda t: t)
    return {"naive": full, "weighted": full, "drop_last": union(lambda t: t[:smallest]),
            "pad": union(lambda t: pad_to(t, largest)), "full": full}


def uneven_batches(ctx: RankContext, base_batch: int, extra: int, seed: int) -> dict:
    counts = rank_counts(ctx.world_size, base_batch, extra)
    x, y = (t.to(ctx.device) for t in synthetic_regression(sum(counts), seed=seed))
    starts = [sum(counts[:r]) for r in range(ctx.world_size)]
    parts = [(x[s:s + c], y[s:s + c]) for s, c in zip(starts, counts)]
    torch.manual_seed(seed)
    model = tiny_mlp()
    ddp = wrap_ddp(model, ctx.device)
    got = fix_gradients(ctx, ddp, *parts[ctx.rank])
    want = references(model, parts)
    return {"n": counts[ctx.rank],
            "max_diff": {k: float((got[k] - want[k]).abs().max()) for k in FIXES},
            "pad_vs_full": float((got["pad"] - want["full"]).abs().max()),
            "grad_scale": float(want["full"].abs().max())}


class UnevenRecord(Described):
    """What each rank of the 'uneven' lab returns."""

    n: int
    max_diff: dict[str, float]
    pad_vs_full: float
    grad_scale: float
    join: dict[str, Any]


def rank_fn(ctx: RankContext, base_batch: int, extra: int, join_batches: int, extra_batches: int,
            join_batch: int, lr: float, seed: int, join: bool) -> UnevenRecord:
    return cast(UnevenRecord, {**ctx.describe(), **uneven_batches(ctx, base_batch, extra, seed),
                               "join": join_training(ctx, join_batches, extra_batches, join_batch, lr, seed, join)})


def divides_by_initial_n(solo: list[float], scales: list[float], n: int, tol: float, lr: float) -> Check:
    """The last rank's lone gradient is its own ÷ N, to ``tol`` times the gradient's size when that is over 1
    (float32 rounds a diverging run's 1e16 gradients by 1e9); n/a when the run diverged to inf or NaN."""
    if not all(math.isfinite(v) for v in solo + scales):
        return not_applicable("join_divides_by_initial_n",
                              f"학습률 η={lr:g}에서 학습이 발산해 그래디언트가 유한하지 않다(inf·NaN): 나누는 수를 잴 수 없다"
                              "(lr를 줄이면 잰다)")
    bound = tol * max(1.0, *scales)
    return check_close("join_divides_by_initial_n", max(solo), 0.0, bound,
                       f"혼자 남은 랭크의 그래디언트는 자기 그래디언트 ÷ N(={n})이다: 끝난 랭크는 0을 보태고, 나누는 수는 "
                       f"처음의 N이다(최대 절대 차이, 허용 오차 {tol:g} × max(1, 그래디언트 크기))")


class UnevenData(TypedDict):
    """The summary data of the 'uneven' lab."""

    counts: list[int]
    max_diff: dict[str, float]
    tolerance: float
    pad_vs_full: float
    grad_scale: float
    iterations: list[int]
    join_all_reduce: list[int]


def summarize(ranks: list[UnevenRecord], backend: str, params: dict[str, Any]) -> Summary[UnevenData]:
    n = len(ranks)
    tol = 1e-6
    worst = {k: largest(r["max_diff"][k] for r in ranks) for k in FIXES}
    joins = [r["join"] for r in ranks]
    iterations = [j["iterations"] for j in joins]
    solo = [d for j in joins for d in j["solo_diff"]]
    unequal = len({r["n"] for r in ranks}) > 1
    checks = []
    if unequal:
        checks.append(check_at_least("naive_differs_from_global", worst["naive"], 100 * tol,
                            "n_i가 다르면 단순 평균 (1/N)Σg_i는 전역 배치의 그래디언트와 다르다"
                            f"(최대 절대 차이, {100 * tol:g}보다 커야 한다)"))
    checks += [
        check_close("weighted_matches_global", worst["weighted"], 0.0, tol,
                    "손실에 n_i·N/Σn을 곱하면 DDP 평균이 전역 배치의 그래디언트와 같다(최대 절대 차이)"),
        check_close("drop_last_matches", worst["drop_last"], 0.0, tol,
                    "모든 랭크를 가장 작은 n_i로 자르면(개수가 같으면) 단순 평균이 남긴 샘플의 전역 그래디언트와 같다"),
        check_close("pad_matches_padded_batch", worst["pad"], 0.0, tol,
                    "가장 큰 n_i까지 반복해 채우면 단순 평균이 '채운 배치'(중복 포함)의 그래디언트와 같다"),
        check_equal("join_finished", [j["iterations"] for j in joins],
                    rank_counts(n, params["join_batches"], params["extra_batches"]),
                    "Join 안에서 모든 랭크가 멈추지 않고 자기 배치를 끝까지 돌았다(랭크별 반복 수)"),
        check_equal("join_same_allreduce_count", [j["all_reduce"] for j in joins], [joins[0]["all_reduce"]] * n,
                    "반복 수가 달라도 모든 랭크가 같은 횟수의 All-Reduce에 참여했다: 먼저 끝난 랭크가 대신 참여한다"),
        check_equal("join_replicas_identical", len({j["fingerprint"] for j in joins}), 1,
                    "Join이 끝난 뒤 모든 랭크의 파라미터가 같다(지문 수)"),
    ]
    if n > 1 and solo:
        checks.append(divides_by_initial_n(solo, [s for j in joins for s in j["solo_scale"]], n, tol, params["lr"]))
    data: UnevenData = {"counts": [r["n"] for r in ranks], "max_diff": worst, "tolerance": tol,
            "pad_vs_full": largest(r["pad_vs_full"] for r in ranks), "grad_scale": ranks[0]["grad_scale"],
            "iterations": iterations, "join_all_reduce": [j["all_reduce"] for j in joins]}
    return Summary(data, checks)


LAB = Lab(
    name="uneven",
    description="랭크마다 샘플 수가 다르면 그래디언트 평균이 전역 배치와 어긋나는 것과 그 해결책, "
                "배치 수가 다를 때 Join이 멈춤을 막는 것을 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=3,
    chapter=7,
    params={"base_batch": Int(4, min=1, max=64,
                              help="랭크 0의 배치 (클수록 extra의 몫이 작아져 단순 평균의 어긋남이 반올림에 묻힌다: 64, extra 1에서 5e-4)"),
            "extra": Int(6, min=1, max=1024, help="마지막 랭크가 더 받는 샘플 수"),
            "join_batches": Int(2, min=1, max=50, help="Join 부분: 모든 랭크의 배치 수"),
            "extra_batches": Int(1, min=1, max=50, help="Join 부분: 마지막 랭크가 더 도는 배치 수"),
            "join_batch": Int(4, min=1, max=1024, help="Join 부분의 배치 크기"),
            "lr": Float(0.1, min=0.0, max=10.0, min_open=True, help="학습률 η"),
            "seed": seed(),
            "join": Bool(True, help="Join 컨텍스트를 쓸지 (off면 멈춤을 보여 준다)")},
    record=UnevenRecord,
    data=UnevenData,
)
