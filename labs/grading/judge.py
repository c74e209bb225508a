"""The parent's verdicts on a DDP (chapter 9), from the ranks' raw records: the reader's file never runs in
this process, so nothing it does can change a threshold here. The order of :data:`CHECKS` is the order of
diagnosis: an exception leads, then the checks whose failure explains the later ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from ..ddp.buckets import MIB, group_before_cap, group_by_size
from ..result import Check, check_at_most, check_close, check_equal, check_true, not_applicable
from .verdicts import LEADING, TOLERANCE, ClassRecords, Facts, Judge, Record, most_common, names, scale_cause, worst_diffs

GRAD_RTOL = 1e-4   # 그래디언트 비교: 기준 그래디언트의 가장 큰 성분에 대한 상대 오차
PROBE_NAMES = {"broadcast": "버퍼가 있는 모델을 감쌀 때", "train": "학습 반복에서", "frozen": "얼린 파라미터가 있는 모델에서",
               "tied": "가중치를 공유하는 모델에서"}
# 그래디언트가 기준과 다를 때의 원인 (grad_cause가 고르고, 훅의 종류와 보낸 원소로 좁히고, hints.GRAD_CAUSES가 설명한다)
GRAD_CAUSE_NAMES = ("missing", "not_reduced", "not_reduced_some", "hook_before_grad", "tensor_hook", "not_divided",
                    "divided_twice", "stale_handles", "stale", "wrong_op", "wrong")
# 버킷 배치를 견주는 두 규칙 (labs/ddp/buckets.py): cap을 지키는 방식이면 호출 수가 둘 사이에 있다
RULES: dict[str, Callable[..., list[list[int]]]] = {"cap에 닿으면 닫는 규칙(torch의 리듀서)": group_by_size,
                                                   "cap을 넘기 전에 닫는 규칙": group_before_cap}
SINGLE_CALL = ("반복마다 All-Reduce가 한 번뿐이라(모델 전체가 버킷 하나에 들어감) 그 호출은 마지막 그래디언트가 준비된 "
               "뒤에야 시작할 수 있어 겹침을 잴 수 없음: bucket_cap_mb를 줄이거나 모델을 키워 호출을 둘 이상으로")


def grad_cause(g: Record, n: int, iteration: int) -> str:
    """What one ``p.grad`` at the return of ``finish_gradient_synchronization()`` is, against the oracle."""
    if g["none"]:
        return "missing"
    if "shape" in g:
        return "wrong"
    fit = scale_cause(g, n, GRAD_RTOL)
    if fit is not None:
        return {"times_n": "not_divided", "over_n": "stale_handles" if iteration > 0 else "divided_twice"}.get(fit, fit)
    if g["prev_err"] is not None and g["prev_err"] <= GRAD_RTOL:
        return "stale"
    if n > 1 and min(g["op_err"].values()) <= GRAD_RTOL:
        return "wrong_op"
    return "wrong"


def hooks_before_grad(r: ClassRecords) -> bool:
    """Whether the class hooks its parameters only with tensor hooks (``register_hook``: before ``p.grad`` is written)."""
    b = r.probes["broadcast"]
    return b is not None and b[0]["hooks"]["tensor"] > 0 and b[0]["hooks"]["post_accumulate"] == 0


def first_bad_grads(r: ClassRecords) -> Record | None:
    """The first iteration and rank whose gradients are not the global mean: the cause and the parameters.
    A ``not_reduced`` cause is told apart by what the class did: tensor hooks that found no ``p.grad`` yet
    (nothing was reduced) or reduced the incoming gradient instead; some parameters left out."""
    train = r.of("train")
    for t, (rank, rec) in ((t, rr) for t in range(len(train[0]["iterations"])) for rr in enumerate(train)):
        it = rec["iterations"][t]
        causes = [grad_cause(g, r.n, t) for g in it["grads"]]
        if all(c == "ok" for c in causes):
            continue
        cause, bad = most_common(causes)
        every, first, local = len(bad) == len(causes), it["grads"][bad[0]], cause == "not_reduced"
        op_err = first.get("op_err") or {}
        if local:
            reduced = sum(c["numel"] for c in it["calls"])
            cause = ("tensor_hook" if reduced else "hook_before_grad") if hooks_before_grad(r) else cause if every else "not_reduced_some"
        return {"iteration": t, "rank": rank, "params": [train[0]["names"][i] for i in bad], "cause": cause,
                "all": every, "op": min(op_err, key=lambda op: op_err[op]) if cause == "wrong_op" else None,
                "local": local, "ratio": first.get("local_ratio" if local else "ratio")}
    return None


def first_unwaited(r: ClassRecords) -> Record | None:
    """The first iteration and rank at whose finish some async work objects were left unwaited: how many,
    and the reader's line that let go of the first of them (None if it still held them)."""
    for i, it in enumerate(r.of("train")[0]["iterations"]):
        for rank, rec in enumerate(r.of("train")):
            left = rec["iterations"][i]["unwaited"]
            if left["dropped"] or left["held"]:
                line = next((d for d in left["dropped"] if d), None)
                return {"iteration": i, "rank": rank, "count": len(left["dropped"]) + left["held"],
                        "line": f"{line[0]} {line[1]}행 `{line[2]}`" if line else None}
    return None


def layout_problem(calls: list[int], sizes: list[int], cap: int) -> str | None:
    """Why one iteration's All-Reduce sizes (bytes) are not a size-capped bucket layout of ``sizes``."""
    largest = max(sizes)
    over = [c for c in calls if c > cap + largest and c not in sizes]
    if over:
        return f"{len(over)}번의 호출이 cap+가장 큰 파라미터({cap + largest:,}바이트)보다 큼: {over[:3]}바이트"
    counts = {rule: len(group(sizes[::-1], cap, nbytes=int)) for rule, group in RULES.items()}
    if not min(counts.values()) <= len(calls) <= max(counts.values()):
        shown = ", ".join(f"{rule} {count}번" for rule, count in counts.items())
        return f"호출 {len(calls)}번: cap {cap:,}바이트를 지키는 두 규칙이 내는 호출 수({shown})의 범위 밖"
    return None


def layout_check(train: list[Record], bucketed: bool, cap_mb: float) -> tuple[bool | None, str]:
    """Bucket layout by its properties (or one call per parameter), judged on rank 0's iterations;
    ``None`` when some elements were not reduced at all (nothing to judge the layout of)."""
    rec = train[0]
    # 크기의 목록(순서 없이): 호출 순서는 검사기가 랭크끼리 맞춰 봤고, 배치의 성질은 순서와 상관없다
    per_iteration = [sorted(c["bytes"] for c in it["calls"]) for it in rec["iterations"]]
    elements, counts = [sum(c["numel"] for c in it["calls"]) for it in rec["iterations"]], [len(c) for c in per_iteration]
    trainable, sizes = sum(rec["numels"]), rec["sizes"]
    shown = f"반복별 호출 수 {counts}, 원소 {elements}개(학습 파라미터 {trainable}개)"
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
        return (ok := sorted(sizes) == calls), shown + ("" if ok else ": 파라미터마다 한 번씩이어야 함")
    cap = int(cap_mb * MIB)
    problem = layout_problem(calls, sizes, cap)
    if problem is None:
        same = [rule for rule, group in RULES.items() if sorted(sum(g) for g in group(sizes[::-1], cap, nbytes=int)) == calls]
        return True, f"{shown}, 호출 크기 {calls}바이트" + (f": {same[0]}과 같음" if same else "")
    itemsize = sizes[0] // rec["numels"][0]
    if layout_problem(calls, sizes, cap * itemsize) is None:
        problem += (f". cap을 바이트가 아니라 원소 수로 센 배치와 같음: bucket_cap_mb × 2^20은 바이트 수이므로 "
                    f"원소 수로 비교하려면 element_size()({itemsize}바이트)로 나누세요")
    return False, f"{shown}, 호출 크기 {calls}바이트: {problem}"


def broadcast_at_construction(r: ClassRecords) -> Check:
    return check_close("broadcast_at_construction", max(b["max_diff"] for b in r.of("broadcast")), 0.0, 0.0,
                       "랭크마다 다른 값으로 만든 모델을 감싸면 모든 랭크의 파라미터가 랭크 0의 초기값과 같아진다(최대 차이)")


def buffers_broadcast(r: ClassRecords) -> Check:
    b = r.of("broadcast")
    bad = sorted({name for rank in b for name, d in rank["buffers"].items() if d != 0.0})
    return check_true("buffers_broadcast", not bad,
                      f"랭크 0과 다른 버퍼: {', '.join(bad)}" if bad else f"버퍼 {len(b[0]['buffers'])}개 모두 같음",
                      "BatchNorm의 running 통계처럼 랭크마다 다른 버퍼가 감싼 뒤 랭크 0의 값과 같다(버퍼 이름별)")


def handles_waited(r: ClassRecords) -> Check:
    changed, i, rank = max((it["changed_after"], i, rank) for rank, rec in enumerate(r.of("train"))
                           for i, it in enumerate(rec["iterations"]))
    left = first_unwaited(r)
    if left is not None:
        value = (f"반복 {left['iteration'] + 1}, 랭크 {left['rank']}: 기다리지 않은 작업(Work) {left['count']}개를 "
                 + (f"{left['line']}에서 버린 채" if left["line"] else "쥔 채") + " finish가 돌아옴")
    elif changed:
        value = f"반복 {i + 1}, 랭크 {rank}: finish가 돌아온 뒤 p.grad가 최대 {changed:.3g} 더 바뀜"
    else:
        value = "모든 작업을 기다렸고, finish가 돌아온 뒤 p.grad가 바뀌지 않음"
    return check_true("handles_waited", left is None and changed == 0.0, value,
                      "finish_gradient_synchronization()이 돌아올 때 모든 All-Reduce가 끝나 있다: 받은 작업(Work)마다 wait()를 불렀거나 "
                      "get_future()로 넘겼고, 그 직후의 p.grad가 남은 통신이 모두 끝난 뒤의 p.grad와 같음(랭크 0 말고는 늦게 출발시켜 잼)")


def grads_averaged(r: ClassRecords) -> Check:
    bad = first_bad_grads(r)
    if bad is None:
        value = f"{r.params['steps']}번의 반복, 모든 랭크·파라미터에서 같음"
    else:
        base = "이 랭크 자신의 그래디언트" if bad["local"] else "기준"
        ratio = f", {base}의 {bad['ratio']:.3g}배" if bad["ratio"] is not None else ""
        value = (f"반복 {bad['iteration'] + 1}, 랭크 {bad['rank']}: "
                 f"{'모든 파라미터' if bad['all'] else names(bad['params'])} — {bad['cause']}{ratio}")
    return check_true("grads_averaged", bad is None, value,
                      "finish_gradient_synchronization() 직후 모든 랭크의 p.grad가 반복마다 전역 배치의 평균 "
                      "그래디언트(같은 가중치에서 한 프로세스가 계산)와 같다")


def single_call(r: ClassRecords) -> bool:
    """One All-Reduce per iteration: the overlap cannot be measured on this input (not applicable, not a failure)."""
    return all(len(it["calls"]) == 1 for rank in r.of("train") for it in rank["iterations"])


def reduced_during_backward(r: ClassRecords) -> Check:
    if single_call(r):
        return not_applicable("reduced_during_backward", SINGLE_CALL)
    counted = [(i, rank, sum(t < 0 for t in it["launches"]), sum(t >= 0 for t in it["launches"]))
               for rank, rec in enumerate(r.of("train")) for i, it in enumerate(rec["iterations"])]
    worst = next((f"반복 {i + 1}, 랭크 {rank}: 역전파 중 시작 {inside}번, 역전파가 끝난 뒤 시작 {late}번"
                  for i, rank, inside, late in counted if inside == 0 or late > 1), None)
    return check_true("reduced_during_backward", worst is None, worst or "모든 반복에서 역전파 중에 시작",
                      "그래디언트가 준비되면 그 All-Reduce가 역전파가 끝나기 전에 시작된다(어떤 훅 방식이든; "
                      "마지막 호출 하나는 finish에서 시작해도 됨)")


def collectives_per_iteration(r: ClassRecords) -> Check:
    ok, value = layout_check(r.of("train"), r.on_ranks[0]["bucketed"], r.params["bucket_cap_mb"])
    if ok is None:
        return not_applicable("collectives_per_iteration", value)
    return check_true("collectives_per_iteration", ok, value,
                      "학습하는 원소마다 반복당 한 번, 반복마다 같은 호출; 버킷은 호출마다 cap+가장 큰 파라미터 이하"
                      "(또는 cap보다 큰 텐서 하나)이고 호출 수가 cap을 지키는 두 규칙이 내는 범위 안")


def launch_order(r: ClassRecords) -> Check:
    if single_call(r):
        return not_applicable("launch_order", SINGLE_CALL)
    train = r.of("train")
    ready = [sum(x < min(it["launches"], default=math.inf) for x in it["ready"]) for rank in train for it in rank["iterations"]]
    return check_at_most("launch_order", max(ready), len(train[0]["numels"]) - 1,
                         "첫 All-Reduce가 모든 그래디언트가 준비되기 전에 시작된다(그때까지 준비된 그래디언트 수의 "
                         "최댓값): 역전파와 통신이 겹친다")


def frozen_untouched(r: ClassRecords) -> Check:
    f = r.of("frozen")
    change = max(rank["frozen_change"] for rank in f)
    ok = all(e == f[0]["trainable_elements"] for rank in f for e in rank["elements"]) and change == 0.0
    return check_true("frozen_untouched", ok, f"All-Reduce 원소 {f[0]['elements']}개/반복 (학습 파라미터 "
                      f"{f[0]['trainable_elements']}개), 얼린 파라미터 변화 {change:.3g}",
                      "requires_grad=False인 파라미터는 통신하지 않고 바뀌지도 않는다")


def tied_reduced_once(r: ClassRecords) -> Check:
    tied = r.of("tied")[0]
    return check_equal("tied_reduced_once", tied["elements"], [tied["unique_elements"]] * 2,
                       "두 층이 공유하는 가중치는 한 번만 All-Reduce한다(반복별 원소 수 = 서로 다른 파라미터 원소 수)")


def matches_oracles(r: ClassRecords) -> Check:
    diffs = worst_diffs(r.of("train")).values()
    return check_at_most("matches_oracles", max(d for opt in diffs for d in opt.values()), TOLERANCE,
                         f"SGD와 AdamW로 {r.params['steps']}스텝 뒤 파라미터가 torch DDP, 그리고 전역 배치로 학습한 "
                         "단일 프로세스와 같다(최대 절대 차이)")


def causes(r: ClassRecords) -> dict[str, Record]:
    """What the records say a failed check's cause is (the report's words for it are in :mod:`~labs.grading.hints`)."""
    found: dict[str, Record] = {}
    if hooks_before_grad(r) and any("NoneType" in text for c in r.on_ranks for text in c["errors"].values()):
        found["runs_without_error"] = {"key": "hook_before_grad"}  # 훅이 아직 None인 p.grad를 읽었다
    if r.probes["train"]:
        bad, left = first_bad_grads(r), first_unwaited(r)
        if bad is not None:
            found["grads_averaged"] = {"key": bad["cause"], "op": bad["op"], "params": names(bad["params"])}
        if left is not None:
            found["handles_waited"] = {"key": "dropped" if left["line"] else "held", "iteration": left["iteration"] + 1,
                                       "count": left["count"], "line": left["line"]}
    return found


def facts(r: ClassRecords) -> Facts:
    train, tied = r.probes["train"], r.probes["tied"]
    return {"grad_cause": first_bad_grads(r) if train else None, "causes": causes(r),
            "diffs": worst_diffs(train) if train else None,
            "tied_value_diff": max(rank["value_diff"] for rank in tied) if tied else None}


CHECK_FNS = {f.__name__: f for f in (broadcast_at_construction, buffers_broadcast, handles_waited, collectives_per_iteration,
                                     grads_averaged, reduced_during_backward, launch_order, frozen_untouched, tied_reduced_once,
                                     matches_oracles)}  # 확인의 이름은 함수의 이름
CHECKS = (*LEADING, *CHECK_FNS)  # 진단의 순서
PROBE_OF = {**dict.fromkeys(CHECK_FNS, "train"), "broadcast_at_construction": "broadcast", "buffers_broadcast": "broadcast",
            "frozen_untouched": "frozen", "tied_reduced_once": "tied"}
# 랭크마다 All-Reduce의 크기(호출 순서는 torch의 검사기가 호출마다 맞춰 봤다)
JUDGE = Judge(CHECK_FNS, PROBE_OF, PROBE_NAMES, facts,
              calls=("All-Reduce 호출(원소 수)", lambda t: [sorted(c["numel"] for c in it["calls"]) for it in t["iterations"]]))
