"""Trap 9: reentrant activation checkpointing of a block used twice: DDP marks a parameter ready twice."""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ...context import RankContext
from ...ddp.traps import TiedBlocks, checkpointed_bug, checkpointed_fix, checkpointed_static_fix
from ...result import Summary, check_close, check_equal, check_true
from ...tools.models import flat_parameters, rank_batch, synthetic_regression
from ...tools.primitives import max_abs_diff
from .common import LR, PER_RANK_BATCH, SEED, STEPS, loss_of

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "steps": STEPS, "lr": LR, "seed": SEED}
# The reducer's own words (torch 2.13): the checks look for them in the captured messages.
PHRASE = "Expected to mark a variable ready only once"
WRAPS = {"bug": {"reentrant": checkpointed_bug},
         "fix": {"non_reentrant": checkpointed_fix, "static_graph": checkpointed_static_fix}}


class CheckpointingRecord(TypedDict):
    runs: dict[str, dict[str, Any]]  # per way of wrapping: steps done, DDP's error, parameters
    single: list[float]  # the one-process reference's parameters


class CheckpointingBugData(TypedDict):
    error: str


class CheckpointingFixData(TypedDict):
    rows: dict[str, dict[str, float]]


RECORDS = {"bug": CheckpointingRecord, "fix": CheckpointingRecord}
DATA = {"bug": CheckpointingBugData, "fix": CheckpointingFixData}


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, steps: int, lr: float,
            seed: int) -> CheckpointingRecord:
    """Each way of wrapping :class:`TiedBlocks` trains ``steps`` steps (or stops at DDP's error); beside it, one
    process trains the same model on the whole global batch without DDP (the reference, on every rank)."""
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, seed=seed)
    global_batch = ctx.world_size * per_rank_batch
    torch.manual_seed(seed)
    single = TiedBlocks(use_reentrant=False).to(ctx.device)  # 같은 초기값의 한 프로세스 기준: DDP 없이 전역 배치 B개로
    reference = torch.optim.SGD(single.parameters(), lr=lr)
    for s in range(steps):
        reference.zero_grad()
        loss_of(single, x[s * global_batch:(s + 1) * global_batch].to(ctx.device),
                y[s * global_batch:(s + 1) * global_batch].to(ctx.device)).backward()
        reference.step()
    runs = {}
    for name, wrap in WRAPS[variant].items():
        torch.manual_seed(seed)
        ddp = wrap(ctx.device)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        done, error = 0, ""
        try:
            for s in range(steps):
                bx, by = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s)
                optimizer.zero_grad()
                loss_of(ddp, bx.to(ctx.device), by.to(ctx.device)).backward()
                optimizer.step()
                done += 1
        except RuntimeError as err:  # 리듀서가 역전파 안에서 내는 예외: 그 문장 그대로 남긴다
            error = str(err)
        runs[name] = {"steps_done": done, "error": error, "params": flat_parameters(ddp.module).tolist()}
    return {"runs": runs, "single": flat_parameters(single).tolist()}


def summarize(ranks: list[CheckpointingRecord], variant: str, params: dict) -> Summary[Any]:
    return bug_summary(ranks) if variant == "bug" else fix_summary(ranks, params["steps"])


def bug_summary(ranks: list[CheckpointingRecord]) -> Summary[CheckpointingBugData]:
    errors = [r["runs"]["reentrant"]["error"] for r in ranks]
    checks = [check_true("reducer_ready_twice", all(PHRASE in e for e in errors), len(errors),
                         f"첫 역전파에서 모든 랭크의 리듀서가 '{PHRASE}…' 예외를 낸다(랭크 수)"),
              check_equal("no_step_done", sorted({r["runs"]["reentrant"]["steps_done"] for r in ranks}), [0],
                          "그래서 한 스텝도 마치지 못한다(마친 스텝 수)")]
    return Summary({"error": errors[0]}, checks)


def fix_summary(ranks: list[CheckpointingRecord], steps: int) -> Summary[CheckpointingFixData]:
    checks, rows = [], {}
    for name in WRAPS["fix"]:
        params = [r["runs"][name]["params"] for r in ranks]
        from_single = max(max_abs_diff(p, r["single"]) for p, r in zip(params, ranks))
        rows[name] = {"from_single": from_single}
        checks.append(check_equal(f"{name}_trains", sorted({r["runs"][name]["steps_done"] for r in ranks}), [steps],
                                  f"{name}: 예외 없이 {steps}스텝을 모두 마친다(마친 스텝 수)"))
        checks.append(check_close(f"{name}_replicas_identical", max(max_abs_diff(p, params[0]) for p in params),
                                  0.0, 0.0, f"{name}: 복제본이 모든 랭크에서 같다(최대 절대 차이)"))
        checks.append(check_close(f"{name}_matches_single", from_single, 0.0, 1e-5,
                                  f"{name}: 전역 배치 B개로 DDP 없이 학습한 한 프로세스와 같다(최대 절대 차이, float32 합의 순서만큼)"))
    return Summary({"rows": rows}, checks)
