"""The parent's verdicts on a small FSDP from the records of :mod:`labs.grading.fsdp_probes`.

The order of :data:`CHECKS` is the order of diagnosis. An exception during backward that reads a weight
whose storage was given back (``storage of size 0``) is not reported as an unexplained exception: it is
the weight freed after forward and never gathered again for backward (``regathered_for_backward``).
"""

from __future__ import annotations

from ..result import check_at_most, check_true
from .judge import TOLERANCE, _power, _records, leading_checks, unmeasured

CHECKS = ("runs_without_error", "same_collectives_on_ranks", "regathered_for_backward", "grads_averaged",
          "grads_fp32", "params_sharded", "gathered_freed", "matches_single")
PROBE_NAMES = {"train": "학습 반복에서", "grads": "한 스텝의 그래디언트를 재는 동안", "memory": "메모리를 재는 동안",
               "mixed": "compute_dtype=torch.bfloat16으로"}
PROBE_OF = {"grads_averaged": "grads", "grads_fp32": "mixed", "params_sharded": "memory", "gathered_freed": "memory",
            "matches_single": "train"}
FREED = "storage of size 0"   # 저장 공간을 0바이트로 돌려준 텐서를 읽을 때 torch가 내는 오류의 문구
IMPLIED_RTOL = 1e-3  # 한 스텝의 변화 w0 − w1로 읽은 그래디언트: float32 가중치의 반올림만큼 흐려진다
OPT_NAMES = {"sgd": "SGD", "adamw": "AdamW"}


def freed_in_backward(cls: dict, probe: str) -> bool:
    return cls["phases"].get(probe) == "backward" and FREED in cls["errors"].get(probe, "")


def grad_cause(g: dict, n: int) -> str:
    """What the gradient one step used is, against the global-batch mean (``ok`` when it is that)."""
    if "shape" in g:
        return "wrong"
    if g["err"] <= IMPLIED_RTOL:
        return "ok"
    if n > 1 and g["local_res"] <= IMPLIED_RTOL and _power(g["local_ratio"], n) in (0, -1):
        return "not_reduced"
    k = _power(g["ratio"], n) if g["res"] <= IMPLIED_RTOL else None
    if k == 1:
        return "sum_not_average"
    if k is not None and k < 0:
        return "divided_twice"
    return "wrong"


def first_bad_grads(grads: list[dict], n: int) -> dict | None:
    names = grads[0]["names"]
    for rank, rec in enumerate(grads):
        causes = [grad_cause(g, n) for g in rec["grads"]]
        bad = [i for i, c in enumerate(causes) if c != "ok"]
        if bad:
            cause = max((causes[i] for i in bad), key=lambda c: sum(causes[i] == c for i in bad))
            first = next(i for i in bad if causes[i] == cause)
            ratio = rec["grads"][first].get("local_ratio" if cause == "not_reduced" else "ratio")
            return {"rank": rank, "cause": cause, "params": [names[i] for i in bad if causes[i] == cause],
                    "all": len(bad) == len(causes), "ratio": ratio}
    return None


def _grads(g: list[dict], n: int, facts: dict):
    bad = first_bad_grads(g, n)
    facts["grad_cause"] = bad
    if bad is None:
        value = "모든 랭크·파라미터에서 전역 배치의 평균과 같음"
    else:
        shown = ", ".join(bad["params"][:6]) + (" …" if len(bad["params"]) > 6 else "")
        ratio = f", 기준의 {bad['ratio']:.3g}배" if bad["ratio"] is not None else ""
        value = f"랭크 {bad['rank']}: {shown} — {bad['cause']}{ratio}"
    return check_true("grads_averaged", bad is None, value,
                      "lr 1인 SGD 한 스텝에서 모은 전체 파라미터의 변화(w0 − w1)가 같은 가중치에서 전역 배치로 잰 평균 "
                      f"그래디언트와 같다(가장 큰 성분 대비 상대 오차 {IMPLIED_RTOL:g} 이하; 합이면 N배)")


def _fp32(m: list[dict]):
    bad = sorted({f"{name}: 파라미터 {p}, 그래디언트 {g}" for r in m for name, p, g in r["params"]
                  if p != "float32" or g != "float32"})
    return check_true("grads_fp32", not bad,
                      "; ".join(bad[:4]) + (" …" if len(bad) > 4 else "") if bad else "모두 float32",
                      "compute_dtype=torch.bfloat16이어도 옵티마이저가 보는 파라미터(마스터 가중치)와 그 .grad는 float32다")


def _sharded(mem: list[dict], n: int):
    weights, other = sum(mem[0]["weight_bytes"]), mem[0]["other_bytes"]
    bound = weights / n + other + 4 * len(mem[0]["weight_bytes"])  # 층마다 랭크당 패딩은 원소 하나(4바이트) 미만
    held = [r["param_bytes"] for r in mem]
    return check_at_most("params_sharded", max(held), bound,
                         f"랭크마다 래퍼의 파라미터 저장소 바이트(랭크별 {held})가 감싼 층의 가중치 {weights:,}바이트의 "
                         f"1/N에 나머지 파라미터 {other:,}바이트와 층마다의 패딩을 더한 것 이하다")


def _freed(mem: list[dict]):
    largest = max(mem[0]["weight_bytes"])
    forward, backward = max(r["after_forward"] for r in mem), max(r["after_backward"] for r in mem)
    return check_at_most("gathered_freed", max(forward, backward), largest,
                         f"모은 가중치는 쓴 뒤 버린다: 순전파 뒤(래퍼와 autograd 그래프가 쥔 저장소, 감싸지 않은 모델의 "
                         f"활성값을 뺌) +{forward:,}바이트, 역전파 뒤(래퍼가 쥔 것, 파라미터·그래디언트를 뺌) "
                         f"+{backward:,}바이트가 가장 큰 층 하나의 가중치 이하(전체 가중치 {sum(mem[0]['weight_bytes']):,}바이트)")


def _single(t: list[dict], params: dict):
    diffs = [r["runs"][opt]["diff"] for r in t for opt in r["runs"]]
    if any(d is None for d in diffs):
        names = t[0]["runs"]["sgd"]["names"]
        return check_true("matches_single", False, f"gather_full_params()의 이름이나 모양이 모델과 다름: {names[:6]}",
                          "gather_full_params()가 원래 모듈의 이름마다 전체 텐서를 돌려준다")
    return check_at_most("matches_single", max(diffs), TOLERANCE,
                         f"SGD와 AdamW로 {params['steps']}스텝 뒤 gather_full_params()가 전역 배치로 학습한 단일 "
                         "프로세스의 파라미터와 같다(최대 절대 차이)")


def class_checks(ranks: list[dict], j: int, params: dict) -> tuple[list, dict]:
    """The checks of a ``FullyShardedDP`` (class ``j``) and the facts the report explains them with."""
    n = len(ranks)
    records = [r["classes"][j] for r in ranks]
    freed = next((f"랭크 {r['rank']}, {PROBE_NAMES[p]}: {c['errors'][p]}" for r, c in zip(ranks, records)
                  for p in PROBE_NAMES if freed_in_backward(c, p)), None)
    error = next((f"랭크 {r['rank']}, {PROBE_NAMES[p]}: {c['errors'][p]}" for p in PROBE_NAMES
                  for r, c in zip(ranks, records) if p in c["errors"] and not freed_in_backward(c, p)), None)
    mismatch = next((c["mismatch"] for c in records if c["mismatch"]), None)
    rec = {p: _records(ranks, j, p) for p in PROBE_NAMES}
    t = rec["train"]
    if t and mismatch is None:
        calls = [[it["ops"] for it in r["runs"]["sgd"]["calls"]] for r in t]
        if any(c != calls[0] for c in calls):
            mismatch = "랭크마다 한 반복의 집합 통신이 다름: " + "; ".join(f"랭크 {i}: {c[0]}" for i, c in enumerate(calls))
    facts: dict = {"grad_cause": None, "mismatch": mismatch, "calls": None,
                   "diffs": {opt: {"single": max(r["runs"][opt]["diff"] or 0.0 for r in t)} for opt in t[0]["runs"]}
                   if t else None}
    if t:
        facts["calls"] = {"where": "첫 반복(순전파·역전파·finish)", **t[0]["runs"]["sgd"]["calls"][0]}
    regathered = check_true("regathered_for_backward", freed is None, freed or "역전파가 모은 가중치를 읽음",
                            "역전파가 읽는 가중치가 그때 모여 있다(0바이트로 돌려준 저장소를 읽는 오류가 없음)")
    if freed is None and (mismatch or (t is None and rec["memory"] is None)):
        regathered = unmeasured("regathered_for_backward", PROBE_NAMES["train"], mismatch)
    makers = {"grads_averaged": lambda: _grads(rec["grads"], n, facts), "grads_fp32": lambda: _fp32(rec["mixed"]),
              "params_sharded": lambda: _sharded(rec["memory"], n), "gathered_freed": lambda: _freed(rec["memory"]),
              "matches_single": lambda: _single(t, params)}

    def measured(name: str):
        probe = PROBE_OF[name]
        if rec[probe] is None or mismatch:
            return unmeasured(name, PROBE_NAMES[probe], mismatch)
        return makers[name]()

    return leading_checks(error, mismatch) + [regathered] + [measured(name) for name in CHECKS[3:]], facts
