"""The parent's side of the grader: every verdict, computed from the ranks' raw records.

The reader's file never runs in this process, so nothing it does can change a threshold here. The
order of :data:`CHECKS` is the order of diagnosis: an exception in the reader's code leads, then the
checks whose failure explains the later ones. This module judges a DDP; the chapter 13 judges reuse its
tools, and :mod:`labs.grading.summary` picks the judge of each class.
"""

from __future__ import annotations

import math

from ..ddp.buckets import MIB
from ..result import check_at_most, check_close, check_equal, check_true, not_applicable
from .probes import OPTIMIZERS

TOLERANCE = 1e-5   # 파라미터 비교: torch.testing의 float32 기본 atol
GRAD_RTOL = 1e-4   # 그래디언트 비교: 기준 그래디언트의 가장 큰 성분에 대한 상대 오차
RATIO_RTOL = 1e-2  # 그래디언트가 기준의 N^k배라고 볼 비율의 상대 오차

CHECKS = ("runs_without_error", "same_collectives_on_ranks", "broadcast_at_construction", "buffers_broadcast",
          "handles_waited", "collectives_per_iteration", "grads_averaged", "reduced_during_backward",
          "launch_order", "frozen_untouched", "tied_reduced_once", "matches_oracles")
PROBE_OF = {"broadcast_at_construction": "broadcast", "buffers_broadcast": "broadcast", "handles_waited": "train",
            "grads_averaged": "train", "reduced_during_backward": "train", "collectives_per_iteration": "train",
            "launch_order": "train", "matches_oracles": "train", "frozen_untouched": "frozen",
            "tied_reduced_once": "tied"}
PROBE_NAMES = {"broadcast": "버퍼가 있는 모델을 감쌀 때", "train": "학습 반복에서", "frozen": "얼린 파라미터가 있는 모델에서",
               "tied": "가중치를 공유하는 모델에서"}
# 그래디언트가 기준과 다를 때의 원인 (judge가 고르고 hints.GRAD_CAUSES가 설명한다)
GRAD_CAUSE_NAMES = ("missing", "not_reduced", "not_divided", "divided_twice", "stale_handles", "stale", "wrong_op",
                    "wrong")


def _power(ratio: float, n: int) -> int | None:
    """``k`` with ``ratio ≈ n**k``, or None."""
    if n < 2 or not ratio > 0:
        return None
    k = round(math.log(ratio) / math.log(n))
    return k if abs(ratio / n ** k - 1) <= RATIO_RTOL else None


def grad_cause(g: dict, n: int, iteration: int) -> str:
    """What one ``p.grad`` at the return of ``finish_gradient_synchronization()`` is, against the oracle."""
    if g["none"]:
        return "missing"
    if "shape" in g:
        return "wrong"
    if g["err"] <= GRAD_RTOL:
        return "ok"
    if n > 1 and g["local_res"] <= GRAD_RTOL and _power(g["local_ratio"], n) in (0, -1):
        return "not_reduced"
    k = _power(g["ratio"], n) if g["res"] <= GRAD_RTOL else None
    if k == 1:
        return "not_divided"
    if k is not None and k < 0:
        return "stale_handles" if iteration > 0 else "divided_twice"
    if g["prev_err"] is not None and g["prev_err"] <= GRAD_RTOL:
        return "stale"
    if n > 1 and min(g["op_err"].values()) <= GRAD_RTOL:
        return "wrong_op"
    return "wrong"


def first_bad_grads(train: list[dict], n: int) -> dict | None:
    """The first iteration and rank whose gradients are not the global mean: the cause and the parameters."""
    names = train[0]["names"]
    for t in range(len(train[0]["iterations"])):
        for rank, rec in enumerate(train):
            grads = rec["iterations"][t]["grads"]
            causes = [grad_cause(g, n, t) for g in grads]
            bad = [i for i, c in enumerate(causes) if c != "ok"]
            if bad:
                cause = max((causes[i] for i in bad), key=lambda c: sum(causes[i] == c for i in bad))
                ratio = grads[bad[0]].get("local_ratio" if cause == "not_reduced" else "ratio")
                op_err = grads[bad[0]].get("op_err") or {}
                return {"iteration": t, "rank": rank, "cause": cause, "params": [names[i] for i in bad],
                        "all": len(bad) == len(grads), "ratio": ratio,
                        "op": min(op_err, key=op_err.get) if cause == "wrong_op" else None}
    return None


def size_capped_calls(sizes: list[int], cap: int) -> tuple[int, int]:
    """Fewest and most calls a rule that honours ``cap`` gives, filling ``sizes`` in order: a bucket
    closes once it reaches the cap (PyTorch's reducer) or just before it would pass it."""
    at_cap, before, size_a, size_b = 0, 0, 0, 0
    for s in sizes:
        size_a += s
        if size_a >= cap:
            at_cap, size_a = at_cap + 1, 0
        if size_b and size_b + s > cap:
            before, size_b = before + 1, 0
        size_b += s
    at_cap += size_a > 0
    before += size_b > 0
    return min(at_cap, before), max(at_cap, before)


def layout_problem(calls: list[int], sizes: list[int], cap: int) -> str | None:
    """Why one iteration's All-Reduce sizes (bytes) are not a size-capped bucket layout of ``sizes``."""
    largest = max(sizes)
    over = [c for c in calls if c > cap + largest and c not in sizes]
    if over:
        return f"{len(over)}번의 호출이 cap+가장 큰 파라미터({cap + largest:,}바이트)보다 큼: {over[:3]}바이트"
    low, high = size_capped_calls(sizes[::-1], cap)
    if not low <= len(calls) <= high:
        return f"호출 {len(calls)}번: cap {cap:,}바이트를 지키는 규칙이 낼 수 있는 {low}~{high}번 밖"
    return None


def layout_check(train: list[dict], bucketed: bool, cap_mb: float) -> tuple[bool | None, str]:
    """Bucket layout by its properties (or one call per parameter), judged on rank 0's iterations;
    ``None`` when some elements were not reduced at all (nothing to judge the layout of)."""
    rec = train[0]
    # 크기의 목록(순서 없이): 호출 순서는 검사기가 랭크끼리 맞춰 봤고, 배치의 성질은 순서와 상관없다
    per_iteration = [sorted(c["bytes"] for c in it["calls"]) for it in rec["iterations"]]
    elements = [sum(c["numel"] for c in it["calls"]) for it in rec["iterations"]]
    trainable, sizes = sum(rec["numels"]), rec["sizes"]
    shown = f"반복별 호출 수 {[len(c) for c in per_iteration]}, 원소 {elements}개(학습 파라미터 {trainable}개)"
    counts = [len(c) for c in per_iteration]
    if len(counts) > 1 and all(a < b for a, b in zip(counts, counts[1:])):
        return False, f"{shown}: 반복마다 호출이 늘어남(순전파나 반복마다 훅을 또 걸고 있지 않은지)"
    if any(e > trainable for e in elements):
        return False, f"{shown}: 같은 원소를 한 반복에 두 번 이상 All-Reduce함"
    if any(c != per_iteration[0] for c in per_iteration):
        return False, f"{shown}: 반복마다 호출이 달라짐(훅이나 버킷을 반복마다 새로 만들고 있지 않은지)"
    calls = per_iteration[0]
    if elements[0] < trainable:  # 빠진 파라미터의 p.grad는 평균이 아니다: grads_averaged가 그 이름을 알린다
        return None, f"{shown}: 원소가 모자라 배치를 판정할 수 없음(빠진 파라미터는 grads_averaged가 이름으로 알림)"
    if not bucketed:
        left = list(sizes)
        ok = all(c in left and not left.remove(c) for c in calls)
        return ok, shown + ("" if ok else ": 파라미터마다 한 번씩이어야 함")
    cap = int(cap_mb * MIB)
    problem = layout_problem(calls, sizes, cap)
    if problem is None:
        return True, f"{shown}, 호출 크기 {calls}바이트"
    itemsize = sizes[0] // rec["numels"][0]
    if layout_problem(calls, sizes, cap * itemsize) is None:
        problem += (f". cap을 바이트가 아니라 원소 수로 센 배치와 같음: bucket_cap_mb × 2^20은 바이트 수이므로 "
                    f"원소 수로 비교하려면 element_size()({itemsize}바이트)로 나누세요")
    return False, f"{shown}, 호출 크기 {calls}바이트: {problem}"


def _records(ranks: list[dict], j: int, probe: str) -> list[dict] | None:
    """One class's probe record on every rank, or None if it raised (or never ran) on any rank."""
    records = [r["classes"][j].get(probe) for r in ranks]
    return None if any(rec is None for rec in records) else records


def _first_error(ranks: list[dict], j: int, probe_names: dict = PROBE_NAMES) -> str | None:
    """The first exception of class ``j``, probes in the order of ``probe_names``, with the rank."""
    for probe in probe_names:
        for r in ranks:
            text = r["classes"][j]["errors"].get(probe)
            if text:
                return f"랭크 {r['rank']}, {probe_names[probe]}: {text}"
    return None


def leading_checks(error: str | None, mismatch: str | None) -> list:
    """The first two checks of every interface: an exception, then ranks that disagree on a collective."""
    return [check_true("runs_without_error", error is None, error or "예외 없음",
                       "채점하는 동안 여러분의 코드가 예외를 내지 않는다"),
            check_true("same_collectives_on_ranks", mismatch is None, mismatch or "모든 호출 일치",
                       "모든 랭크가 같은 순서로 같은 크기의 집합 통신을 부른다(torch의 집합 통신 검사기가 호출마다 "
                       "랭크끼리 맞춰 봄)")]


def unmeasured(name: str, probe_name: str, mismatch: str | None):
    """Why a check could not be measured: the ranks' collectives diverged, or its probe raised."""
    why = "랭크들의 집합 통신이 어긋나 측정할 수 없음(먼저 same_collectives_on_ranks를 고치세요)" if mismatch \
        else f"{probe_name} 예외가 나서 측정하지 못함(먼저 runs_without_error를 고치세요)"
    return not_applicable(name, why)


def class_checks(ranks: list[dict], j: int, params: dict) -> tuple[list, dict]:
    """The checks of class ``j`` and the facts the report explains them with."""
    n, steps = len(ranks), params["steps"]
    error = _first_error(ranks, j)
    mismatch = next((r["classes"][j]["mismatch"] for r in ranks if r["classes"][j]["mismatch"]), None)
    rec = {p: _records(ranks, j, p) for p in ("broadcast", "train", "frozen", "tied")}
    b, t, f, tied = rec["broadcast"], rec["train"], rec["frozen"], rec["tied"]
    bucketed = ranks[0]["classes"][j]["bucketed"]
    facts: dict = {"grad_cause": None}
    if t and mismatch is None:  # 호출의 순서는 torch의 검사기가 맞춰 봤다: 여기서는 반복마다 호출한 크기들을 견준다
        sizes = [[sorted(c["numel"] for c in it["calls"]) for it in r["iterations"]] for r in t]
        if any(s != sizes[0] for s in sizes):
            mismatch = "랭크마다 All-Reduce 호출(원소 수)이 다름: " + "; ".join(
                f"랭크 {i}: {s[0]}" for i, s in enumerate(sizes))
    checks = leading_checks(error, mismatch)

    def measured(name: str, make):
        probe = PROBE_OF[name]
        if rec[probe] is None or mismatch:
            return unmeasured(name, PROBE_NAMES[probe], mismatch)
        return make()

    def buffers():
        bad = sorted({name for r in b for name, d in r["buffers"].items() if d != 0.0})
        return check_true("buffers_broadcast", not bad,
                          f"랭크 0과 다른 버퍼: {', '.join(bad)}" if bad else f"버퍼 {len(b[0]['buffers'])}개 모두 같음",
                          "BatchNorm의 running 통계처럼 랭크마다 다른 버퍼가 감싼 뒤 랭크 0의 값과 같다(버퍼 이름별)")

    def waited():
        changes = [(it["changed_after"], i, r) for r, rank in enumerate(t) for i, it in enumerate(rank["iterations"])]
        worst = max(changes)
        return check_true("handles_waited", worst[0] == 0.0,
                          "finish가 돌아온 뒤에도 바뀌지 않음" if worst[0] == 0.0 else
                          f"반복 {worst[1] + 1}, 랭크 {worst[2]}: finish가 돌아온 뒤 p.grad가 최대 {worst[0]:.3g} 더 바뀜",
                          "finish_gradient_synchronization()이 돌아올 때 모든 All-Reduce가 끝나 있다(그 직후의 "
                          "p.grad와 남은 통신이 모두 끝난 뒤의 p.grad가 같음, 랭크 0 말고는 늦게 출발시켜 잼)")

    def grads():
        bad = first_bad_grads(t, n)
        facts["grad_cause"] = bad
        if bad is None:
            value = f"{steps}번의 반복, 모든 랭크·파라미터에서 같음"
        else:
            which = "모든 파라미터" if bad["all"] else ", ".join(bad["params"][:6]) + (" …" if len(bad["params"]) > 6 else "")
            base = "이 랭크 자신의 그래디언트" if bad["cause"] == "not_reduced" else "기준"
            ratio = f", {base}의 {bad['ratio']:.3g}배" if bad["ratio"] is not None else ""
            value = f"반복 {bad['iteration'] + 1}, 랭크 {bad['rank']}: {which} — {bad['cause']}{ratio}"
        return check_true("grads_averaged", bad is None, value,
                          "finish_gradient_synchronization() 직후 모든 랭크의 p.grad가 반복마다 전역 배치의 평균 "
                          "그래디언트(같은 가중치에서 한 프로세스가 계산)와 같다")

    # 반복마다 호출이 하나뿐이면(모델 전체가 버킷 하나) 그 호출은 마지막 그래디언트가 준비되어야 시작할 수 있다:
    # 역전파와의 겹침은 이 입력으로는 잴 수 없다 (실패가 아니라 해당 없음)
    def single_call() -> bool:
        return all(len(it["calls"]) == 1 for rank in t for it in rank["iterations"])

    single_reason = ("반복마다 All-Reduce가 한 번뿐이라(모델 전체가 버킷 하나에 들어감) 그 호출은 마지막 그래디언트가 "
                     "준비된 뒤에야 시작할 수 있어 겹침을 잴 수 없음: bucket_cap_mb를 줄이거나 모델을 키워 호출을 둘 이상으로")

    def during():
        if single_call():
            return not_applicable("reduced_during_backward", single_reason)
        worst = None
        for r, rank in enumerate(t):
            for i, it in enumerate(rank["iterations"]):
                inside = sum(t < 0 for t in it["launches"])
                late = len(it["launches"]) - inside
                if (inside == 0 or late > 1) and worst is None:
                    worst = f"반복 {i + 1}, 랭크 {r}: 역전파 중 시작 {inside}번, 역전파가 끝난 뒤 시작 {late}번"
        return check_true("reduced_during_backward", worst is None, worst or "모든 반복에서 역전파 중에 시작",
                          "그래디언트가 준비되면 그 All-Reduce가 역전파가 끝나기 전에 시작된다(어떤 훅 방식이든; "
                          "마지막 호출 하나는 finish에서 시작해도 됨)")

    def layout():
        ok, value = layout_check(t, bucketed, params["bucket_cap_mb"])
        if ok is None:
            return not_applicable("collectives_per_iteration", value)
        return check_true("collectives_per_iteration", ok, value,
                          "학습하는 원소마다 반복당 한 번, 반복마다 같은 호출; 버킷은 호출마다 cap+가장 큰 파라미터 이하"
                          "(또는 cap보다 큰 텐서 하나)이고 호출 수가 cap을 지키는 규칙이 낼 수 있는 범위 안")

    def overlap():
        if single_call():
            return not_applicable("launch_order", single_reason)
        ready = [sum(x < min(it["launches"], default=math.inf) for x in it["ready"])
                 for r in t for it in r["iterations"]]
        return check_at_most("launch_order", max(ready) if ready else None, len(t[0]["numels"]) - 1,
                             "첫 All-Reduce가 모든 그래디언트가 준비되기 전에 시작된다(그때까지 준비된 그래디언트 수의 "
                             "최댓값): 역전파와 통신이 겹친다")

    def frozen():
        change = max(r["frozen_change"] for r in f)
        ok = all(e == f[0]["trainable_elements"] for r in f for e in r["elements"]) and change == 0.0
        return check_true("frozen_untouched", ok, f"All-Reduce 원소 {f[0]['elements']}개/반복 (학습 파라미터 "
                          f"{f[0]['trainable_elements']}개), 얼린 파라미터 변화 {change:.3g}",
                          "requires_grad=False인 파라미터는 통신하지 않고 바뀌지도 않는다")

    def oracles():
        diffs = [d for r in t for opt in r["diffs"].values() for d in opt.values()]
        return check_at_most("matches_oracles", max(diffs), TOLERANCE,
                             f"SGD와 AdamW로 {steps}스텝 뒤 파라미터가 torch DDP, 그리고 전역 배치로 학습한 단일 프로세스와 "
                             "같다(최대 절대 차이)")

    makers = {
        "broadcast_at_construction": lambda: check_close(
            "broadcast_at_construction", max(r["max_diff"] for r in b), 0.0, 0.0,
            "랭크마다 다른 값으로 만든 모델을 감싸면 모든 랭크의 파라미터가 랭크 0의 초기값과 같아진다(최대 차이)"),
        "buffers_broadcast": buffers, "handles_waited": waited, "grads_averaged": grads,
        "reduced_during_backward": during, "collectives_per_iteration": layout, "launch_order": overlap,
        "frozen_untouched": frozen,
        "tied_reduced_once": lambda: check_equal(
            "tied_reduced_once", tied[0]["elements"], [tied[0]["unique_elements"]] * 2,
            "두 층이 공유하는 가중치는 한 번만 All-Reduce한다(반복별 원소 수 = 서로 다른 파라미터 원소 수)"),
        "matches_oracles": oracles,
    }
    checks += [measured(name, makers[name]) for name in CHECKS[2:]]
    facts.update(
        diffs={opt: {k: max(r["diffs"][opt][k] for r in t) for k in ("ddp", "single")} for opt in OPTIMIZERS} if t else None,
        tied_value_diff=max(r["value_diff"] for r in tied) if tied else None, mismatch=mismatch)
    return checks, facts
