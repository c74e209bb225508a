"""Chapter 5 lab: N ranks × B/N samples under DDP = one process × B samples, up to float rounding.

Following PyTorch's own DDP test (``_test_DDP_niter`` in
``torch/testing/_internal/distributed/distributed_test.py``), every rank trains two models
from the same initial weights: a DDP model on its slice ``input[r·B/N:(r+1)·B/N]`` and a plain
local copy on the whole global batch ``input``. The batch is reshuffled every step with the
same seeded permutation on every rank. After every step the two models are compared.

With ``grad_reduce="sum"`` every rank scales its loss by N, which is what summing the
gradients instead of averaging them amounts to: then the two models must disagree.
"""

from __future__ import annotations

import copy
from typing import Any, TypedDict

import torch

from ..context import Described, RankContext
from ..ddp.equivalence import train_both
from ..errors import LabConfigError
from ..params import Choice, Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal, largest
from ..tools.models import fingerprint, flat_parameters, synthetic_regression, tiny_mlp, wrap_ddp
from ..tools.primitives import ATOL, RTOL

GRAD_REDUCE = ("mean", "sum")


def validate(params: dict, world_size: int) -> None:
    if params["global_batch"] % world_size:
        raise LabConfigError(
            f"인자 global_batch: 랭크 수 N={world_size}로 나누어떨어져야 합니다(랭크마다 B/N개). "
            f"받은 값: {params['global_batch']}. 예: global_batch={world_size * max(1, params['global_batch'] // world_size)}")


class EquivalenceRecord(Described):
    """What each rank of the 'equivalence' lab returns."""

    param_diff: list[float]
    grad_diff: list[float]
    perms: list[list[int]]
    local_params: list[float]
    ddp_params: list[float]
    fingerprint_local: str
    fingerprint_ddp: str


def rank_fn(ctx: RankContext, global_batch: int, steps: int, lr: float, seed: int,
            grad_reduce: str) -> EquivalenceRecord:
    torch.manual_seed(seed)
    local = tiny_mlp().to(ctx.device)  # 한 프로세스가 전역 배치 B개로 학습하는 기준 모델
    ddp = wrap_ddp(copy.deepcopy(local), ctx.device)  # 같은 초기값의 DDP 모델: 이 랭크는 B/N개만 본다
    x, y = (t.to(ctx.device) for t in synthetic_regression(global_batch, seed=seed))
    scale = float(ctx.world_size) if grad_reduce == "sum" else 1.0
    diffs, grad_diffs, perms = train_both(ctx, local, ddp, x, y, steps, lr, seed, scale)
    return {
        **ctx.describe(),
        "param_diff": diffs,
        "grad_diff": grad_diffs,
        "perms": perms,
        "local_params": flat_parameters(local).tolist(),
        "ddp_params": flat_parameters(ddp.module).tolist(),
        "fingerprint_local": fingerprint(local),
        "fingerprint_ddp": fingerprint(ddp.module),
    }


def allclose_tolerance(reference: torch.Tensor) -> float:
    """PyTorch's elementwise rule |a − b| ≤ atol + rtol·|b|, at the largest |b|: one number to state."""
    return ATOL + RTOL * float(reference.abs().max())


class EquivalenceData(TypedDict):
    """The summary data of the 'equivalence' lab."""

    max_param_diff: float
    max_grad_diff: float
    param_diff_per_step: list[float]
    tolerance: float
    per_rank_batch: int


def summarize(ranks: list[EquivalenceRecord], backend: str, params: dict[str, Any]) -> Summary[EquivalenceData]:
    n = len(ranks)
    local = torch.tensor(ranks[0]["local_params"], dtype=torch.float64)
    ddp = torch.tensor(ranks[0]["ddp_params"], dtype=torch.float64)
    max_diff = largest(d for r in ranks for d in r["param_diff"])
    elementwise_ok = bool(((ddp - local).abs() <= ATOL + RTOL * local.abs()).all())
    checks = [
        check_close("matches_single_process", max_diff, 0.0, allclose_tolerance(local),
                    f"DDP(N={n}, 랭크당 B/N)와 한 프로세스(전역 배치 B)의 파라미터가 모든 스텝에서 "
                    f"atol {ATOL:g} + rtol {RTOL:g}·|w| 안에서 같다(최대 절대 차이)"),
        check_equal("elementwise_allclose", elementwise_ok, True,
                    "마지막 파라미터가 원소마다 |w_DDP − w_단일| ≤ atol + rtol·|w_단일|을 만족한다(torch.testing 규칙)"),
        check_equal("ddp_replicas_identical", len({r["fingerprint_ddp"] for r in ranks}), 1,
                    "DDP 복제본은 모든 랭크에서 비트 단위까지 같다(지문 종류 수)"),
        check_equal("reference_identical", len({r["fingerprint_local"] for r in ranks}), 1,
                    "기준 모델(전역 배치로 학습)도 모든 랭크에서 같다(지문 종류 수)"),
        check_equal("reshuffled_every_step", len({tuple(p) for p in ranks[0]["perms"]}), params["steps"],
                    "스텝마다 전역 배치를 다른 순서로 섞었다(서로 다른 순열 수 = 스텝 수)"),
    ]
    if n == 1:
        checks.append(check_close("exact_with_one_rank", max_diff, 0.0, 0.0,
                                  "N=1이면 더하는 순서가 같으므로 두 모델이 비트 단위까지 같다(최대 절대 차이)"))
    data: EquivalenceData = {
        "max_param_diff": max_diff,
        "max_grad_diff": largest(d for r in ranks for d in r["grad_diff"]),
        "param_diff_per_step": [largest(r["param_diff"][s] for r in ranks) for s in range(params["steps"])],
        "tolerance": allclose_tolerance(local),
        "per_rank_batch": params["global_batch"] // n,
    }
    return Summary(data, checks)


def float_sum_orders(values: torch.Tensor, chunkings=(1, 2, 3, 4)) -> dict[int, float]:
    """Sum float32 ``values`` as k chunk sums added together, for each k: the order changes the bits."""
    return {k: float(torch.stack([c.sum() for c in values.tensor_split(k)]).sum()) for k in chunkings}


LAB = Lab(
    name="equivalence",
    description="랭크 N개가 B/N개씩 DDP로 학습한 결과가 한 프로세스가 B개 전체로 학습한 결과와 부동소수점 오차 안에서 같은지 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=5,
    params={"global_batch": Int(12, min=1, max=4096, help="전역 배치 B (N으로 나누어떨어져야 함)"),
            "steps": Int(6, min=1, max=200, help="학습 스텝 수"),
            "lr": Float(0.1, min=0.0, max=1.0, min_open=True, help="학습률 η (2에서는 발산한다)"),
            "seed": seed(),
            "grad_reduce": Choice("mean", GRAD_REDUCE, help="DDP가 그래디언트를 합친 뒤 평균(mean) 또는 합(sum)")},
    validate=validate,
    record=EquivalenceRecord,
    data=EquivalenceData,
)
