"""The parent's verdicts on a small FSDP from the records of :mod:`labs.grading.fsdp_probes`, in the order of
diagnosis. An exception in backward that reads a weight whose storage was given back (``storage of size 0``) is
not an unexplained exception: it is the weight freed after forward and not gathered again for backward.
"""

from __future__ import annotations

from ..result import Check, check_at_most, check_true
from .verdicts import LEADING, TOLERANCE, ClassRecords, Facts, Judge, Record, first_error, most_common, names, scale_cause, unmeasured

PROBE_NAMES = {"train": "학습 반복에서", "grads": "한 스텝의 그래디언트를 재는 동안", "memory": "메모리를 재는 동안",
               "mixed": "compute_dtype=torch.bfloat16으로"}
PROBE_OF = {"grads_averaged": "grads", "grads_fp32": "mixed", "params_sharded": "memory", "gathered_freed": "memory",
            "matches_single": "train"}
FREED = "storage of size 0"   # 저장 공간을 0바이트로 돌려준 텐서를 읽을 때 torch가 내는 오류의 문구
IMPLIED_RTOL = 1e-3  # 한 스텝의 변화 w0 − w1로 읽은 그래디언트: float32 가중치의 반올림만큼 흐려진다


def freed_in_backward(cls: Record, probe: str) -> bool:
    return cls["phases"].get(probe) == "backward" and FREED in cls["errors"].get(probe, "")


def grad_cause(g: Record, n: int) -> str:
    """What the gradient one step used is, against the global-batch mean (``ok`` when it is that)."""
    fit = "wrong" if "shape" in g else scale_cause(g, n, IMPLIED_RTOL) or "wrong"
    return {"times_n": "sum_not_average", "over_n": "divided_twice"}.get(fit, fit)


def first_bad_grads(grads: list[Record], n: int) -> Record | None:
    for rank, rec in enumerate(grads):
        causes = [grad_cause(g, n) for g in rec["grads"]]
        if any(c != "ok" for c in causes):
            cause, bad = most_common(causes)
            first = next(i for i in bad if causes[i] == cause)
            ratio = rec["grads"][first].get("local_ratio" if cause == "not_reduced" else "ratio")
            return {"rank": rank, "cause": cause, "params": [grads[0]["names"][i] for i in bad if causes[i] == cause],
                    "all": len(bad) == len(causes), "ratio": ratio}
    return None


def regathered_for_backward(r: ClassRecords) -> Check:
    freed = first_error(r, PROBE_NAMES, freed_in_backward)
    if freed is None and (r.mismatch or (r.probes["train"] is None and r.probes["memory"] is None)):
        return unmeasured("regathered_for_backward", PROBE_NAMES["train"], r.mismatch)
    return check_true("regathered_for_backward", freed is None, freed or "역전파가 모은 가중치를 읽음",
                      "역전파가 읽는 가중치가 그때 모여 있다(0바이트로 돌려준 저장소를 읽는 오류가 없음)")


def grads_averaged(r: ClassRecords) -> Check:
    bad = first_bad_grads(r.of("grads"), r.n)
    ratio = f", 기준의 {bad['ratio']:.3g}배" if bad and bad["ratio"] is not None else ""
    return check_true("grads_averaged", bad is None, "모든 랭크·파라미터에서 전역 배치의 평균과 같음" if bad is None else
                      f"랭크 {bad['rank']}: {names(bad['params'])} — {bad['cause']}{ratio}",
                      "lr 1인 SGD 한 스텝에서 모은 전체 파라미터의 변화(w0 − w1)가 같은 가중치에서 전역 배치로 잰 평균 "
                      f"그래디언트와 같다(가장 큰 성분 대비 상대 오차 {IMPLIED_RTOL:g} 이하; 합이면 N배)")


def grads_fp32(r: ClassRecords) -> Check:
    bad = sorted({f"{name}: 파라미터 {p}, 그래디언트 {g}" for rank in r.of("mixed") for name, p, g in rank["params"]
                  if p != "float32" or g != "float32"})
    return check_true("grads_fp32", not bad, "; ".join(bad[:4]) + (" …" if len(bad) > 4 else "") if bad else "모두 float32",
                      "compute_dtype=torch.bfloat16이어도 옵티마이저가 보는 파라미터(마스터 가중치)와 그 .grad는 float32다")


def params_sharded(r: ClassRecords) -> Check:
    mem = r.of("memory")
    weights, other = sum(mem[0]["weight_bytes"]), mem[0]["other_bytes"]
    bound = weights / r.n + other + 4 * len(mem[0]["weight_bytes"])  # 층마다 랭크당 패딩은 원소 하나(4바이트) 미만
    held = [rank["param_bytes"] for rank in mem]
    return check_at_most("params_sharded", max(held), bound,
                         f"랭크마다 래퍼의 파라미터 저장소 바이트(랭크별 {held})가 감싼 층의 가중치 {weights:,}바이트의 "
                         f"1/N에 나머지 파라미터 {other:,}바이트와 층마다의 패딩을 더한 것 이하다")


def gathered_freed(r: ClassRecords) -> Check:
    mem = r.of("memory")
    forward, backward = max(rank["after_forward"] for rank in mem), max(rank["after_backward"] for rank in mem)
    return check_at_most("gathered_freed", max(forward, backward), max(mem[0]["weight_bytes"]),
                         f"모은 가중치는 쓴 뒤 버린다: 순전파 뒤(래퍼와 autograd 그래프가 쥔 저장소, 감싸지 않은 모델의 "
                         f"활성값을 뺌) +{forward:,}바이트, 역전파 뒤(래퍼가 쥔 것, 파라미터·그래디언트를 뺌) "
                         f"+{backward:,}바이트가 가장 큰 층 하나의 가중치 이하(전체 가중치 {sum(mem[0]['weight_bytes']):,}바이트)")


def matches_single(r: ClassRecords) -> Check:
    t = r.of("train")
    diffs = [rank["runs"][opt]["diff"] for rank in t for opt in rank["runs"]]
    if any(d is None for d in diffs):
        return check_true("matches_single", False, f"gather_full_params()의 이름이나 모양이 모델과 다름: "
                          f"{t[0]['runs']['sgd']['names'][:6]}", "gather_full_params()가 원래 모듈의 이름마다 전체 텐서를 돌려준다")
    return check_at_most("matches_single", max(diffs), TOLERANCE,
                         f"SGD와 AdamW로 {r.params['steps']}스텝 뒤 gather_full_params()가 전역 배치로 학습한 단일 "
                         "프로세스의 파라미터와 같다(최대 절대 차이)")


def facts(r: ClassRecords) -> Facts:
    t, g = r.probes["train"], r.probes["grads"]
    bad = first_bad_grads(g, r.n) if g else None
    return {"grad_cause": bad, "causes": {"grads_averaged": {"key": bad["cause"]}} if bad else {},
            "diffs": {opt: {"single": max(rank["runs"][opt]["diff"] or 0.0 for rank in t)} for opt in t[0]["runs"]}
            if t else None,
            "calls": {"where": "첫 반복(순전파·역전파·finish)", **t[0]["runs"]["sgd"]["calls"][0]} if t else None}


CHECK_FNS = {f.__name__: f for f in (regathered_for_backward, grads_averaged, grads_fp32, params_sharded, gathered_freed,
                                     matches_single)}  # 확인의 이름은 함수의 이름
CHECKS = (*LEADING, *CHECK_FNS)  # 진단의 순서
JUDGE = Judge(CHECK_FNS, PROBE_OF, PROBE_NAMES, facts,
              calls=("한 반복의 집합 통신", lambda t: [c["ops"] for c in t["runs"]["sgd"]["calls"]]),
              error=lambda r, probes: first_error(r, probes, lambda c, p: not freed_in_backward(c, p)))
