"""Trap 6: a model whose shapes differ across ranks: DDP's constructor refuses it."""

from __future__ import annotations

from typing import TypedDict

from ...context import RankContext
from ...ddp.traps import shape_model_bug, shape_model_fix
from ...result import Check, Summary, check_at_least, check_close, check_equal, check_true, largest
from ...tools.models import flat_parameters, wrap_ddp
from ...tools.primitives import max_abs_diff
from .common import SEED, NoData, finished_anyway, gathered_equal, needs_a_peer

PARAMS = {"seed": SEED}
BUG_OUTCOME = "error"  # the constructor raises on a rank
# The reducer's own words (torch 2.13): the checks look for them in the captured messages.
PHRASE = "appears not to match sizes of the same param in process"


class ShapeRecord(TypedDict):
    before: list[float]
    after: list[float]


RECORDS = {"bug": ShapeRecord, "fix": ShapeRecord}
DATA = {"bug": NoData, "fix": NoData}


def validate(params: dict, world_size: int) -> None:
    needs_a_peer("shape", params, world_size)


def rank_fn(ctx: RankContext, variant: str, *, seed: int) -> ShapeRecord:
    model = (shape_model_bug if variant == "bug" else shape_model_fix)(ctx, seed)
    before = flat_parameters(model).tolist()
    ddp = wrap_ddp(model, ctx.device)                      # 생성자가 모양을 맞춰 보고, 랭크 0의 값을 브로드캐스트한다
    return {"before": before, "after": flat_parameters(ddp.module).tolist()}


def summarize(ranks: list[ShapeRecord], variant: str, params: dict) -> Summary[NoData]:
    if variant == "bug":
        return finished_anyway(BUG_OUTCOME, "랭크마다 모양이 다른 모델은 DDP 생성자에서 실패해야 한다")
    checks = [check_close("identical_after_construction", largest(max_abs_diff(r["after"], ranks[0]["before"])
                                                                   for r in ranks), 0.0, 0.0,
                          "DDP 생성 직후 모든 랭크의 파라미터가 랭크 0의 초기값과 같다(최대 절대 차이)")]
    if len(ranks) > 1:
        checks.append(check_at_least("different_before", gathered_equal(ranks, "before"), 1e-6,
                                     "감싸기 전에는 랭크마다 초기값이 달랐다(최대 차이): 같아진 것은 브로드캐스트 덕분이다"))
    return Summary(NoData(), checks)


def outcome_checks(outcome: dict, backend: str) -> list[Check]:
    """What the bug must do, read from what the launcher saw: a rank raised DDP's size mismatch."""
    return [check_equal("outcome", outcome["kind"], "error", "DDP 생성자가 예외를 낸다(결과 종류)"),
            check_true("shape_message", PHRASE in outcome.get("message", ""), outcome.get("rank"),
                       f"예외 문장에 '{PHRASE}'가 있다(예외를 낸 랭크)")]
