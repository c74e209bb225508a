"""Chapter 3 lab: local gradients differ per rank; DDP averages them inside ``loss.backward()``.

On every rank, for the same model and the rank's own mini-batch:

1. the LOCAL gradient ``g_i``: forward and backward inside ``ddp.no_sync()`` (no communication);
2. the DDP gradient: the same forward and backward without ``no_sync``. A hook on one parameter
   records the gradient autograd hands it during backward, and a recorder counts the
   collectives around ``loss.backward()`` only;
3. ``optimizer.step()``, also inside a recorder.

The summary gathers every rank's ``g_i`` and compares the DDP gradient with their mean.
"""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ..context import Described, RankContext
from ..ddp.gradients import ddp_gradient, local_gradient
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Check, RankRecords, Summary, check_at_least, check_close, check_equal
from ..tools.comms import CollectiveCounter
from ..tools.models import count_parameters, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from ..tools.primitives import make_optimizer, max_abs_diff


class BackwardRecord(Described):
    """What each rank of the 'backward' lab returns."""

    loss: float
    n_params: int
    watched_numel: int
    param_shapes: list[list]
    local_grad: list[float]
    hook_grad: list[float]
    ddp_grad: list[float]
    comm: dict[str, Any]
    backward_items: list[dict[str, Any]]


def rank_fn(ctx: RankContext, per_rank_batch: int, lr: float, seed: int, data_seed: int) -> BackwardRecord:
    torch.manual_seed(seed)
    ddp = wrap_ddp(tiny_mlp(), ctx.device)
    data = synthetic_regression(ctx.world_size * per_rank_batch, seed=data_seed)
    x, y = (t.to(ctx.device) for t in rank_batch(*data, ctx.rank, ctx.world_size, per_rank_batch))
    watched = ddp.module[0].weight  # 첫 층: 역전파에서 그래디언트가 가장 늦게 나오는 파라미터
    local, local_comm = local_gradient(ddp, x, y)
    synced, loss, backward_comm, seen_in_backward = ddp_gradient(ddp, x, y, watched)

    # 옵티마이저 스텝: w ← w − η g (통신 없음)
    optimizer = make_optimizer("sgd", ddp.parameters(), lr=lr, momentum=0.0)
    with CollectiveCounter() as step_comm:
        optimizer.step()

    return {
        **ctx.describe(),
        "loss": float(loss.detach()),
        "n_params": count_parameters(ddp.module),
        "watched_numel": watched.numel(),
        "param_shapes": [[name, list(p.shape)] for name, p in ddp.module.named_parameters()],
        "local_grad": local.tolist(),
        "hook_grad": seen_in_backward[0],
        "ddp_grad": synced.tolist(),
        "comm": {"no_sync_backward": local_comm.as_dict(), "backward": backward_comm.as_dict(),
                 "step": step_comm.as_dict()},
        "backward_items": backward_comm.items,
    }


def _vectors(ranks: RankRecords, key: str) -> torch.Tensor:
    return torch.tensor([r[key] for r in ranks], dtype=torch.float64)


def gradient_summary(ranks: RankRecords) -> dict:
    """Local gradients, their mean and sum, and the DDP gradients, as rows of one tensor each."""
    local, synced = _vectors(ranks, "local_grad"), _vectors(ranks, "ddp_grad")
    return {"local": local, "mean": local.mean(dim=0), "sum": local.sum(dim=0), "ddp": synced}


def _comm_checks(ranks: RankRecords) -> list[Check]:
    def total(phase: str) -> int:
        return sum(sum(r["comm"][phase].values()) for r in ranks)

    fewest = min(r["comm"]["backward"].get("all_reduce", 0) for r in ranks)
    carried = sorted({sum(i["numel"] for i in r["backward_items"] if i["op"] == "all_reduce") for r in ranks})
    return [
        check_equal("no_sync_no_comm", total("no_sync_backward"), 0,
                    "no_sync() 안의 순전파·역전파에서는 집합 통신이 한 번도 없다(모든 랭크 합계)"),
        check_at_least("backward_all_reduces", fewest, 1,
              "DDP 모델의 loss.backward() 안에서 all_reduce가 1번 이상 실행된다(랭크 중 최솟값)"),
        check_equal("all_reduce_carries_all_grads", carried, [ranks[0]["n_params"]],
                    f"역전파의 all_reduce가 나른 원소 수 = 모델의 파라미터 수 {ranks[0]['n_params']}개(그래디언트 전부)"),
        check_equal("step_no_comm", total("step"), 0,
                    "optimizer.step()에서는 집합 통신이 없다(모든 랭크 합계)"),
    ]


class BackwardData(TypedDict):
    """The summary data of the 'backward' lab."""

    n_params: int
    local_norms: list[float]
    ddp_norms: list[float]
    mean: list[float]
    sum_norm_ratio: float
    losses: list[float]
    comm: dict[str, Any]
    backward_items: list[dict[str, Any]]


def summarize(ranks: list[BackwardRecord], backend: str, params: dict[str, Any]) -> Summary[BackwardData]:
    n = len(ranks)
    g = gradient_summary(ranks)
    watched = ranks[0]["watched_numel"]
    hook = _vectors(ranks, "hook_grad")
    distinct_local = len({tuple(round(v, 9) for v in row) for row in g["local"].tolist()})
    checks = [
        check_equal("local_grads_differ", distinct_local, n,
                    "로컬 그래디언트 g_i가 랭크마다 다르다(서로 다른 벡터의 개수; N=1이면 1개로 자명)"),
        check_close("hook_sees_local_grad", max_abs_diff(hook, g["local"][:, :watched]), 0.0, 1e-6,
                    "역전파 도중 훅이 본 첫 층 가중치의 그래디언트 = 그 랭크의 로컬 그래디언트(최대 절대 차이)"),
        check_close("ddp_grads_identical", max_abs_diff(g["ddp"], g["ddp"][0].expand_as(g["ddp"])), 0.0, 0.0,
                    "loss.backward()가 돌아온 직후의 그래디언트가 모든 랭크에서 비트 단위까지 같다(랭크 0과의 최대 차이)"),
        check_close("ddp_grad_is_mean", max_abs_diff(g["ddp"], g["mean"].expand_as(g["ddp"])), 0.0, 1e-6,
                    "DDP 그래디언트 = 로컬 그래디언트의 평균 (1/N) Σ g_i (float32 계산, 최대 절대 차이)"),
        *_comm_checks(ranks),
    ]
    data: BackwardData = {
        "n_params": ranks[0]["n_params"],
        "local_norms": g["local"].norm(dim=1).tolist(),
        "ddp_norms": g["ddp"].norm(dim=1).tolist(),
        "mean": g["mean"].tolist(),
        "sum_norm_ratio": float(g["sum"].norm() / g["ddp"][0].norm()),
        "losses": [r["loss"] for r in ranks],
        "comm": {phase: ranks[0]["comm"][phase] for phase in ranks[0]["comm"]},
        "backward_items": ranks[0]["backward_items"],
    }
    return Summary(data, checks)


LAB = Lab(
    name="backward",
    description="랭크마다 다른 로컬 그래디언트가 loss.backward() 안의 All-Reduce로 모든 랭크에서 같은 평균 그래디언트가 되는지 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=3,
    params={"per_rank_batch": Int(8, min=1, max=1024, help="랭크당 배치 B/N"),
            "lr": Float(0.1, min=0.0, max=10.0, min_open=True, help="학습률 η"),
            "seed": seed(), "data_seed": seed()},
    record=BackwardRecord,
    data=BackwardData,
)
