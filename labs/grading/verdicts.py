"""What every judge shares: one class's records on every rank, the two leading checks, and the walk
over a judge's table. A judge (:mod:`~labs.grading.judge` for a DDP, :mod:`~labs.grading.zero_judge`,
:mod:`~labs.grading.fsdp_judge`) is a :class:`Judge`: one module-level function per check in a table in the
order of diagnosis, the probe each reads, and the facts the report explains a failure with. A check whose
probe raised on some rank, or whose ranks' collectives diverged, is reported as not measured, with the reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

from ..result import Check, check_true, not_applicable

TOLERANCE = 1e-5   # 파라미터 비교: torch.testing의 float32 기본 atol
RATIO_RTOL = 1e-2  # 그래디언트가 기준의 N^k배라고 볼 비율의 상대 오차
SHOWN = 6          # 값에 이름을 적는 파라미터 수
LEADING = ("runs_without_error", "same_collectives_on_ranks")  # 모든 인터페이스의 첫 두 확인 (judge_class)

Record = dict[str, Any]  # 한 랭크의 기록(숫자·문자열·목록·사전: 랭크에서 JSON으로 온다)
Facts = dict[str, Any]   # 보고서가 실패를 설명하는 데 쓰는 값 (요약 데이터에 들어간다)
CheckFn = Callable[["ClassRecords"], Check]  # 확인마다의 판정 함수


@dataclass(frozen=True)
class ClassRecords:
    """One class's records on every rank, as every check function reads them."""

    n: int
    params: Mapping[str, Any]   # grade 실습의 인자 (steps, bucket_cap_mb …)
    on_ranks: list[Record]      # 랭크마다 이 클래스의 기록 (errors, phases, mismatch, 검사마다의 기록)
    probes: dict[str, list[Record] | None] = field(default_factory=dict)  # 검사 → 랭크마다의 기록; 예외가 났으면 None
    mismatch: str | None = None

    def of(self, probe: str) -> list[Record]:
        """The records of ``probe`` on every rank: a check reads only a probe that ran everywhere (:func:`measured`)."""
        return cast(list[Record], self.probes[probe])


def first_error(r: ClassRecords, probe_names: Mapping[str, str],
                counts: Callable[[Record, str], bool] = lambda c, probe: True) -> str | None:
    """The first exception with its rank (of those ``counts`` keeps), probes in the order of ``probe_names``."""
    return next((f"랭크 {rank}, {probe_names[probe]}: {c['errors'][probe]}" for probe in probe_names
                 for rank, c in enumerate(r.on_ranks) if c["errors"].get(probe) and counts(c, probe)), None)


@dataclass(frozen=True)
class Judge:
    """One interface's verdicts: the table :func:`judge_class` walks."""

    check_fns: Mapping[str, CheckFn]         # 확인마다 판정 함수, 진단의 순서로 (LEADING 다음)
    probe_of: Mapping[str, str]              # 확인 → 그 확인이 읽는 검사 (없으면 스스로 해당 없음을 판단)
    probe_names: Mapping[str, str]           # 검사 → 보고서의 말("학습 반복에서")
    facts: Callable[[ClassRecords], Facts]   # 보고서가 쓰는 값
    error: Callable[[ClassRecords, Mapping[str, str]], str | None] = first_error
    # 랭크 사이의 어긋남을 찾는 반복별 호출: (보고서의 말, train 검사의 한 랭크 기록 → 반복별 호출)
    calls: tuple[str, Callable[[Record], list[Any]]] = ("", lambda rank: [])
    needs_two_ranks: tuple[str, ...] = ()

    @property
    def checks(self) -> tuple[str, ...]:
        """Every check in the order of diagnosis: the two leading ones, then the table's."""
        return (*LEADING, *self.check_fns)


def power(ratio: float, n: int) -> int | None:
    """``k`` with ``ratio ≈ n**k``, or None."""
    if n < 2 or not ratio > 0:
        return None
    k = round(math.log(ratio) / math.log(n))
    return k if abs(ratio / n ** k - 1) <= RATIO_RTOL else None


def scale_cause(g: Record, n: int, rtol: float) -> str | None:
    """What a gradient fitted against the global-batch mean (:func:`labs.grading.probes.compare_grad`) is, when every
    interface names it: ``ok``, ``not_reduced`` (this rank's own, or over N), ``times_n``, ``over_n`` (over N^k); else None."""
    if g["err"] <= rtol:
        return "ok"
    if n > 1 and g["local_res"] <= rtol and power(g["local_ratio"], n) in (0, -1):
        return "not_reduced"
    k = power(g["ratio"], n) if g["res"] <= rtol else None
    return "times_n" if k == 1 else "over_n" if k is not None and k < 0 else None


def most_common(causes: list[str]) -> tuple[str, list[int]]:
    """The most common cause among the gradients that are not ``ok`` (there is one), and where those are."""
    bad = [i for i, c in enumerate(causes) if c != "ok"]
    return max((causes[i] for i in bad), key=lambda c: sum(causes[i] == c for i in bad)), bad


def worst_diffs(train: list[Record]) -> dict[str, dict[str, float]]:
    """For each optimizer and oracle (``ddp``, ``single``), the largest parameter difference over the ranks."""
    return {opt: {k: max(rank["diffs"][opt][k] for rank in train) for k in d} for opt, d in train[0]["diffs"].items()}


def names(params: list[str]) -> str:
    """The first parameter names of a list, for a measured value."""
    return ", ".join(params[:SHOWN]) + (" …" if len(params) > SHOWN else "")


def unmeasured(name: str, probe_name: str, mismatch: str | None) -> Check:
    """Why a check could not be measured: the ranks' collectives diverged, or its probe raised."""
    why = "랭크들의 집합 통신이 어긋나 측정할 수 없음(먼저 same_collectives_on_ranks를 고치세요)" if mismatch \
        else f"{probe_name} 예외가 나서 측정하지 못함(먼저 runs_without_error를 고치세요)"
    return not_applicable(name, why)


def measured(judge: Judge, r: ClassRecords, name: str) -> Check:
    """Check ``name`` of ``judge`` on ``r``, or why it was not measured."""
    if (probe := judge.probe_of.get(name)) is not None and (r.probes[probe] is None or r.mismatch):
        return unmeasured(name, judge.probe_names[probe], r.mismatch)
    if r.n == 1 and name in judge.needs_two_ranks:
        return not_applicable(name, "N=1이면 나눌 랭크도, 비교할 다른 랭크도 없다")
    return judge.check_fns[name](r)


def judge_class(judge: Judge, ranks: list[Record], j: int, params: Mapping[str, Any]) -> tuple[list[Check], Facts]:
    """The checks of class ``j`` in the order of diagnosis, and the facts the report explains them with."""
    on_ranks = [rank["classes"][j] for rank in ranks]
    r = ClassRecords(len(ranks), params, on_ranks,
                     {p: None if any(c.get(p) is None for c in on_ranks) else [c[p] for c in on_ranks]
                      for p in judge.probe_names},
                     next((c["mismatch"] for c in on_ranks if c["mismatch"]), None))
    what, calls_of = judge.calls
    per_rank = [calls_of(rank) for rank in r.probes.get("train") or []]
    if r.mismatch is None and any(c != per_rank[0] for c in per_rank):
        r = replace(r, mismatch=f"랭크마다 {what}이 다름: " + "; ".join(f"랭크 {i}: {c[0]}" for i, c in enumerate(per_rank)))
    error = judge.error(r, judge.probe_names)  # 모든 인터페이스의 첫 두 확인: 예외, 랭크마다 다른 집합 통신
    checks = [check_true(LEADING[0], error is None, error or "예외 없음", "채점하는 동안 여러분의 코드가 예외를 내지 않는다"),
              check_true(LEADING[1], r.mismatch is None, r.mismatch or "모든 호출 일치", "모든 랭크가 같은 순서로 같은 크기의 "
                         "집합 통신을 부른다(torch의 집합 통신 검사기가 호출마다 랭크끼리 맞춰 봄)")]
    return checks + [measured(judge, r, name) for name in judge.check_fns], {**judge.facts(r), "mismatch": r.mismatch}
