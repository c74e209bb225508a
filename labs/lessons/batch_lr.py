"""Chapter 4 lab: global batch B = b·N·K and the learning rate η when the rank count N changes.

Chapter 6's own training task (8×8 digits, the same MLP, data split and ``DistributedSampler``
loaders as ``labs/ddp/train_script.py``), trained with plain SGD for the same number of epochs in
three regimes on every rank under DDP (K = 1, no accumulation):

* ``fixed_global``: the global batch stays B, each rank takes b = B/N, learning rate η;
* ``fixed_per_rank``: each rank keeps b = B, so the global batch is N·B, learning rate still η;
* ``linear_scaled``: b = B as well, learning rate N·η reached by a linear warm-up (Goyal et al., 2017).

Rank 0 also trains the reference, one process without DDP on batch B with η, without waiting
for the others. Everything trains in float64: over 180 float32 steps the different order in which
DDP sums the gradients can grow past float32's tolerance (lr=0.035: 8e-5 after 3 epochs, 3e-4
after 12, against 1e-5), which would hide the claim "same training" behind chapter 5's rounding.
With ``grad_reduce="sum"`` a DDP communication hook sums the gradients instead of averaging them: the broken variant the checks must catch.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from typing import Any, TypedDict, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

from ..context import Described, RankContext
from ..ddp.train_script import TrainConfig, load_digits_split, make_ddp_model, make_loader, make_model, train_one_epoch
from ..errors import LabConfigError
from ..params import Choice, Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_at_least, check_close, check_equal, largest, not_applicable
from ..tools.models import flat_parameters
from ..tools.primitives import make_optimizer, max_abs_diff

REGIMES = ("fixed_global", "fixed_per_rank", "linear_scaled")
GRAD_REDUCE = ("mean", "sum")
TRAIN_SIZE = 1440  # load_digits_split()의 학습 데이터 수
UNSCALED_MIN_RATIO = 1.5  # η를 그대로 두면 같은 에폭 뒤 손실이 적어도 이만큼 크다
SCALED_TOLERANCE = 0.15   # 선형 규칙 + 워밍업이면 손실 비율이 1에서 이만큼 안
RTOL64, ATOL64 = 1e-7, 1e-7  # torch.testing.assert_close의 float64 기본값


def regime_setup(regime: str, global_batch: int, lr: float, world_size: int) -> tuple[int, float]:
    """(global batch over all ranks, peak learning rate) of one regime: B = b·N with K = 1."""
    if regime == "fixed_global":
        return global_batch, lr                        # B 그대로, b = B/N, η 그대로
    if regime == "fixed_per_rank":
        return global_batch * world_size, lr           # b = B 그대로 → 전역 배치 N·B, η 그대로
    return global_batch * world_size, lr * world_size  # 전역 배치 N·B, 선형 규칙 N·η


def _sum_hook(state, bucket):
    """Broken on purpose: all-reduce the bucket without dividing by N (a sum, not a mean)."""
    return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda fut: fut.value()[0])


@contextmanager
def float64_training():
    """Parameters created inside are float64 (``nn.Linear`` takes the default dtype); restored afterwards."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(before)


def float64_tolerance(reference: torch.Tensor) -> float:
    """PyTorch's float64 rule |a − b| ≤ atol + rtol·|b| at the largest |b|."""
    return ATOL64 + RTOL64 * float(reference.abs().max())


def full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean cross-entropy over the whole training set: the same number however it was trained."""
    with torch.no_grad():
        return float(nn.functional.cross_entropy(model(x), y))


def train_epochs(model: nn.Module, cfg: TrainConfig, peak_lr: float, warmup_steps: int, train_set,
                 world_size: int, rank: int, device: torch.device) -> dict:
    """SGD over ``cfg.epochs`` epochs of chapter 6's loader; the loss curve, steps per epoch and each step's η."""
    optimizer = make_optimizer("sgd", model.parameters(), peak_lr, momentum=0.0)
    # 워밍업: 첫 warmup_steps 스텝 동안 η에서 peak_lr까지 선형으로 올린다
    warmup = None
    if warmup_steps and peak_lr != cfg.lr:
        warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=cfg.lr / peak_lr,
                                                   total_iters=warmup_steps)
    sampler, loader = make_loader(train_set, cfg, world_size, rank)
    x, y = (t.to(device) for t in train_set.tensors)
    curve, steps, lrs = [full_loss(model, x, y)], [], []

    def scheduled(batches):
        for batch in batches:
            lrs.append(optimizer.param_groups[0]["lr"])
            yield batch
            if warmup is not None:
                warmup.step()

    for epoch in range(cfg.epochs):
        sampler.set_epoch(epoch)
        before = len(lrs)
        train_one_epoch(model, scheduled(loader), optimizer, device)
        steps.append(len(lrs) - before)
        curve.append(full_loss(model, x, y))
    return {"curve": curve, "steps_per_epoch": steps, "lrs": lrs}


class BatchLRRecord(Described):
    """What each rank of the 'batch_lr' lab returns."""

    single: dict[str, Any] | None
    regimes: dict[str, dict[str, Any]]


def rank_fn(ctx: RankContext, global_batch: int, lr: float, epochs: int, warmup_epochs: int, seed: int,
            grad_reduce: str) -> BatchLRRecord:
    # 64·64짜리 작은 층: 스레드 하나가 가장 빠르다. 코어를 나눠 쓰는 기계에서 N=1에 스레드 여럿을 주면
    # 스텝마다 스레드끼리 기다리느라 몇 배 느려진다(이 빌드 기계에서 잰 것)
    torch.set_num_threads(1)
    with float64_training():
        return cast(BatchLRRecord, _train_all(ctx, global_batch, lr, epochs, warmup_epochs, seed, grad_reduce))


def _train_all(ctx: RankContext, global_batch: int, lr: float, epochs: int, warmup_epochs: int, seed: int,
               grad_reduce: str) -> dict:
    x, y = load_digits_split()[0].tensors
    train_set = TensorDataset(x.double(), y)
    single: dict[str, Any] | None = None
    if ctx.rank == 0:  # 기준: DDP 없이 한 프로세스, 배치 B, η (다른 랭크를 기다리지 않는다)
        cfg = TrainConfig(epochs=epochs, global_batch=global_batch, lr=lr, seed=seed)
        model = make_model(cfg, ctx.device)
        single = train_epochs(model, cfg, lr, 0, train_set, 1, 0, ctx.device)
        single["params"] = flat_parameters(model).tolist()
    regimes = {}
    for regime in REGIMES:
        batch, peak = regime_setup(regime, global_batch, lr, ctx.world_size)
        cfg = TrainConfig(epochs=epochs, global_batch=batch, lr=lr, seed=seed)
        ddp = make_ddp_model(cfg, ctx)  # 기준과 같은 시드의 초기값
        if grad_reduce == "sum":
            ddp.register_comm_hook(None, _sum_hook)
        warmup_steps = warmup_epochs * math.ceil(TRAIN_SIZE / batch)  # 에폭당 스텝 수(마지막 스텝은 짧을 수 있다)
        run = train_epochs(ddp, cfg, peak, warmup_steps, train_set, ctx.world_size, ctx.rank, ctx.device)
        regimes[regime] = {**run, "global_batch": batch, "per_rank_batch": batch // ctx.world_size,
                           "peak_lr": peak, "params": flat_parameters(ddp.module).tolist()}
    return {**ctx.describe(), "single": single, "regimes": regimes}


class BatchLRData(TypedDict):
    """The summary data of the 'batch_lr' lab."""

    single: dict[str, Any]
    regimes: dict[str, dict[str, Any]]
    final_ratio: dict[str, float]
    max_diff_fixed_global: float
    tolerance: float


def summarize(ranks: list[BatchLRRecord], backend: str, params: dict[str, Any]) -> Summary[BatchLRData]:
    n = len(ranks)
    single, regimes = ranks[0]["single"], ranks[0]["regimes"]
    assert single is not None, "rank 0 trains the one-process reference"
    reference = torch.tensor(single["params"], dtype=torch.float64)
    tolerance = float64_tolerance(reference)
    diff = max_abs_diff(regimes["fixed_global"]["params"], single["params"])
    spread = largest(max_abs_diff(r["regimes"][g]["params"], regimes[g]["params"]) for r in ranks for g in REGIMES)
    ratios = {g: regimes[g]["curve"][-1] / single["curve"][-1] for g in REGIMES}
    steps_single = single["steps_per_epoch"]
    checks = [
        check_close("fixed_global_matches_single", diff, 0.0, tolerance,
                    f"전역 배치 B를 고정하면(b = B/N) 같은 η로 학습한 DDP(N={n})의 파라미터가 한 프로세스(배치 B)와 "
                    f"float64 허용 오차(atol {ATOL64:g} + rtol {RTOL64:g}·|w|) 안에서 같다(최대 절대 차이)"),
        check_close("replicas_identical", spread, 0.0, 0.0,
                    "세 방식 모두 학습 뒤 복제본이 모든 랭크에서 같다(최대 절대 차이)"),
    ]
    if n == 1:
        reason = "N=1이면 b를 고정해도 전역 배치가 B 그대로라서 세 방식이 기준과 같은 학습이다"
        checks += [not_applicable(name, reason) for name in
                   ("fixed_per_rank_fewer_steps", "fixed_per_rank_loss_higher", "linear_scaled_loss_close")]
    else:
        checks += [
            check_equal("fixed_per_rank_fewer_steps", regimes["fixed_per_rank"]["steps_per_epoch"],
                        [math.ceil(s / n) for s in steps_single],
                        f"b를 고정하면 전역 배치가 {n}배라서 에폭당 스텝이 한 프로세스의 1/{n}(올림)이다(에폭마다 스텝 수)"),
            check_at_least("fixed_per_rank_loss_higher", ratios["fixed_per_rank"], UNSCALED_MIN_RATIO,
                           "b를 고정하고 η를 그대로 두면 같은 에폭 뒤 손실이 한 프로세스보다 크다(손실 비율)"),
            check_close("linear_scaled_loss_close", ratios["linear_scaled"], 1.0, SCALED_TOLERANCE,
                        f"η를 {n}배로 키우고 워밍업하면 같은 에폭 뒤 손실이 한 프로세스와 비슷하다(손실 비율)"),
        ]
    data: BatchLRData = {
        "single": {k: single[k] for k in ("curve", "steps_per_epoch")},
        "regimes": {g: {k: regimes[g][k] for k in ("curve", "steps_per_epoch", "lrs", "global_batch",
                                                    "per_rank_batch", "peak_lr")} for g in REGIMES},
        "final_ratio": ratios,
        "max_diff_fixed_global": diff,
        "tolerance": tolerance,
    }
    return Summary(data, checks)


def validate(params: dict, world_size: int) -> None:
    b = params["global_batch"]
    if b % world_size:
        raise LabConfigError(f"인자 global_batch: 전역 배치 B를 고정하는 방식은 랭크마다 B/N개를 주므로 N={world_size}로 "
                             f"나누어떨어져야 합니다. 받은 값: {b}. 예: global_batch={world_size * max(1, b // world_size)}")
    if 2 * params["warmup_epochs"] > params["epochs"]:
        raise LabConfigError(f"인자 warmup_epochs: 워밍업은 에폭 수의 절반 이하여야 (다)의 마지막 손실을 잴 수 있습니다. "
                             f"받은 값: warmup_epochs={params['warmup_epochs']}, epochs={params['epochs']}. "
                             f"예: warmup_epochs={params['epochs'] // 2}")
    if TRAIN_SIZE % b:
        raise LabConfigError(f"인자 global_batch: 한 프로세스의 에폭이 같은 크기의 스텝으로 나뉘도록 학습 데이터 "
                             f"{TRAIN_SIZE}개를 나누어야 합니다. 받은 값: {b}. 예: 24, 48, 120")


LAB = Lab(
    name="batch_lr",
    description="전역 배치 B = b·N을 고정하면 η 그대로 한 프로세스와 같고, "
                "b를 고정하면 η를 N배(워밍업)로 키워야 하는지 6장의 학습 과제로 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=2,
    chapter=4,
    # 범위는 세 주장을 잴 수 있는 곳으로 좁혔다: 학습률이 너무 작거나 에폭이 너무 적으면 어느 방식도 거의 움직이지 않아
    # (나)가 더 나쁘다는 것이 보이지 않고, 너무 크면 발산한다 (tests/test_engine_params.py가 경계와 중간값을 실제로 돌린다)
    params={"global_batch": Int(48, min=8, max=96, help="한 프로세스의 배치 = 전역 배치 B (N으로 나누어떨어지고 1440을 나누어야 함)"),
            "lr": Float(0.04, min=0.02, max=0.05, help="한 프로세스의 학습률 η (SGD, 모멘텀 없음)"),
            "epochs": Int(6, min=3, max=12, help="에폭 수 (세 방식 모두 같은 데이터를 같은 횟수만큼 본다)"),
            "warmup_epochs": Int(1, min=0, max=2, help="선형 규칙의 워밍업 길이(에폭, 에폭 수의 절반 이하), 0이면 워밍업 없음"),
            "seed": seed(),
            "grad_reduce": Choice("mean", GRAD_REDUCE, help="DDP가 그래디언트를 평균(mean) 또는 일부러 합(sum)")},
    validate=validate,
    record=BatchLRRecord,
    data=BatchLRData,
)
