"""Chapter 5 lab: the update w ← w − ηg keeps every replica identical, with no communication.

Every rank trains the same DDP model on its own data for a few steps, once with SGD (with
momentum) and once with Adam, and records after every step a fingerprint of its parameters,
the parameters themselves and which collectives ran during ``backward()`` and during
``optimizer.step()``. A third run wraps every step in ``no_sync()``: the gradients are no
longer averaged and the replicas drift apart (the preview of chapter 11).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import torch

from ..context import Described, RankContext
from ..ddp.update import TrainRun, train
from ..params import Float, Int, seed
from ..registry import Lab
from ..result import Summary, check_close, check_equal

Run = Literal["sgd", "adam", "no_sync"]
# (이름, 옵티마이저, 그래디언트 동기화 여부)
RUNS: tuple[tuple[Run, str, bool], ...] = (("sgd", "sgd", True), ("adam", "adam", True), ("no_sync", "sgd", False))


class UpdateRecord(Described):
    """What each rank of the 'update' lab returns."""

    sgd: TrainRun
    adam: TrainRun
    no_sync: TrainRun


def rank_fn(ctx: RankContext, steps: int, per_rank_batch: int, lr_sgd: float, lr_adam: float,
            seed: int) -> UpdateRecord:
    lr = {"sgd": lr_sgd, "adam": lr_adam}
    sgd, adam, no_sync = (train(ctx, opt, synced, steps, per_rank_batch, lr[opt], seed) for _, opt, synced in RUNS)
    return {**ctx.describe(), "sgd": sgd, "adam": adam, "no_sync": no_sync}


def max_rank_spread(ranks: list[UpdateRecord], run: Run) -> list[float]:
    """Per step: the largest |w_rank − w_rank0| over all parameters and ranks."""
    params = [torch.tensor(r[run]["params"], dtype=torch.float64) for r in ranks]
    return [float(max((p[s] - params[0][s]).abs().max() for p in params)) for s in range(len(params[0]))]


def distinct_fingerprints(ranks: list[UpdateRecord], run: Run) -> list[int]:
    """Per step: how many different parameter fingerprints the ranks have (1 = bit-identical replicas)."""
    return [len({r[run]["fingerprints"][s] for r in ranks}) for s in range(len(ranks[0][run]["fingerprints"]))]


def _collective_calls(ranks: list[UpdateRecord], run: Run,
                      where: Literal["train_collectives", "step_collectives"]) -> list[dict[str, int]]:
    return [c for r in ranks for c in r[run][where]]


def _replica_checks(ranks: list[UpdateRecord], run: Run, label: str, spread: list[float]) -> list:
    first, last = (torch.tensor(ranks[0][run]["params"][i]) for i in (0, -1))
    moved = float((last - first).abs().max())
    return [
        check_equal(f"{run}_fingerprints_every_step", sum(d - 1 for d in distinct_fingerprints(ranks, run)), 0,
                    f"{label}: 모든 스텝에서 모든 랭크의 파라미터 지문이 하나뿐이다(스텝마다 '지문 종류 수 − 1'의 합)"),
        check_close(f"{run}_max_param_diff", max(spread), 0.0, 0.0,
                    f"{label}: 모든 스텝, 모든 파라미터에서 랭크 간 최대 절대 차이가 정확히 0이다"),
        check_equal(f"{run}_parameters_moved", moved > 0, True,
                    f"{label}: 학습이 실제로 일어났다(첫 스텝 대비 최대 변화 {moved:.3g} > 0)"),
    ]


def _communication_checks(ranks: list[UpdateRecord]) -> list:
    n = len(ranks)
    in_step = [c for run in ("sgd", "adam") for c in _collective_calls(ranks, run, "step_collectives")]
    training = [c for run in ("sgd", "adam") for c in _collective_calls(ranks, run, "train_collectives")]
    unsynced = _collective_calls(ranks, "no_sync", "train_collectives")
    return [
        check_equal("adam_state_identical", len({r["adam"]["optimizer_state"] for r in ranks}), 1,
                    "Adam의 상태(exp_avg, exp_avg_sq, step)도 랭크마다 따로 계산되지만 모든 랭크에서 같다(지문 종류 수)"),
        check_equal("optimizer_step_collectives", sum(sum(c.values()) for c in in_step), 0,
                    "optimizer.step()은 집합 통신을 한 번도 하지 않는다(모든 랭크·스텝의 횟수 합)"),
        check_equal("backward_allreduce_every_step", sum(1 for c in training if n > 1 and not c.get("all_reduce")), 0,
                    "DDP 학습 스텝마다 그래디언트 All-Reduce가 실행된다(All-Reduce가 없던 스텝 수, N>1)"),
        check_equal("no_sync_train_collectives", sum(sum(c.values()) for c in unsynced), 0,
                    "no_sync() 안의 순전파·역전파는 집합 통신을 하지 않는다(횟수 합)"),
        check_equal("no_sync_replicas_diverge", len({r["no_sync"]["fingerprints"][-1] for r in ranks}), n,
                    "동기화하지 않으면 마지막 스텝에서 랭크마다 파라미터가 모두 다르다(지문 종류 수 = N)"),
    ]


class UpdateData(TypedDict):
    """The summary data of the 'update' lab."""

    spread: dict[str, list[float]]
    distinct_fingerprints: dict[str, list[int]]


def summarize(ranks: list[UpdateRecord], backend: str, params: dict[str, Any]) -> Summary[UpdateData]:
    spread: dict[str, list[float]] = {run: max_rank_spread(ranks, run) for run, _, _ in RUNS}
    checks = [*_replica_checks(ranks, "sgd", "SGD(모멘텀)", spread["sgd"]),
              *_replica_checks(ranks, "adam", "Adam", spread["adam"]),
              *_communication_checks(ranks)]
    data: UpdateData = {"spread": spread, "distinct_fingerprints": {run: distinct_fingerprints(ranks, run) for run, _, _ in RUNS}}
    return Summary(data, checks)


LAB = Lab(
    name="update",
    description=("SGD(모멘텀)와 Adam으로 몇 스텝 학습하는 동안 모든 랭크의 파라미터가 매 스텝 같고, "
                 "optimizer.step()은 통신하지 않으며, 동기화를 끄면 어긋나는지 확인"),
    rank_fn=rank_fn,
    summarize=summarize,
    default_nproc=4,
    chapter=5,
    params={"steps": Int(8, min=1, max=200, help="학습 스텝 수"),
            "per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "lr_sgd": Float(0.05, min=0.001, max=0.05, help="SGD 학습률 (B/N=1, 200스텝에서 0.07이면 발산한다)"),
            "lr_adam": Float(0.01, min=0.001, max=10.0, help="Adam 학습률"),
            "seed": seed()},
    record=UpdateRecord,
    data=UpdateData,
)
