"""Trap 2: a parameter the forward pass never uses: the reducer waits for its gradient forever."""

from __future__ import annotations

from typing import Any, TypedDict

import torch

from ...context import RankContext
from ...ddp.traps import TwoHeads
from ...result import Check, Summary, check_at_least, check_close, check_equal, check_true, largest, not_applicable
from ...tools.models import flat_parameters, wrap_ddp
from ...tools.primitives import max_abs_diff
from .common import LR, PER_RANK_BATCH, SEED, STEPS, rank_batches, train_steps

# The reducer's own words (torch 2.13): the checks look for them in the captured messages.
PHRASE = "Expected to have finished reduction in the prior iteration"
PARAMS = {"per_rank_batch": PER_RANK_BATCH, "steps": STEPS, "lr": LR, "seed": SEED}
CONFIGS: dict[str, dict[str, dict[str, bool]]] = {"bug": {"default": {}},
           "fix": {"find_unused_parameters": {"find_unused_parameters": True},
                   "static_graph": {"static_graph": True}}}


class UnusedRecord(TypedDict):
    runs: dict[str, dict[str, Any]]  # per DDP configuration: log, error, parameters before/after


class UnusedBugData(TypedDict):
    error: str
    first_step_all_reduce: int
    drift: float | None


class UnusedFixData(TypedDict):
    rows: dict[str, dict[str, Any]]
    n_param_tensors: int


RECORDS = {"bug": UnusedRecord, "fix": UnusedRecord}
DATA = {"bug": UnusedBugData, "fix": UnusedFixData}


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, steps: int, lr: float,
            seed: int) -> UnusedRecord:
    batches = rank_batches(ctx, steps, per_rank_batch, seed)
    runs = {}
    for name, kwargs in CONFIGS[variant].items():
        torch.manual_seed(seed)
        ddp = wrap_ddp(TwoHeads(), ctx.device, **kwargs)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        before = flat_parameters(ddp.module).tolist()
        log, error = train_steps(ddp, optimizer, batches[:1]), ""
        after_first = flat_parameters(ddp.module).tolist()
        try:
            log += train_steps(ddp, optimizer, batches[1:])
        except RuntimeError as err:  # 리듀서가 두 번째 반복에서 내는 예외: 그 문장 그대로 남긴다
            error = str(err)
        runs[name] = {"log": log, "error": error, "params_before": before, "params_after_first": after_first,
                      "params": flat_parameters(ddp.module).tolist(),
                      "n_param_tensors": len(list(ddp.parameters()))}
    return {"runs": runs}


def drift_check(drift: float, moved: float) -> Check:
    """Without an All-Reduce each rank steps with its own gradient: after the first step the ranks differ by at
    least 0.1 % of the distance that step moved the parameters; n/a when it moved nothing (lr so small that
    ``lr * grad`` is 0 in float32)."""
    if not moved > 0:
        return not_applicable("replicas_drift_silently", f"학습률이 작아 첫 스텝이 파라미터를 움직이지 않았다(이동량 "
                              f"{moved:g}): 움직이지 않은 복제본은 갈라질 수도 없다")
    return check_at_least("replicas_drift_silently", drift / moved, 1e-3,
                          "그래서 첫 스텝 뒤 복제본이 이미 서로 다르다(랭크 간 최대 파라미터 차이 ÷ 첫 스텝의 이동량)")


def summarize(ranks: list[UnusedRecord], variant: str, params: dict) -> Summary[Any]:
    return bug_summary(ranks) if variant == "bug" else fix_summary(ranks, params["steps"])


def bug_summary(ranks: list[UnusedRecord]) -> Summary[UnusedBugData]:
    runs = [r["runs"]["default"] for r in ranks]
    errors = [run["error"] for run in runs]
    checks = [check_true("reducer_error", all(PHRASE in e for e in errors), len(errors),
                         f"두 번째 반복에서 모든 랭크의 리듀서가 '{PHRASE}…' 예외를 낸다(랭크 수)"),
              check_equal("first_step_all_reduce", sorted({run["log"][0]["all_reduce"] for run in runs}), [0],
                          "첫 반복은 조용히 지나가지만 All-Reduce를 한 번도 하지 않았다(버킷이 끝내 준비되지 않음)")]
    drift = None
    if len(ranks) > 1:
        drift = largest(max_abs_diff(run["params_after_first"], runs[0]["params_after_first"]) for run in runs)
        moved = largest(max_abs_diff(run["params_after_first"], run["params_before"]) for run in runs)
        checks.append(drift_check(drift, moved))
    return Summary({"error": errors[0], "first_step_all_reduce": runs[0]["log"][0]["all_reduce"], "drift": drift},
                   checks)


def fix_summary(ranks: list[UnusedRecord], steps: int) -> Summary[UnusedFixData]:
    runs = ranks[0]["runs"]
    checks, rows = [], {}
    for name in CONFIGS["fix"]:
        logs = [r["runs"][name]["log"] for r in ranks]
        rows[name] = {"all_reduce_per_step": [s["all_reduce"] for s in logs[0]],
                      "items_per_step": [[(i["op"], i["numel"], i["dtype"]) for i in s["items"]] for s in logs[0]],
                      "loss": [s["loss"] for s in logs[0]]}
        checks.append(check_equal(f"{name}_trains", sorted({len(lg) for lg in logs}), [steps],
                                  f"{name}=True면 예외 없이 {steps}스텝을 모두 마친다(마친 스텝 수)"))
        checks.append(check_close(f"{name}_replicas_identical",
                                  largest(max_abs_diff(r["runs"][name]["params"], runs[name]["params"]) for r in ranks),
                                  0.0, 0.0, f"{name}=True로 학습한 복제본이 모든 랭크에서 같다(최대 절대 차이)"))
    # find_unused_parameters의 비용: 매 반복 '이번에 쓰인 파라미터' 표(int32, 파라미터 텐서 수만큼)를 한 번 더 All-Reduce한다.
    n_tensors = runs["find_unused_parameters"]["n_param_tensors"]
    extra = [[item for item in step if item == ("all_reduce", n_tensors, "int32")] for step in
             rows["find_unused_parameters"]["items_per_step"]]
    checks.append(check_equal("find_unused_extra_all_reduce", sorted({len(e) for e in extra}), [1],
                              f"find_unused_parameters=True는 매 반복 int32 {n_tensors}칸짜리 사용 여부 표를 "
                              "한 번 더 All-Reduce한다(반복당 개수)"))
    steady_static = rows["static_graph"]["all_reduce_per_step"][1:]
    steady_find = rows["find_unused_parameters"]["all_reduce_per_step"][1:]
    if steady_static:
        checks.append(check_equal("static_graph_saves_after_first", [f - s for f, s in zip(steady_find, steady_static)],
                                  [1] * len(steady_static),
                                  "static_graph=True는 첫 반복 뒤로 그 표를 보내지 않는다(반복마다 줄어든 All-Reduce 수)"))
    return Summary({"rows": rows, "n_param_tensors": n_tensors}, checks)
