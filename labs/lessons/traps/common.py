"""What several traps share: the loss, a rank's batches, plain training steps, a comparison across ranks, and
the rules and summary of a bug that must not finish."""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn
from torch.nn import functional as F

from ...context import RankContext
from ...errors import LabConfigError
from ...params import Float, Int, seed
from ...result import Summary, check_equal, largest
from ...tools.comms import CollectiveCounter
from ...tools.models import rank_batch, synthetic_regression
from ...tools.primitives import max_abs_diff


class NoData(TypedDict):
    """The summary data of a trap that has nothing to report (its checks say everything)."""


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def gathered_equal(ranks: list, key: str) -> float:
    """Largest difference of ``key`` (a flat list) between rank 0 and any other rank."""
    return largest(max_abs_diff(r[key], ranks[0][key]) for r in ranks)


def rank_batches(ctx: RankContext, steps: int, per_rank_batch: int, seed: int) -> list:
    """This rank's share of ``steps`` global batches of the synthetic regression data, on its device."""
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, seed=seed)
    return [tuple(t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s))
            for s in range(steps)]


def train_steps(ddp, optimizer, batches) -> list[dict]:
    """Plain training steps; per step the loss and the collectives the step issued."""
    log = []
    for x, y in batches:
        with CollectiveCounter() as counter:
            optimizer.zero_grad()
            loss = loss_of(ddp, x, y)
            loss.backward()
        optimizer.step()
        log.append({"loss": loss.item(), "all_reduce": counter.counts["all_reduce"], "items": counter.items})
    return log


def finished_anyway(expected: str, claim: str) -> Summary[NoData]:
    """A bug that should never return records did: the one check says so (and fails)."""
    return Summary({}, [check_equal("finished", "ok", expected, claim)])


def needs_a_peer(trap: str, params: dict, world_size: int) -> None:
    """A bug that hangs, raises or kills a rank happens only between ranks: refused at N=1."""
    if world_size < 2 and params["variant"] == "bug":
        raise LabConfigError(f"함정 {trap}은(는) 랭크가 둘 이상일 때만 일어납니다(랭크가 하나면 어긋날 다른 랭크가 "
                             "없다). nproc=2 이상으로 실행하세요.")


def needs_a_global_batch(params: dict, world_size: int) -> None:
    """A dataset smaller than one step's global batch leaves an epoch without a step."""
    if params["samples"] < world_size * params["per_rank_batch"]:
        raise LabConfigError(f"samples={params['samples']}이(가) 한 스텝의 전역 배치 N·(B/N) = "
                             f"{world_size * params['per_rank_batch']}보다 작습니다. samples를 늘리거나 per_rank_batch를 줄이세요.")


# The parameters several traps read, declared once (each trap's PARAMS lists those it reads).
PER_RANK_BATCH = Int(4, min=1, max=256, help="랭크당 배치 B/N")
STEPS = Int(3, min=2, max=100, help="학습 스텝 수")
EPOCHS = Int(3, min=2, max=50, help="에폭 수")
SAMPLES = Int(64, min=8, max=4096, help="데이터셋 크기")
LR = Float(0.1, min=0.0, max=1.0, min_open=True, help="학습률 η")
SEED = seed()
