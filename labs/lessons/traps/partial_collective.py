"""Trap 5: a collective only rank 0 calls (logging the mean loss): the ranks' collectives stop matching."""

from __future__ import annotations

import re
from typing import Any, TypedDict

import torch

from ...context import RankContext
from ...ddp.allreduce import average_gradients
from ...ddp.traps import log_loss_bug, log_loss_fix
from ...result import Check, Summary, check_close, check_equal, check_true, not_applicable
from ...tools.models import flat_parameters, tiny_mlp
from ...tools.primitives import max_abs_diff
from .common import LR, PER_RANK_BATCH, SEED, STEPS, NoData, finished_anyway, gathered_equal, loss_of, needs_a_peer, rank_batches

PARAMS = {"per_rank_batch": PER_RANK_BATCH, "steps": STEPS, "lr": LR, "seed": SEED}
BUG_OUTCOME = "crash"  # gloo aborts the process (DETAIL: the process group wrapper raises first)
# What torch and gloo say (torch 2.13): the checks look for them in the captured messages.
MISMATCH_PHRASE = "Detected mismatch between collectives on ranks"
GLOO_SIZE_PHRASE = "Received data size doesn't match expected size"
DIFFER_PHRASE = "Collectives differ in the following aspects"
# DETAIL의 예외 문장이 지문마다 적는 랭크 번호: 10.5절은 "예외를 낸 랭크의 지문, 상대의 지문, 다른 점" 순서로 읽는다
FINGERPRINT_RANK = re.compile(r"Rank (\d+) is running collective: CollectiveFingerPrint")


class PartialFixRecord(TypedDict):
    losses: list[float]
    logged: list[float | None]  # what rank 0 logged (None on the other ranks)
    params: list[float]


class PartialFixData(TypedDict):
    logged: list[float | None]


RECORDS = {"bug": PartialFixRecord, "fix": PartialFixRecord}
DATA = {"bug": NoData, "fix": PartialFixData}


def validate(params: dict, world_size: int) -> None:
    needs_a_peer("partial_collective", params, world_size)


def rank_fn(ctx: RankContext, variant: str, *, per_rank_batch: int, steps: int, lr: float,
            seed: int) -> PartialFixRecord:
    # DDP 없이 그래디언트를 손으로 평균한다: torch 2.13 CPU에서 TORCH_DISTRIBUTED_DEBUG=DETAIL이면
    # DDP 생성자 자체가 segfault하므로(직접 확인), 같은 함정을 DETAIL로도 보여 주려면 이 길이 필요하다.
    torch.manual_seed(seed)
    model = tiny_mlp().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    log_loss = log_loss_bug if variant == "bug" else log_loss_fix
    losses, logged = [], []
    for x, y in rank_batches(ctx, steps, per_rank_batch, seed):
        optimizer.zero_grad()
        loss = loss_of(model, x, y)
        loss.backward()
        average_gradients(model.parameters(), ctx.world_size)  # 4장의 손 루프(labs/ddp/allreduce.py)
        optimizer.step()
        losses.append(loss.item())
        logged.append(log_loss(ctx, loss.item()))
    return {"losses": losses, "logged": logged, "params": flat_parameters(model).tolist()}


def summarize(ranks: list[PartialFixRecord], variant: str, params: dict) -> Summary[Any]:
    if variant == "bug":
        return finished_anyway(BUG_OUTCOME, "랭크 0만 all_reduce를 부르면 정상적으로 끝나지 않아야 한다")
    steps = params["steps"]
    mean = [sum(r["losses"][s] for r in ranks) / len(ranks) for s in range(steps)]
    checks = [check_close("logged_mean_loss", max_abs_diff(ranks[0]["logged"], mean), 0.0, 1e-6,
                          "랭크 0이 찍은 값이 모든 랭크 손실의 평균과 같다(스텝별 최대 차이)"),
              check_close("replicas_identical", gathered_equal(ranks, "params"), 0.0, 0.0,
                          "학습 뒤 복제본이 모든 랭크에서 같다(최대 절대 차이)")]
    return Summary(PartialFixData(logged=ranks[0]["logged"]), checks)


def _reading_order(message: str, raising_rank) -> bool:
    """The DETAIL message names the raising rank's fingerprint, then another rank's, then what differs."""
    ranks = [int(r) for r in FINGERPRINT_RANK.findall(message)]
    return (len(ranks) == 2 and ranks[0] == raising_rank and ranks[1] != ranks[0]
            and message.find(DIFFER_PHRASE) > message.rfind("CollectiveFingerPrint"))


def outcome_checks(outcome: dict, backend: str) -> list[Check]:
    """What the bug must do, read from what the launcher saw: with ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` an exception
    naming both ranks' fingerprints; otherwise no normal end (with gloo: its size check's words)."""
    kind, message = outcome["kind"], outcome.get("message", "")
    if outcome.get("debug") == "DETAIL":
        return [check_equal("outcome", kind, "error", "DETAIL 모드에서는 짝이 안 맞는 집합 통신이 예외가 된다(결과 종류)"),
                check_true("mismatch_message", MISMATCH_PHRASE in message and "ALLREDUCE" in message,
                           outcome.get("rank"), f"예외 문장이 '{MISMATCH_PHRASE}'와 연산 종류를 밝힌다(예외를 낸 랭크)"),
                check_true("fingerprints_in_reading_order", _reading_order(message, outcome.get("rank")),
                           [int(r) for r in FINGERPRINT_RANK.findall(message)],
                           "예외 문장이 예외를 낸 랭크의 지문, 다른 랭크의 지문, 다른 점의 순서로 적는다"
                           "(10.5절의 읽는 법; 지문에 적힌 랭크 번호)")]
    checks = [check_true("not_finished", kind in ("crash", "hang", "error"), kind,
                         "짝이 안 맞는 all_reduce로는 학습이 정상적으로 끝나지 않는다(결과 종류)")]
    if backend == "gloo":
        checks.append(check_true("gloo_size_mismatch", GLOO_SIZE_PHRASE in outcome.get("stderr", ""), kind,
                                 f"gloo가 받은 바이트 수가 다르다며 프로세스를 멈춘다: '{GLOO_SIZE_PHRASE}'(결과 종류)"))
    else:
        checks.append(not_applicable("gloo_size_mismatch", "gloo의 크기 검사 문장은 gloo 백엔드에서만 나온다"))
    return checks
