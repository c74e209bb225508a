"""Chapter 10 lab: DDP broken on purpose, on real ranks, and fixed.

One lab, ``traps``, with a ``trap`` (which mistake) and a ``variant`` (``bug`` or ``fix``). The lines the
chapter shows are bug/fix pairs of functions in :mod:`labs.ddp.traps`. Each trap is a module of this package
(:data:`TRAPS`) with

- ``PARAMS``: the parameters it reads (the engine takes only those for ``trap=...``, :class:`labs.registry.Case`),
  and ``validate(params, world_size)`` where it has rules between them;
- ``rank_fn(ctx, variant, **PARAMS)``: runs one of the pair on every rank; its record is typed by
  ``RECORDS[variant]``;
- ``summarize(ranks, variant, params)``: checks that assert the symptom (for ``bug``) or the repair (for ``fix``),
  so the book fails if PyTorch changes behaviour; its data is typed by ``DATA[variant]``;
- for a bug that hangs, raises or kills a rank and so never returns records: ``BUG_OUTCOME`` (``hang``, ``error``
  or ``crash``) and ``outcome_checks(outcome, backend)``, which :func:`observe` asserts on what really happened
  (the rank's exception text, each rank's position at the deadline) through :func:`labs.outcome.outcome_results`.

Every trap's record and summary data sit under ``measured`` (:class:`TrapsRecord`), the same for every trap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

from ...context import RankContext
from ...launch import run
from ...outcome import outcome_results, stderr_to
from ...params import Choice, Folder
from ...registry import Case, Lab, check_keys, typed_keys
from ...result import Check, LabResult, Summary
from . import checkpointing, eval_rank0, lr_scaling, no_sync, partial_collective, seed, set_epoch, shape, unused

# trap name -> its module, in the chapter's order
TRAPS = {"no_sync": no_sync, "unused": unused, "eval_rank0": eval_rank0, "set_epoch": set_epoch,
         "partial_collective": partial_collective, "shape": shape, "lr_scaling": lr_scaling, "seed": seed,
         "checkpointing": checkpointing}
VARIANTS = ("bug", "fix")
# A bug that never returns records: what the launcher must see instead (everything else finishes).
EXPECTED = {(name, "bug"): module.BUG_OUTCOME for name, module in TRAPS.items() if hasattr(module, "BUG_OUTCOME")}
HANG_TIMEOUT = 8.0  # seconds: a hang trap is ended by the launcher this long after its ranks start


class TrapsRecord(TypedDict):
    """What each rank of the 'traps' lab returns, and its summary data: one shape for every trap, since
    each trap measures something different (that goes under ``measured``, typed by the trap's module)."""

    trap: str
    variant: str
    measured: dict[str, Any]


def rank_fn(ctx: RankContext, trap: str, variant: str, stderr_dir: str, **params) -> TrapsRecord:
    if stderr_dir:  # C++ 쪽(gloo)이 프로세스를 끝내기 직전에 쓰는 문장을 observe()가 읽을 수 있게
        stderr_to(Path(stderr_dir) / f"rank{ctx.rank}.txt")
    module = TRAPS[trap]
    measured = module.rank_fn(ctx, variant, **params)
    check_keys(f"traps/{trap}", "랭크 기록", measured, typed_keys(module.RECORDS[variant]))
    return {"trap": trap, "variant": variant, "measured": measured}


def trap_summary(trap: str, measured: list[dict], variant: str, params: dict) -> Summary:
    """One trap's summary of its ranks' measurements."""
    module = TRAPS[trap]
    summary = module.summarize(measured, variant, params)
    check_keys(f"traps/{trap}", "요약 데이터", summary.data, typed_keys(module.DATA[variant]))
    return summary


def summarize(ranks: list[TrapsRecord], backend: str, params: dict) -> Summary[TrapsRecord]:
    """The trap's summary of what its ranks measured, under one record shape for every trap."""
    trap, variant = params["trap"], params["variant"]
    inner = trap_summary(trap, [r["measured"] for r in ranks], variant, params)
    return Summary({"trap": trap, "variant": variant, "measured": inner.data}, inner.checks)


def outcome_checks(trap: str, outcome: dict, backend: str) -> list[Check]:
    """What the trap's bug must do, read from what the launcher saw."""
    return TRAPS[trap].outcome_checks(outcome, backend)


def summarize_outcome(outcome: dict, backend: str, params: dict) -> Summary[TrapsRecord]:
    """A bug that never returned records: how it ended is what it measured, and its checks say how it must end."""
    trap, variant = params["trap"], params["variant"]
    return Summary({"trap": trap, "variant": variant, "measured": outcome}, outcome_checks(trap, outcome, backend))


LAB = Lab(
    name="traps",
    description="DDP를 일부러 망가뜨리는 함정 9가지(trap)를 실제 랭크에서 재현(variant=bug)하고 고친 모습(fix)을 확인",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=10,
    default_nproc=2,
    record=TrapsRecord,
    data=TrapsRecord,
    params={"trap": Choice("no_sync", tuple(TRAPS), help="함정 이름"),
            "variant": Choice("bug", VARIANTS, help="bug: 함정 그대로, fix: 고친 코드"),
            "stderr_dir": Folder("", help="비어 있지 않으면 랭크마다 표준 오류를 이 폴더의 rankN.txt에 쓴다(observe가 씀)")},
    case_key="trap",
    cases={name: Case(module.PARAMS, getattr(module, "validate", None)) for name, module in TRAPS.items()},
    summarize_outcome=summarize_outcome,
)


# ----------------------------------------------------------------------------- observing a bug that never returns

def _timeout(expected: str, timeout: float) -> float:
    return timeout if expected == "hang" else 120.0


def observe(trap: str, variant: str, nproc: int = 2, *, timeout: float = HANG_TIMEOUT, **params) -> LabResult:
    """Run one trap here; a bug that hangs, raises or kills a rank is recorded as a result whose checks assert it."""
    expected = EXPECTED.get((trap, variant), "ok")
    if expected == "ok":
        return run("traps", nproc=nproc, trap=trap, variant=variant, **params)
    # 어떻게 끝났는지가 이 실행의 기록이다(labs/outcome.py): 확인은 다시 쓸 때도 지금 코드의 outcome_checks가 한다
    [result] = outcome_results("traps", nproc, {"trap": trap, "variant": variant, **params}, _timeout(expected, timeout))
    return result


def observe_isolated(trap: str, variant: str, debug_levels=("DETAIL",), nproc: int = 2,
                     timeout: float = HANG_TIMEOUT, **params) -> list[LabResult]:
    """:func:`observe` of a bug in fresh Python processes, one per ``TORCH_DISTRIBUTED_DEBUG`` level."""
    return outcome_results("traps", nproc, {"trap": trap, "variant": variant, **params},
                           _timeout(EXPECTED[(trap, variant)], timeout), tuple(debug_levels))


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
