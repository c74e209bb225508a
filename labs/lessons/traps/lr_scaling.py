"""Trap 7: more ranks, the same learning rate: N times fewer steps per epoch, so a slower loss curve."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

from ...context import RankContext
from ...ddp.traps import learning_rate_bug, learning_rate_fix
from ...errors import LabConfigError
from ...params import Int
from ...result import Summary, check_at_least, check_close, not_applicable
from ...tools.models import flat_parameters, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from .common import EPOCHS, LR, PER_RANK_BATCH, SAMPLES, SEED, gathered_equal, loss_of, needs_a_global_batch

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "epochs": EPOCHS, "samples": SAMPLES,
          "warmup_steps": Int(4, min=1, max=1000, help="워밍업 스텝 수"), "lr": LR, "seed": SEED}


class LrScalingRecord(TypedDict):
    curve: list[float]  # full-data loss before training and after each epoch
    baseline: list[float] | None  # the same for one process with batch b and η (rank 0 only)
    params: list[float]


class LrScalingData(TypedDict):
    curve: list[float]
    baseline: list[float]
    final_ratio: float


RECORDS = {"bug": LrScalingRecord, "fix": LrScalingRecord}
DATA = {"bug": LrScalingData, "fix": LrScalingData}


def validate(params: dict, world_size: int) -> None:
    if params["lr"] * world_size > 0.6:
        raise LabConfigError(f"함정 lr_scaling은 N·η ≤ 0.6에서만 잴 수 있습니다(받은 값: N={world_size}, η={params['lr']:g}). "
                             "고친 쪽은 η를 N배로 키우므로 N·η가 1이면 한 프로세스와 손실이 15 % 넘게 달라진다(N=2에서 잰 값). "
                             f"lr={0.6 / world_size:g} 이하로 실행하세요.")
    steps = params["epochs"] * (params["samples"] // (world_size * params["per_rank_batch"]))
    if params["warmup_steps"] > steps // 2:
        raise LabConfigError(f"함정 lr_scaling의 warmup_steps({params['warmup_steps']})가 학습 스텝 {steps}개의 절반보다 "
                             "많습니다: 고친 쪽이 키운 η로 학습할 스텝이 모자라 두 학습을 비교할 수 없습니다. "
                             f"warmup_steps={max(1, steps // 2)} 이하로 하거나 epochs·samples를 늘리세요.")
    if params["per_rank_batch"] < 2:
        raise LabConfigError("함정 lr_scaling은 per_rank_batch=2 이상에서만 잴 수 있습니다: 샘플 하나짜리 배치는 잡음이 커서 "
                             "η를 N배로 키우는 규칙이 맞지 않는다(N=2에서 잰 손실 비율 1.19, 허용 1±0.15).")
    needs_a_global_batch(params, world_size)


def _full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(loss_of(model, x, y))


def _train_epochs(model, x, y, world_size: int, rank: int, learning_rate, per_rank_batch: int, lr: float,
                  epochs: int, warmup_steps: int, seed: int) -> list[float]:
    """SGD over ``epochs`` passes of a per-epoch shuffle shared by all ranks; full-data loss after each epoch."""
    b, step, curve = per_rank_batch, 0, [_full_loss(model, x, y)]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(epochs):
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed + epoch))
        xe, ye = x[order], y[order]
        for s in range(len(x) // (b * world_size)):
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(lr, world_size, step, warmup_steps)
            xb, yb = rank_batch(xe, ye, rank, world_size, b, s)
            optimizer.zero_grad()
            loss_of(model, xb, yb).backward()
            optimizer.step()
            step += 1
        curve.append(_full_loss(model, x, y))
    return curve


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, epochs: int, samples: int, warmup_steps: int,
            lr: float, seed: int) -> LrScalingRecord:
    x, y = synthetic_regression(samples, seed=seed)
    torch.manual_seed(seed)
    model = tiny_mlp()
    baseline = None
    if ctx.rank == 0:  # 기준: 한 프로세스, 배치 b, 학습률 η (다른 랭크를 기다리지 않는다)
        single = tiny_mlp()
        single.load_state_dict(model.state_dict())
        baseline = _train_epochs(single, x, y, 1, 0, learning_rate_bug, per_rank_batch, lr, epochs, warmup_steps, seed)
    ddp = wrap_ddp(model, ctx.device)
    learning_rate = learning_rate_bug if variant == "bug" else learning_rate_fix
    curve = _train_epochs(ddp, x.to(ctx.device), y.to(ctx.device), ctx.world_size, ctx.rank, learning_rate,
                          per_rank_batch, lr, epochs, warmup_steps, seed)
    return {"curve": curve, "baseline": baseline, "params": flat_parameters(model).tolist()}


def summarize(ranks: list[LrScalingRecord], variant: str, params: dict) -> Summary[LrScalingData]:
    n, epochs = len(ranks), params["epochs"]
    curve, baseline = ranks[0]["curve"], ranks[0]["baseline"]
    assert baseline is not None, "rank 0 trains the one-process baseline"
    ratio = curve[-1] / baseline[-1]
    checks = [check_close("replicas_identical", gathered_equal(ranks, "params"), 0.0, 1e-6,
                          "학습 뒤 복제본이 모든 랭크에서 같다(최대 절대 차이)")]
    if n == 1:
        checks.append(not_applicable("final_loss_vs_single", "N=1이면 기준과 같은 학습이라 비교할 것이 없다"))
    elif baseline[max(1, epochs // n)] < 1.5 * baseline[-1]:
        # 같은 η, N배 적은 스텝: 에폭 E 뒤의 DDP는 한 프로세스의 에폭 E/N 무렵과 같아야 한다. 한 프로세스가 그 뒤로
        # 손실을 1.5배 넘게 줄이지 못하면(이미 수렴했거나 η가 너무 작다) 스텝 수의 차이가 손실에 드러나지 않는다
        checks.append(not_applicable("final_loss_vs_single",
                                     f"한 프로세스 학습의 손실이 에폭 {max(1, epochs // n)} 뒤로 "
                                     f"{baseline[max(1, epochs // n)] / baseline[-1]:.2f}배만 줄어, 스텝이 {n}배 적은 것이 "
                                     "손실에 드러나지 않는다(에폭·samples를 줄이거나 η를 키우세요)"))
    elif variant == "bug":
        checks.append(check_at_least("final_loss_vs_single", ratio, 1.2,
                                     f"η를 그대로 두면 같은 에폭 뒤 손실이 한 프로세스(배치 b)보다 크다: 스텝이 {n}배 적다(손실 비율)"))
    else:
        checks.append(check_close("final_loss_vs_single", ratio, 1.0, 0.15,
                                  f"η를 {n}배로 키우고 워밍업하면 같은 에폭 뒤 손실이 한 프로세스와 비슷하다(손실 비율)"))
    return Summary({"curve": curve, "baseline": baseline, "final_ratio": ratio}, checks)
