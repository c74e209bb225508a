"""Chapter 13 lab: the bytes one parameter costs in bf16 mixed precision with fp32 master weights, measured.

The course's MLP is cast to bfloat16 and wrapped in DDP, so the forward, the backward and the gradient
All-Reduce run in bfloat16. The optimizer (SGD with momentum, AdamW) steps fp32 *master* copies of the
parameters: before the step each master gets its bf16 gradient cast up, after it the bf16 parameter is
copied back from the master (the recipe of the ZeRO paper's 2 + 2 + 12 bytes with Adam). After S steps
each rank counts, by storage accounting (:func:`labs.tools.models.storage_bytes`), the bf16 parameters, the bf16
gradients and what the optimizer keeps: the fp32 masters plus its per-element state (the per-tensor
``step`` counter is a scalar, whatever the tensor's size, and is reported apart), and DDP's own flat
buckets (bf16, a second copy of the gradients with the default ``gradient_as_bucket_view=False``). The
fp32 master gradients live only during the step and are freed after it (4 bytes per parameter for the
step's duration, not counted). Divided by the number of parameters these are the bytes per parameter
chapter 13's memory calculator uses for bf16 mixed precision.

This is the ZeRO paper's accounting (2 + 2 + 12 bytes with Adam): the gradients and their All-Reduce in
bf16. Megatron-LM keeps fp32 main gradients and all-reduces them in fp32 for bf16 models, and FSDP2
recipes (torchtitan) reduce in fp32: 4 bytes of gradient per parameter instead of 2 (not measured here).
"""

from __future__ import annotations

import copy
from typing import Any, TypedDict

import torch

from ..context import Described, RankContext
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_equal, largest, not_applicable
from ..tools.comms import CollectiveCounter
from ..tools.models import (
    ddp_bucket_bytes,
    fingerprint_tensors,
    layer_stack,
    mse_backward,
    rank_batch,
    storage_bytes,
    synthetic_regression,
    wrap_ddp,
)
from ..tools.optim_state import OPTIMIZERS, elementwise_state
from ..tools.primitives import max_abs_diff

COMPUTE = torch.bfloat16  # 계산·그래디언트·통신의 자료형
MASTER = torch.float32  # 옵티마이저가 업데이트하는 마스터 가중치의 자료형
KINDS = ("params", "grads", "state")


def train_mixed(ctx: RankContext, init: torch.nn.Module, batches: list, opt: str, lr: float) -> dict:
    """S steps of DDP over a bf16 copy of ``init`` with an ``opt`` optimizer on fp32 masters; the bytes held."""
    model = copy.deepcopy(init).to(COMPUTE)
    ddp = wrap_ddp(model, ctx.device)
    params = list(model.parameters())
    masters = [p.detach().to(MASTER) for p in params]  # 마스터: 처음 값의 fp32 사본(bf16 값 그대로)
    cls, kwargs = OPTIMIZERS[opt]
    optimizer = cls(masters, lr=lr, **kwargs)
    dtypes = set()
    for x, y in batches:
        for p in params:
            p.grad = None
        with CollectiveCounter() as counter:
            mse_backward(ddp, x.to(COMPUTE), y.to(COMPUTE))  # 그래디언트 All-Reduce는 여기서, bf16으로
        dtypes |= {item["dtype"] for item in counter.items if item["op"] == "all_reduce"}
        for m, p in zip(masters, params):
            m.grad = p.grad.to(MASTER) if p.grad is not None else None  # 스텝 동안만 있는 fp32 그래디언트
        optimizer.step()
        with torch.no_grad():
            for m, p in zip(masters, params):
                m.grad = None
                p.copy_(m)  # bf16 파라미터 = 마스터를 bf16으로 반올림한 값
    per_element, per_tensor = elementwise_state(optimizer.state, masters)
    return {"memory": {"params": storage_bytes(params), "grads": storage_bytes(p.grad for p in params),
                       "master": storage_bytes(masters), "moments": storage_bytes(per_element),
                       "scalars": storage_bytes(per_tensor)},
            "allreduce_dtypes": sorted(dtypes),
            "rounding_diff": max_abs_diff([p.float() for p in params], [m.to(COMPUTE).float() for m in masters]),
            "fingerprint": fingerprint_tensors(masters)}


class MixedRecord(Described):
    """What each rank of the 'mixed' lab returns."""

    n_params: int
    ddp_buckets: dict[str, int]
    sgd: dict[str, Any]
    adamw: dict[str, Any]


def rank_fn(ctx: RankContext, width: int, depth: int, per_rank_batch: int, steps: int, lr: float,
            seed: int) -> MixedRecord:
    n = ctx.world_size
    x, y = synthetic_regression(steps * n * per_rank_batch, width, width, seed=seed)
    x, y = x.to(ctx.device), y.to(ctx.device)
    mine = [rank_batch(x, y, ctx.rank, n, per_rank_batch, s) for s in range(steps)]
    torch.manual_seed(seed)
    init = layer_stack(width, depth).to(ctx.device)
    x0, y0 = mine[0]
    buckets = ddp_bucket_bytes(copy.deepcopy(init).to(COMPUTE), ctx.device, x0.to(COMPUTE), y0.to(COMPUTE))
    sgd, adamw = (train_mixed(ctx, init, mine, opt, lr) for opt in OPTIMIZERS)
    return {**ctx.describe(), "n_params": sum(p.numel() for p in init.parameters()), "ddp_buckets": buckets,
            "sgd": sgd, "adamw": adamw}


# 옵티마이저가 파라미터 원소마다 fp32로 하나씩 두는 상태의 개수 (SGD: 모멘텀 버퍼, AdamW: 1차·2차 모멘트)
MOMENTS = {"sgd": 1, "adamw": 2}


class MixedData(TypedDict):
    """The summary data of the 'mixed' lab."""

    n_params: int
    memory: dict[str, dict[str, list]]
    bytes_per_param: dict[str, dict[str, float]]
    master_bytes_per_param: dict[str, float]


def summarize(ranks: list[MixedRecord], backend: str, params: dict[str, Any]) -> Summary[MixedData]:
    n, total = len(ranks), ranks[0]["n_params"]
    memory = {opt: {k: sorted({r[opt]["memory"][k] for r in ranks}) for k in ranks[0][opt]["memory"]}
              for opt in OPTIMIZERS}
    per_param = {opt: {k: [b / total for b in v] for k, v in memory[opt].items()} for opt in OPTIMIZERS}
    compute, master = COMPUTE.itemsize, MASTER.itemsize
    buckets = sorted({r["ddp_buckets"]["buckets"] for r in ranks})
    bytes_per_param = {opt: {"params": per_param[opt]["params"][0], "grads": per_param[opt]["grads"][0],
                             "buckets": buckets[0] / total,
                             "state": per_param[opt]["master"][0] + per_param[opt]["moments"][0]}
                       for opt in OPTIMIZERS}
    checks = [
        check_equal("params_compute_bytes", [per_param[opt]["params"] for opt in OPTIMIZERS], [[compute]] * 2,
                    f"모든 랭크의 파라미터가 원소 하나에 {compute}바이트(bfloat16의 원소 크기)다"
                    "(SGD, AdamW; 스토리지 바이트 ÷ 파라미터 수)"),
        check_equal("grads_compute_bytes", [per_param[opt]["grads"] for opt in OPTIMIZERS], [[compute]] * 2,
                    f"DDP가 평균한 그래디언트도 원소 하나에 {compute}바이트다: 그래디언트는 파라미터의 자료형을 따른다"),
        check_equal("ddp_buckets_compute_bytes", [b / total for b in buckets], [compute],
                    f"기본 DDP의 평평한 버킷도 bfloat16 그래디언트의 사본이라 파라미터 하나에 {compute}바이트다"
                    "(통신 훅이 받은 버킷 텐서의 저장소 ÷ 파라미터 수, 모든 랭크)"),
        check_equal("allreduce_in_compute_dtype", sorted({d for r in ranks for opt in OPTIMIZERS
                                                         for d in r[opt]["allreduce_dtypes"]}), ["bfloat16"],
                    "그래디언트 All-Reduce가 나른 텐서의 자료형(프로파일러가 본 작업 항목)이 bfloat16뿐이다"),
        check_equal("master_bytes", [per_param[opt]["master"] for opt in OPTIMIZERS], [[master]] * 2,
                    f"마스터 가중치가 파라미터 하나에 {master}바이트(float32의 원소 크기)다"),
        check_equal("moments_bytes", [per_param[opt]["moments"] for opt in OPTIMIZERS],
                    [[master * MOMENTS[opt]] for opt in OPTIMIZERS],
                    f"원소별 옵티마이저 상태: SGD 모멘텀 {master * MOMENTS['sgd']}바이트, AdamW의 두 모멘트 "
                    f"{master * MOMENTS['adamw']}바이트(float32 원소 크기 × 원소마다 두는 상태 수)"),
        check_equal("params_are_rounded_masters",
                    largest(r[opt]["rounding_diff"] for r in ranks for opt in OPTIMIZERS), 0.0,
                    "스텝 뒤 bf16 파라미터가 마스터를 bf16으로 반올림한 값과 비트 단위로 같다(최대 절대 차이)"),
    ]
    if n == 1:
        checks.append(not_applicable("masters_identical", "N=1이면 비교할 다른 랭크가 없다"))
    else:
        checks.append(check_equal("masters_identical",
                                  max(len({r[opt]["fingerprint"] for r in ranks}) for opt in OPTIMIZERS), 1,
                                  "모든 랭크의 마스터 가중치가 비트 단위로 같다(옵티마이저마다 서로 다른 지문 수의 최댓값)"))
    data: MixedData = {"n_params": total, "memory": memory, "bytes_per_param": bytes_per_param,
            "master_bytes_per_param": {opt: per_param[opt]["master"][0] for opt in OPTIMIZERS}}
    return Summary(data, checks)


LAB = Lab(
    name="mixed",
    description=("bf16 혼합 정밀도(fp32 마스터 가중치)에서 파라미터 하나가 차지하는 바이트를 DDP 랭크마다 "
                 "파라미터·그래디언트·옵티마이저 상태로 나눠 측정"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=13,
    params={"width": Int(32, min=1, max=512, help="MLP 한 층의 너비"),
            "depth": Int(4, min=1, max=32, help="Linear 층 수"),
            "per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "steps": Int(2, min=1, max=20, help="학습 스텝 수 S"),
            "lr": Float(0.01, min=0.0, max=0.1, min_open=True, help="학습률 η (SGD 모멘텀 0.9, AdamW)"),
            "seed": seed()},
    record=MixedRecord,
    data=MixedData,
)
