"""Chapter 10 lab: DDP broken on purpose, on real ranks, and fixed.

One lab, ``traps``, with a ``trap`` (which mistake) and a ``variant`` (``bug`` or ``fix``). The lines the
chapter shows are bug/fix pairs of functions in :mod:`labs.ddp.traps`; each trap here is a rank function
that runs one of the pair, and a summary whose checks assert the symptom (for ``bug``) or the repair (for
``fix``), so the book fails if PyTorch changes behaviour. A bug that hangs or raises never returns records:
:func:`observe` runs it through :mod:`labs.outcome` and turns what really happened (the rank's exception
text, each rank's position at the deadline) into checks of the same kind.
"""

from __future__ import annotations

import inspect
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable, TypedDict

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from ..context import RankContext, resolve_backend
from ..ddp.allreduce import average_gradients
from ..ddp.traps import (
    TiedBlocks,
    TwoHeads,
    checkpointed_bug,
    checkpointed_fix,
    checkpointed_static_fix,
    epoch_orders_bug,
    epoch_orders_fix,
    eval_rank0_bug,
    eval_rank0_fix,
    learning_rate_bug,
    learning_rate_fix,
    log_loss_bug,
    log_loss_fix,
    micro_step_bug,
    micro_step_fix,
    seeded_model_bug,
    seeded_model_fix,
    shape_model_bug,
    shape_model_fix,
)
from ..errors import LabConfigError
from ..launch import run
from ..outcome import observe as outcome_of
from ..outcome import observe_isolated as outcomes_isolated
from ..outcome import stderr_to
from ..params import Choice, Float, Folder, Int, seed
from ..registry import Lab
from ..result import Check, LabResult, Summary, check_at_least, check_close, check_equal, check_true, largest, not_applicable
from ..tools.comms import CollectiveCounter
from ..tools.models import bn_mlp, flat_gradients, flat_parameters, rank_batch, synthetic_regression, tiny_mlp, wrap_ddp
from ..tools.primitives import max_abs_diff

TRAPS = ("no_sync", "unused", "eval_rank0", "set_epoch", "partial_collective", "shape", "lr_scaling", "seed",
         "checkpointing")
VARIANTS = ("bug", "fix")
# A bug that never returns records: what the launcher must see instead (everything else finishes).
EXPECTED = {("eval_rank0", "bug"): "hang", ("partial_collective", "bug"): "crash", ("shape", "bug"): "error"}
HANG_TIMEOUT = 8.0  # seconds: a hang trap is ended by the launcher this long after its ranks start
# The reducer's own words (torch 2.13): the checks look for them in the captured messages.
UNUSED_PHRASE = "Expected to have finished reduction in the prior iteration"
READY_TWICE_PHRASE = "Expected to mark a variable ready only once"
SHAPE_PHRASE = "appears not to match sizes of the same param in process"
MISMATCH_PHRASE = "Detected mismatch between collectives on ranks"
GLOO_SIZE_PHRASE = "Received data size doesn't match expected size"
DIFFER_PHRASE = "Collectives differ in the following aspects"
# DETAIL의 예외 문장이 지문마다 적는 랭크 번호: 10.5절은 "예외를 낸 랭크의 지문, 상대의 지문, 다른 점" 순서로 읽는다
FINGERPRINT_RANK = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint")


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.mse_loss(model(x), y)


def _finished_anyway(trap: str, claim: str) -> Summary:
    """A bug that should never return records did: the one check says so (and fails)."""
    return Summary({}, [check_equal("finished", "ok", EXPECTED[(trap, "bug")], claim)])


def _gathered_equal(ranks: list[dict], key: str) -> float:
    """Largest difference of ``key`` (a flat list) between rank 0 and any other rank."""
    return largest(max_abs_diff(r[key], ranks[0][key]) for r in ranks)


# ----------------------------------------------------------------------------- 1. no_sync

def no_sync_rank(ctx: RankContext, variant: str, *, micro_steps: int, per_rank_batch: int, lr: float,
                 seed: int) -> dict:
    k, b = micro_steps, per_rank_batch
    x, y = synthetic_regression(ctx.world_size * k * b, seed=seed)
    torch.manual_seed(seed)
    ddp = wrap_ddp(tiny_mlp(), ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    step = micro_step_bug if variant == "bug" else micro_step_fix
    counts, first_grad = [], []
    for i in range(k):
        xb, yb = (t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, b, i))
        with CollectiveCounter() as counter:
            step(ddp, xb, yb, k, last=i == k - 1)
        counts.append(counter.counts["all_reduce"])
        if i == 0:
            first_grad = flat_gradients(ddp.module).tolist()
    optimizer.step()
    return {"all_reduce_per_micro_step": counts, "grad_after_first": first_grad,
            "params": flat_parameters(ddp.module).tolist()}


def no_sync_summary(ranks: list[dict], variant: str, *, micro_steps: int) -> Summary:
    k, n = micro_steps, len(ranks)
    per_step = [r["all_reduce_per_micro_step"] for r in ranks]
    synced = sorted({sum(c > 0 for c in counts) for counts in per_step})
    grad_spread = _gathered_equal(ranks, "grad_after_first")
    checks = [check_close("replicas_identical", _gathered_equal(ranks, "params"), 0.0, 0.0,
                          "어느 쪽이든 스텝 뒤 모든 랭크의 파라미터는 같다(최대 절대 차이): 틀리는 것은 통신량이다")]
    if variant == "bug":
        checks.insert(0, check_equal("synced_micro_steps", synced, [k],
                                     f"순전파를 no_sync() 밖에 두면 K={k}개 마이크로 스텝이 모두 All-Reduce한다(동기화한 스텝 수)"))
        if n > 1 and k > 1:
            checks.insert(1, check_close("first_grad_already_averaged", grad_spread, 0.0, 0.0,
                                         "첫 마이크로 스텝 뒤 그래디언트가 이미 모든 랭크에서 같다: 동기화가 일어났다(최대 차이)"))
    else:
        checks.insert(0, check_equal("synced_micro_steps", synced, [1],
                                     "순전파까지 no_sync() 안에 넣으면 마지막 마이크로 스텝만 All-Reduce한다(동기화한 스텝 수)"))
        if n > 1 and k > 1:
            checks.insert(1, check_at_least("first_grad_still_local", grad_spread, 1e-6,
                                            "첫 마이크로 스텝 뒤 그래디언트는 랭크마다 다르다: 아직 로컬이다(최대 차이)"))
    data = {"all_reduce_per_micro_step": per_step[0], "total_all_reduce": sum(per_step[0])}
    return Summary(data, checks)


# ----------------------------------------------------------------------------- 2. unused parameter

def train_steps(ddp, optimizer, batches) -> list[dict]:
    """Plain training steps; per step the loss and the collectives the step issued."""
    log = []
    for x, y in batches:
        with CollectiveCounter() as counter:
            optimizer.zero_grad()
            loss = _loss(ddp, x, y)
            loss.backward()
        optimizer.step()
        log.append({"loss": loss.item(), "all_reduce": counter.counts["all_reduce"], "items": counter.items})
    return log


def _batches(ctx: RankContext, steps: int, per_rank_batch: int, seed: int) -> list:
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, seed=seed)
    return [tuple(t.to(ctx.device) for t in rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s))
            for s in range(steps)]


UNUSED_CONFIGS: dict[str, dict[str, dict[str, bool]]] = {"bug": {"default": {}},
                  "fix": {"find_unused_parameters": {"find_unused_parameters": True},
                          "static_graph": {"static_graph": True}}}


def unused_rank(ctx: RankContext, variant: str, *, steps: int, per_rank_batch: int, lr: float, seed: int) -> dict:
    batches = _batches(ctx, steps, per_rank_batch, seed)
    runs = {}
    for name, kwargs in UNUSED_CONFIGS[variant].items():
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


def unused_summary(ranks: list[dict], variant: str, *, steps: int) -> Summary:
    n = len(ranks)
    runs = ranks[0]["runs"]
    checks = []
    if variant == "bug":
        run = runs["default"]
        errors = [r["runs"]["default"]["error"] for r in ranks]
        checks.append(check_true("reducer_error", all(UNUSED_PHRASE in e for e in errors), len(errors),
                                 f"두 번째 반복에서 모든 랭크의 리듀서가 '{UNUSED_PHRASE}…' 예외를 낸다(랭크 수)"))
        checks.append(check_equal("first_step_all_reduce", sorted({r["runs"]["default"]["log"][0]["all_reduce"]
                                                                    for r in ranks}), [0],
                                  "첫 반복은 조용히 지나가지만 All-Reduce를 한 번도 하지 않았다(버킷이 끝내 준비되지 않음)"))
        if n > 1:
            drift = largest(max_abs_diff(r["runs"]["default"]["params_after_first"], run["params_after_first"])
                            for r in ranks)
            moved = largest(max_abs_diff(r["runs"]["default"]["params_after_first"], r["runs"]["default"]["params_before"])
                            for r in ranks)
            checks.append(drift_check(drift, moved))
        data = {"error": errors[0], "first_step_all_reduce": run["log"][0]["all_reduce"],
                "drift": drift if n > 1 else None}
        return Summary(data, checks)
    rows = {}
    for name in UNUSED_CONFIGS["fix"]:
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


# ----------------------------------------------------------------------------- 3. evaluation on rank 0 only

def eval_rank0_rank(ctx: RankContext, variant: str, *, steps: int, per_rank_batch: int, lr: float, seed: int) -> dict:
    batches = _batches(ctx, steps, per_rank_batch, seed)
    xv, yv = (t.to(ctx.device) for t in synthetic_regression(8 * ctx.world_size, seed=seed + 1))
    torch.manual_seed(seed)
    ddp = wrap_ddp(bn_mlp(), ctx.device)  # BatchNorm: 버퍼(running mean/var)가 있는 모델
    train_steps(ddp, torch.optim.SGD(ddp.parameters(), lr=lr), batches)
    if variant == "bug":
        eval_rank0_bug(ctx, ddp, xv, yv)
        return {}
    module_loss, all_ranks_loss = eval_rank0_fix(ctx, ddp, xv, yv)
    return {"module_loss": module_loss, "all_ranks_loss": all_ranks_loss,
            "params": flat_parameters(ddp.module).tolist()}


def eval_rank0_summary(ranks: list[dict], variant: str) -> Summary:
    if variant == "bug":  # 버그 실행은 끝나지 않는다: observe()가 멈춘 모습을 확인한다
        return _finished_anyway("eval_rank0", "랭크 0만 DDP 래퍼로 평가하면 끝나지 않아야 한다")
    a, b = ranks[0]["module_loss"], ranks[0]["all_ranks_loss"]
    checks = [check_close("same_validation_loss", abs(a - b), 0.0, 1e-6,
                          "랭크 0의 ddp.module 평가와 모든 랭크가 나눠 한 평가의 손실이 같다(절대 차이)"),
              check_close("replicas_identical", _gathered_equal(ranks, "params"), 0.0, 0.0,
                          "평가 뒤에도 복제본은 모든 랭크에서 같다(최대 절대 차이)")]
    return Summary({"module_loss": a, "all_ranks_loss": b}, checks)


# ----------------------------------------------------------------------------- 4. sampler.set_epoch

def set_epoch_rank(ctx: RankContext, variant: str, *, samples: int, per_rank_batch: int, epochs: int,
                   seed: int) -> dict:
    dataset = TensorDataset(torch.arange(samples))
    sampler: DistributedSampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True,
                                                     seed=seed)
    loader = DataLoader(dataset, batch_size=per_rank_batch, sampler=sampler)
    epoch_orders = epoch_orders_bug if variant == "bug" else epoch_orders_fix
    return {"orders": epoch_orders(sampler, loader, epochs)}


def set_epoch_summary(ranks: list[dict], variant: str, *, samples: int, per_rank_batch: int, epochs: int) -> Summary:
    b = per_rank_batch
    distinct = sorted({len({tuple(o) for o in r["orders"]}) for r in ranks})
    # 스텝 t의 전역 배치 = 모든 랭크가 스텝 t에 본 샘플의 집합
    steps = len(ranks[0]["orders"][0]) // b
    global_batches = [[frozenset(i for r in ranks for i in r["orders"][e][t * b:(t + 1) * b]) for t in range(steps)]
                      for e in range(epochs)]
    repeated = sum(global_batches[e][t] == global_batches[0][t] for e in range(1, epochs) for t in range(steps))
    covered = [sorted(i for r in ranks for i in r["orders"][e]) for e in range(epochs)]
    checks = [check_true("each_epoch_covers_dataset",
                         all(set(c) == set(range(samples)) for c in covered), len(covered),
                         "어느 쪽이든 에폭마다 랭크들이 데이터 전체를 나눠 본다(확인한 에폭 수)")]
    if variant == "bug":
        checks.append(check_equal("distinct_epoch_orders", distinct, [1],
                                  f"set_epoch()를 부르지 않으면 {epochs}개 에폭의 순서가 모두 같다(랭크마다 서로 다른 순서 수)"))
    else:
        checks.append(check_equal("distinct_epoch_orders", distinct, [epochs],
                                  f"set_epoch(epoch)를 부르면 {epochs}개 에폭의 순서가 모두 다르다(서로 다른 순서 수)"))
    data = {"orders_rank0": ranks[0]["orders"], "repeated_global_batches": repeated,
            "compared_global_batches": (epochs - 1) * steps}
    return Summary(data, checks)


# ----------------------------------------------------------------------------- 5. a collective only rank 0 calls

def partial_collective_rank(ctx: RankContext, variant: str, *, steps: int, per_rank_batch: int, lr: float,
                            seed: int) -> dict:
    # DDP 없이 그래디언트를 손으로 평균한다: torch 2.13 CPU에서 TORCH_DISTRIBUTED_DEBUG=DETAIL이면
    # DDP 생성자 자체가 segfault하므로(직접 확인), 같은 함정을 DETAIL로도 보여 주려면 이 길이 필요하다.
    torch.manual_seed(seed)
    model = tiny_mlp().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    log_loss = log_loss_bug if variant == "bug" else log_loss_fix
    losses, logged = [], []
    for x, y in _batches(ctx, steps, per_rank_batch, seed):
        optimizer.zero_grad()
        loss = _loss(model, x, y)
        loss.backward()
        average_gradients(model.parameters(), ctx.world_size)  # 4장의 손 루프(labs/ddp/allreduce.py)
        optimizer.step()
        losses.append(loss.item())
        logged.append(log_loss(ctx, loss.item()))
    return {"losses": losses, "logged": logged, "params": flat_parameters(model).tolist()}


def partial_collective_summary(ranks: list[dict], variant: str, *, steps: int) -> Summary:
    if variant == "bug":
        return _finished_anyway("partial_collective", "랭크 0만 all_reduce를 부르면 정상적으로 끝나지 않아야 한다")
    mean = [sum(r["losses"][s] for r in ranks) / len(ranks) for s in range(steps)]
    checks = [check_close("logged_mean_loss", max_abs_diff(ranks[0]["logged"], mean), 0.0, 1e-6,
                          "랭크 0이 찍은 값이 모든 랭크 손실의 평균과 같다(스텝별 최대 차이)"),
              check_close("replicas_identical", _gathered_equal(ranks, "params"), 0.0, 0.0,
                          "학습 뒤 복제본이 모든 랭크에서 같다(최대 절대 차이)")]
    return Summary({"logged": ranks[0]["logged"]}, checks)


# ----------------------------------------------------------------------------- 6. different models across ranks

def shape_rank(ctx: RankContext, variant: str, *, seed: int) -> dict:
    model = (shape_model_bug if variant == "bug" else shape_model_fix)(ctx, seed)
    before = flat_parameters(model).tolist()
    ddp = wrap_ddp(model, ctx.device)                      # 생성자가 모양을 맞춰 보고, 랭크 0의 값을 브로드캐스트한다
    return {"before": before, "after": flat_parameters(ddp.module).tolist()}


def shape_summary(ranks: list[dict], variant: str) -> Summary:
    if variant == "bug":
        return _finished_anyway("shape", "랭크마다 모양이 다른 모델은 DDP 생성자에서 실패해야 한다")
    checks = [check_close("identical_after_construction", largest(max_abs_diff(r["after"], ranks[0]["before"])
                                                                   for r in ranks), 0.0, 0.0,
                          "DDP 생성 직후 모든 랭크의 파라미터가 랭크 0의 초기값과 같다(최대 절대 차이)")]
    if len(ranks) > 1:
        checks.append(check_at_least("different_before", _gathered_equal(ranks, "before"), 1e-6,
                                     "감싸기 전에는 랭크마다 초기값이 달랐다(최대 차이): 같아진 것은 브로드캐스트 덕분이다"))
    return Summary({}, checks)


# ----------------------------------------------------------------------------- 7. more ranks, same lr

def _full_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    with torch.no_grad():
        return float(_loss(model, x, y))


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
            _loss(model, xb, yb).backward()
            optimizer.step()
            step += 1
        curve.append(_full_loss(model, x, y))
    return curve


def lr_scaling_rank(ctx: RankContext, variant: str, *, samples: int, per_rank_batch: int, epochs: int, lr: float,
                    warmup_steps: int, seed: int) -> dict:
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


def lr_scaling_summary(ranks: list[dict], variant: str, *, epochs: int) -> Summary:
    n = len(ranks)
    curve, baseline = ranks[0]["curve"], ranks[0]["baseline"]
    ratio = curve[-1] / baseline[-1]
    checks = [check_close("replicas_identical", _gathered_equal(ranks, "params"), 0.0, 1e-6,
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


# ----------------------------------------------------------------------------- 8. the same seed for data randomness

def seed_rank(ctx: RankContext, variant: str, *, steps: int, per_rank_batch: int, lr: float, seed: int) -> dict:
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, in_features=16, seed=seed)
    model = (seeded_model_fix if variant == "fix" else seeded_model_bug)(ctx, seed)
    init = flat_parameters(model).tolist()
    ddp = wrap_ddp(model, ctx.device)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
    masks: list[list] = []
    noises: list[list] = []
    for s in range(steps):
        xb, yb = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s)
        noise = 0.1 * torch.randn_like(xb)                # 데이터 증강: 입력에 잡음
        optimizer.zero_grad()
        _loss(ddp, (xb + noise).to(ctx.device), yb.to(ctx.device)).backward()
        optimizer.step()
        assert model.last_mask is not None  # 순전파가 방금 남겼다
        masks.append(model.last_mask.cpu().tolist())
        noises.append(noise.tolist())
    return {"init": init, "masks": masks, "noises": noises, "params": flat_parameters(model).tolist()}


def seed_summary(ranks: list[dict], variant: str, *, steps: int, per_rank_batch: int) -> Summary:
    n, b = len(ranks), per_rank_batch
    # 전역 배치(모든 랭크의 샘플)에서 서로 다른 드롭아웃 마스크 수: 한 프로세스라면 N·(B/N)개
    distinct = [len({tuple(row) for r in ranks for row in r["masks"][s]}) for s in range(steps)]
    own = [len({tuple(row) for row in ranks[0]["masks"][s]}) for s in range(steps)]  # 랭크 0 혼자의 마스크 수
    # 랭크마다 따로 뽑은 n·b개의 마스크(입력 16개, p=0.5: 2^16가지)가 우연히 겹치는 쌍의 기댓값 λ; 6λ까지 허용
    k = n * b
    chance = math.ceil(6 * k * (k - 1) / 2 / 2 ** 16)
    same_noise = sum(r["noises"] == ranks[0]["noises"] for r in ranks[1:])
    checks = [check_close("same_initial_model", _gathered_equal(ranks, "init"), 0.0, 0.0,
                          "모델 초기값은 모든 랭크에서 같다(같은 시드, 최대 차이)"),
              check_close("replicas_identical", _gathered_equal(ranks, "params"), 0.0, 0.0,
                          "학습 뒤 복제본이 모든 랭크에서 같다: 데이터 난수가 달라도 그래디언트는 평균된다(최대 차이)")]
    if n == 1:
        checks.append(not_applicable("distinct_masks_in_global_batch", "N=1이면 비교할 다른 랭크가 없다"))
    elif variant == "bug":
        checks.append(check_equal("distinct_masks_in_global_batch", distinct, own,
                                  f"시드가 같으면 전역 배치 {n * b}개 샘플의 마스크가 랭크 0 혼자 뽑은 마스크(보통 {b}개)뿐이다: "
                                  "랭크마다 똑같이 뽑는다(스텝별 서로 다른 마스크 수)"))
        checks.append(check_equal("identical_noise_ranks", same_noise, n - 1,
                                  "증강 잡음도 랭크 0과 똑같이 뽑는 랭크 수"))
    else:
        checks.append(check_at_least("distinct_masks_in_global_batch", min(distinct), k - 1 - chance,
                                     f"랭크마다 시드를 다르게 하면 전역 배치 {k}개 샘플의 마스크가 (거의) 모두 다르다(스텝별 최소; "
                                     f"2^16가지 마스크가 우연히 겹치는 만큼 {chance}개와 1개를 뺀 수 이상)"))
        checks.append(check_equal("identical_noise_ranks", same_noise, 0,
                                  "증강 잡음이 랭크 0과 똑같은 랭크 수"))
    return Summary({"distinct_masks": distinct, "global_batch": n * b}, checks)


# ----------------------------------------------------------------------------- 9. activation checkpointing

CHECKPOINTING = {"bug": {"reentrant": checkpointed_bug},
                 "fix": {"non_reentrant": checkpointed_fix, "static_graph": checkpointed_static_fix}}


def checkpointing_rank(ctx: RankContext, variant: str, *, steps: int, per_rank_batch: int, lr: float,
                       seed: int) -> dict:
    """Each way of wrapping :class:`TiedBlocks` trains ``steps`` steps (or stops at DDP's error); beside it, one
    process trains the same model on the whole global batch without DDP (the reference, on every rank)."""
    x, y = synthetic_regression(ctx.world_size * steps * per_rank_batch, seed=seed)
    global_batch = ctx.world_size * per_rank_batch
    torch.manual_seed(seed)
    single = TiedBlocks(use_reentrant=False).to(ctx.device)  # 같은 초기값의 한 프로세스 기준: DDP 없이 전역 배치 B개로
    reference = torch.optim.SGD(single.parameters(), lr=lr)
    for s in range(steps):
        reference.zero_grad()
        _loss(single, x[s * global_batch:(s + 1) * global_batch].to(ctx.device),
              y[s * global_batch:(s + 1) * global_batch].to(ctx.device)).backward()
        reference.step()
    runs = {}
    for name, wrap in CHECKPOINTING[variant].items():
        torch.manual_seed(seed)
        ddp = wrap(ctx.device)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=lr)
        done, error = 0, ""
        try:
            for s in range(steps):
                bx, by = rank_batch(x, y, ctx.rank, ctx.world_size, per_rank_batch, s)
                optimizer.zero_grad()
                _loss(ddp, bx.to(ctx.device), by.to(ctx.device)).backward()
                optimizer.step()
                done += 1
        except RuntimeError as err:  # 리듀서가 역전파 안에서 내는 예외: 그 문장 그대로 남긴다
            error = str(err)
        runs[name] = {"steps_done": done, "error": error, "params": flat_parameters(ddp.module).tolist()}
    return {"runs": runs, "single": flat_parameters(single).tolist()}


def checkpointing_summary(ranks: list[dict], variant: str, *, steps: int) -> Summary:
    checks = []
    if variant == "bug":
        errors = [r["runs"]["reentrant"]["error"] for r in ranks]
        checks.append(check_true("reducer_ready_twice", all(READY_TWICE_PHRASE in e for e in errors), len(errors),
                                 f"첫 역전파에서 모든 랭크의 리듀서가 '{READY_TWICE_PHRASE}…' 예외를 낸다(랭크 수)"))
        checks.append(check_equal("no_step_done", sorted({r["runs"]["reentrant"]["steps_done"] for r in ranks}), [0],
                                  "그래서 한 스텝도 마치지 못한다(마친 스텝 수)"))
        return Summary({"error": errors[0]}, checks)
    rows = {}
    for name in CHECKPOINTING["fix"]:
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


# ----------------------------------------------------------------------------- the lab

RANK_FNS: dict[str, Callable[..., dict]] = {"no_sync": no_sync_rank, "unused": unused_rank, "eval_rank0": eval_rank0_rank,
            "set_epoch": set_epoch_rank, "partial_collective": partial_collective_rank, "shape": shape_rank,
            "lr_scaling": lr_scaling_rank, "seed": seed_rank, "checkpointing": checkpointing_rank}
SUMMARIES: dict[str, Callable[..., Summary]] = {"no_sync": no_sync_summary, "unused": unused_summary, "eval_rank0": eval_rank0_summary,
             "set_epoch": set_epoch_summary, "partial_collective": partial_collective_summary,
             "shape": shape_summary, "lr_scaling": lr_scaling_summary, "seed": seed_summary,
             "checkpointing": checkpointing_summary}


class TrapsRecord(TypedDict):
    """What each rank of the 'traps' lab returns, and its summary data: one shape for every trap, since
    each trap measures something different (that goes under ``measured``)."""

    trap: str
    variant: str
    measured: dict[str, Any]


def named_params(fn: Callable[..., Any], params: dict) -> dict:
    """The parameters among ``params`` that ``fn`` names after its ``*``: each trap takes only what it uses."""
    names = {name for name, arg in inspect.signature(fn).parameters.items() if arg.kind is arg.KEYWORD_ONLY}
    return {name: value for name, value in params.items() if name in names}


def trap_summary(trap: str, measured: list[dict], variant: str, params: dict) -> Summary:
    """One trap's summary of its ranks' measurements, given the parameters it names."""
    summary = SUMMARIES[trap]
    return summary(measured, variant, **named_params(summary, params))


def rank_fn(ctx: RankContext, trap: str, variant: str, stderr_dir: str, **params) -> TrapsRecord:
    if stderr_dir:  # C++ 쪽(gloo)이 프로세스를 끝내기 직전에 쓰는 문장을 observe()가 읽을 수 있게
        stderr_to(Path(stderr_dir) / f"rank{ctx.rank}.txt")
    measure = RANK_FNS[trap]
    return {"trap": trap, "variant": variant, "measured": measure(ctx, variant, **named_params(measure, params))}


def summarize(ranks: list[dict], backend: str, params: dict) -> Summary:
    """Each trap's summary of what its ranks measured, under one record shape for every trap."""
    trap, variant = params["trap"], params["variant"]
    inner = trap_summary(trap, [r["measured"] for r in ranks], variant, params)
    return Summary({"trap": trap, "variant": variant, "measured": inner.data}, inner.checks)


def validate(params: dict, world_size: int) -> None:
    if params["trap"] == "lr_scaling" and params["lr"] * world_size > 0.6:
        raise LabConfigError(f"함정 lr_scaling은 N·η ≤ 0.6에서만 잴 수 있습니다(받은 값: N={world_size}, η={params['lr']:g}). "
                             "고친 쪽은 η를 N배로 키우므로 N·η가 1이면 한 프로세스와 손실이 15 % 넘게 달라진다(N=2에서 잰 값). "
                             f"lr={0.6 / world_size:g} 이하로 실행하세요.")
    steps = params["epochs"] * (params["samples"] // (world_size * params["per_rank_batch"]))
    if params["trap"] == "lr_scaling" and params["warmup_steps"] > steps // 2:
        raise LabConfigError(f"함정 lr_scaling의 warmup_steps({params['warmup_steps']})가 학습 스텝 {steps}개의 절반보다 "
                             "많습니다: 고친 쪽이 키운 η로 학습할 스텝이 모자라 두 학습을 비교할 수 없습니다. "
                             f"warmup_steps={max(1, steps // 2)} 이하로 하거나 epochs·samples를 늘리세요.")
    if params["trap"] == "eval_rank0" and params["per_rank_batch"] < 2:
        raise LabConfigError("함정 eval_rank0의 모델은 BatchNorm을 쓰므로 학습 중 랭크마다 샘플이 2개 이상이어야 합니다. "
                             "per_rank_batch=2 이상으로 실행하세요.")
    if params["trap"] == "lr_scaling" and params["per_rank_batch"] < 2:
        raise LabConfigError("함정 lr_scaling은 per_rank_batch=2 이상에서만 잴 수 있습니다: 샘플 하나짜리 배치는 잡음이 커서 "
                             "η를 N배로 키우는 규칙이 맞지 않는다(N=2에서 잰 손실 비율 1.19, 허용 1±0.15).")
    if world_size < 2 and params["variant"] == "bug" and (params["trap"], "bug") in EXPECTED:
        raise LabConfigError(f"함정 {params['trap']}은(는) 랭크가 둘 이상일 때만 일어납니다(랭크가 하나면 어긋날 다른 랭크가 "
                             "없다). nproc=2 이상으로 실행하세요.")
    if params["trap"] in ("set_epoch", "lr_scaling") and params["samples"] < world_size * params["per_rank_batch"]:
        raise LabConfigError(f"samples={params['samples']}이(가) 한 스텝의 전역 배치 N·(B/N) = "
                             f"{world_size * params['per_rank_batch']}보다 작습니다. samples를 늘리거나 per_rank_batch를 줄이세요.")


LAB = Lab(
    name="traps",
    description="DDP를 일부러 망가뜨리는 함정 9가지(trap)를 실제 랭크에서 재현(variant=bug)하고 고친 모습(fix)을 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=10,
    default_nproc=2,
    validate=validate,
    record=TrapsRecord,
    data=TrapsRecord,
    params={"trap": Choice("no_sync", TRAPS, help="함정 이름"),
            "variant": Choice("bug", VARIANTS, help="bug: 함정 그대로, fix: 고친 코드"),
            "micro_steps": Int(4, min=1, max=64, help="no_sync: 누적할 마이크로 스텝 수 K"),
            "per_rank_batch": Int(4, min=1, max=256, help="랭크당 배치 B/N"),
            "steps": Int(3, min=2, max=100, help="학습 스텝 수"),
            "epochs": Int(3, min=2, max=50, help="set_epoch, lr_scaling: 에폭 수"),
            "samples": Int(64, min=8, max=4096, help="set_epoch, lr_scaling: 데이터셋 크기"),
            "warmup_steps": Int(4, min=1, max=1000, help="lr_scaling: 워밍업 스텝 수"),
            "lr": Float(0.1, min=0.0, max=1.0, min_open=True, help="학습률 η (10이면 eval_rank0·partial_collective가 발산한다)"),
            "seed": seed(),
            "stderr_dir": Folder("", help="비어 있지 않으면 랭크마다 표준 오류를 이 폴더의 rankN.txt에 쓴다(observe가 씀)")},
)


# ----------------------------------------------------------------------------- observing a bug that never returns

def _reading_order(message: str, raising_rank) -> bool:
    """The DETAIL message names the raising rank's fingerprint, then another rank's, then what differs."""
    ranks = [int(r) for r in FINGERPRINT_RANK.findall(message)]
    return (len(ranks) == 2 and ranks[0] == raising_rank and ranks[1] != ranks[0]
            and message.find(DIFFER_PHRASE) > message.rfind("CollectiveFingerPrint"))


def outcome_checks(trap: str, outcome: dict, backend: str) -> list:
    """What the bug must do, read from what the launcher saw."""
    kind, message, where = outcome["kind"], outcome.get("message", ""), outcome.get("where", {})
    if trap == "shape":
        return [check_equal("outcome", kind, "error", "DDP 생성자가 예외를 낸다(결과 종류)"),
                check_true("shape_message", SHAPE_PHRASE in message, outcome.get("rank"),
                           f"예외 문장에 '{SHAPE_PHRASE}'가 있다(예외를 낸 랭크)")]
    if trap == "partial_collective" and outcome.get("debug") == "DETAIL":
        return [check_equal("outcome", kind, "error", "DETAIL 모드에서는 짝이 안 맞는 집합 통신이 예외가 된다(결과 종류)"),
                check_true("mismatch_message", MISMATCH_PHRASE in message and "ALLREDUCE" in message,
                           outcome.get("rank"), f"예외 문장이 '{MISMATCH_PHRASE}'와 연산 종류를 밝힌다(예외를 낸 랭크)"),
                check_true("fingerprints_in_reading_order", _reading_order(message, outcome.get("rank")),
                           [int(r) for r in FINGERPRINT_RANK.findall(message)],
                           "예외 문장이 예외를 낸 랭크의 지문, 다른 랭크의 지문, 다른 점의 순서로 적는다"
                           "(10.5절의 읽는 법; 지문에 적힌 랭크 번호)")]
    if trap == "partial_collective":
        checks = [check_true("not_finished", kind in ("crash", "hang", "error"), kind,
                             "짝이 안 맞는 all_reduce로는 학습이 정상적으로 끝나지 않는다(결과 종류)")]
        if backend == "gloo":
            checks.append(check_true("gloo_size_mismatch", GLOO_SIZE_PHRASE in outcome.get("stderr", ""), kind,
                                     f"gloo가 받은 바이트 수가 다르다며 프로세스를 멈춘다: '{GLOO_SIZE_PHRASE}'(결과 종류)"))
        else:
            checks.append(not_applicable("gloo_size_mismatch", "gloo의 크기 검사 문장은 gloo 백엔드에서만 나온다"))
        return checks
    waiting = sorted(r for r, text in where.items() if text.startswith("집합 통신에서"))
    return [check_equal("outcome", kind, "hang", "끝나지 않고 런처의 제한 시간에 걸린다(결과 종류)"),
            check_equal("ranks_waiting_in_collective", waiting, sorted(where) or [-1],
                        "멈춘 랭크가 모두 집합 통신 안에서 서로를 기다린다(그런 랭크 번호)")]


def observe(trap: str, variant: str, nproc: int = 2, *, timeout: float = HANG_TIMEOUT, **params) -> LabResult:
    """Run one trap here; a bug that hangs, raises or kills a rank is recorded as a result whose checks assert it."""
    expected = EXPECTED.get((trap, variant), "ok")
    if expected == "ok":
        return run("traps", nproc=nproc, trap=trap, variant=variant, **params)
    # 어떻게 끝났는지가 이 실행의 기록이다(labs/outcome.py): 확인은 다시 쓸 때도 지금 코드의 outcome_checks가 한다
    outcome = outcome_of("traps", nproc, {"trap": trap, "variant": variant, **params},
                         timeout if expected == "hang" else 120.0)
    return outcome_result(trap, variant, nproc, outcome, {"trap": trap, "variant": variant, **params})


def outcome_result(trap: str, variant: str, nproc: int, outcome: dict, params: dict) -> LabResult:
    backend = resolve_backend("auto", nproc)
    checks = outcome_checks(trap, outcome, backend)
    data = {"trap": trap, "variant": variant, "measured": outcome}
    return LabResult("traps", nproc, backend, [], data, {c.name: c for c in checks}, params)


def observe_isolated(trap: str, variant: str, debug_levels=("DETAIL",), nproc: int = 2,
                     timeout: float = HANG_TIMEOUT, **params) -> list[LabResult]:
    """:func:`observe` of a bug in fresh Python processes, one per ``TORCH_DISTRIBUTED_DEBUG`` level."""
    params = {"trap": trap, "variant": variant, **params}
    run_timeout = timeout if EXPECTED[(trap, variant)] == "hang" else 120.0
    return [outcome_result(trap, variant, nproc, outcome, params)
            for outcome in outcomes_isolated("traps", nproc, params, run_timeout, debug_levels)]


def check_all(nproc: int = 2) -> list[tuple[str, LabResult]]:
    """Every trap's bug and fix, as the chapter runs them (``labs/gpu_check.sh`` calls this with NCCL)."""
    results = []
    for trap in TRAPS:
        n = min(nproc, 4) if trap == "lr_scaling" else nproc  # 작은 데이터셋: 랭크가 많으면 에폭당 스텝이 너무 적다
        results.append((f"{trap}/bug", observe(trap, "bug", nproc=n)))
        if trap == "partial_collective":
            results += [(f"{trap}/bug DETAIL", r) for r in observe_isolated(trap, "bug", nproc=n)]
        results.append((f"{trap}/fix", run("traps", nproc=n, trap=trap, variant="fix")))
    return results


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="10장의 함정 9가지를 bug/fix로 모두 실행하고 확인한다")
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    failed = 0
    for label, result in check_all(args.nproc):
        print(f"== {label} ({result.backend}, N={result.world_size}): {'통과' if result.ok else '실패'}")
        if not result.ok:
            failed += 1
            print(result.report())
    sys.exit(1 if failed else 0)
