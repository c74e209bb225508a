"""The parent's verdicts on a ZeRO-1 optimizer from the records of :mod:`labs.grading.zero_probes`, in the order
of diagnosis: a step that shares nothing explains replicas that differ, which explain parameters that are not
DDP's, which explain results that are not the oracles'.
"""

from __future__ import annotations

from ..result import Check, check_at_least, check_at_most, check_true
from .config import OPTIMIZER_LABELS
from .verdicts import LEADING, TOLERANCE, ClassRecords, Facts, Judge, Record, names, worst_diffs

PROBE_NAMES = {"train": "학습 반복에서", "groups": "add_param_group으로 그룹을 더한 뒤"}


def step_shares_params(r: ClassRecords) -> Check:
    t = r.of("train")
    # 모든 랭크가 나른 원소를 더한다: broadcast는 랭크마다 파라미터 전체, all_gather는 랭크마다 제 샤드를 센다
    sums = {(opt, i): sum(rank["runs"][opt]["steps"][i]["elements"] for rank in t)
            for opt in t[0]["runs"] for i in range(len(t[0]["runs"][opt]["steps"]))}
    (opt, i), least = min(sums.items(), key=lambda kv: kv[1])
    shown = ", ".join(f"{op} {count}번" for op, count in sorted(t[0]["runs"][opt]["steps"][i]["ops"].items())) or "집합 통신 없음"
    return check_at_least("step_shares_params", least, sum(t[0]["numels"]),
                          f"step()마다 랭크들이 집합 통신으로 나른 원소의 합이 파라미터 원소 수 이상이다: 주인이 업데이트한 "
                          f"파라미터를 모두에게 보낸다(가장 적은 스텝: {OPTIMIZER_LABELS[opt]} {i + 1}번째, 랭크 0의 호출 {shown})")


def replicas_identical(r: ClassRecords) -> Check:
    t = r.of("train")
    differ = next(((opt, i, len(prints)) for opt in t[0]["runs"] for i in range(len(t[0]["runs"][opt]["steps"]))
                   if len(prints := {rank["runs"][opt]["steps"][i]["fingerprint"] for rank in t}) > 1), None)
    return check_true("replicas_identical", differ is None, "모든 스텝 뒤 모든 랭크가 같음" if differ is None else
                      f"{OPTIMIZER_LABELS[differ[0]]} {differ[1] + 1}번째 스텝 뒤 랭크마다 다른 파라미터(지문 {differ[2]}종류)",
                      "스텝마다 모든 랭크의 파라미터가 비트 단위로 같다(파라미터 바이트의 지문)")


def bad_first_step(t: list[Record]) -> Record | None:
    """The first rank and optimizer whose parameters after the first ``step()`` are not DDP's: their names
    and how many kept exactly their value from before the step."""
    for opt in t[0]["runs"]:
        for rank, rec in enumerate(t):
            first = rec["runs"][opt]["first_step"]
            bad = [i for i, d in enumerate(first) if d["ref"] > TOLERANCE]
            if bad:
                return {"opt": opt, "rank": rank, "params": [t[0]["names"][i] for i in bad],
                        "unchanged": sum(first[i]["before"] == 0.0 for i in bad)}
    return None


def params_updated(r: ClassRecords) -> Check:
    bad = bad_first_step(r.of("train"))
    value = "모든 랭크에서 모든 파라미터가 같음" if bad is None else (
        f"{OPTIMIZER_LABELS[bad['opt']]}, 랭크 {bad['rank']}: {names(bad['params'])} — {len(bad['params'])}개 중 "
        f"{bad['unchanged']}개가 스텝 전 값 그대로")
    return check_true("params_updated", bad is None, value,
                      "첫 step() 뒤 모든 랭크의 파라미터 하나하나가 torch DDP + 같은 옵티마이저의 한 스텝과 같다"
                      f"(최대 절대 차이 {TOLERANCE:g} 이하)")


def state_shares(t: list[Record], n: int) -> list[Record]:
    """For each optimizer: the state bytes each rank holds, one process's, and the bound of a 1/N share."""
    singles = [(opt, t[0]["runs"][opt]["single_state"]) for opt in t[0]["runs"]]
    return [{"opt": opt, "held": [rank["runs"][opt]["state_bytes"] for rank in t], "single": sum(single),
             "bound": sum(single) / n + max(single)} for opt, single in singles]


def state_divided(r: ClassRecords) -> Check:
    cause = state_cause(r.of("train"), r.n)
    value = "; ".join(f"{OPTIMIZER_LABELS[s['opt']]} 랭크별 {s['held']}바이트(한 프로세스 {s['single']:,}, 기준 ≤ "
                      f"{s['bound']:,.0f})" for s in state_shares(r.of("train"), r.n))
    return check_true("state_divided", cause is None,
                      value + (" — 어느 랭크에서도 옵티마이저 상태를 찾지 못함: 상태는 optimizer_cls로 만든 torch 옵티마이저의 "
                               "state에 있어야 잴 수 있다" if cause == {"key": "not_found"} else ""),
                      "랭크마다 옵티마이저 상태(가진 torch 옵티마이저들의 state, 저장소 바이트)가 한 프로세스의 1/N에 "
                      "가장 큰 텐서 하나의 상태를 더한 것 이하다")


def state_cause(t: list[Record], n: int) -> Record | None:
    """Why the state is not a 1/N share: not found; held more than once over the ranks (every rank steps
    some parameter); or held once over the ranks but unevenly (the assignment, not the sharding)."""
    shares = state_shares(t, n)
    if not any(max(s["held"]) for s in shares):
        return {"key": "not_found"}
    worst = max(shares, key=lambda s: max(s["held"]) / s["bound"])
    if max(worst["held"]) <= worst["bound"]:
        return None
    most = max(range(n), key=lambda i: worst["held"][i])
    return {"key": "unbalanced" if sum(worst["held"]) <= worst["single"] else "replicated", "rank": most,
            "share": f"{worst['held'][most] / worst['single']:.0%}", "total": f"{sum(worst['held']) / worst['single']:.2g}"}


def zero_grad_clears(r: ClassRecords) -> Check:
    left = sorted({name for rank in r.of("train") for run in rank["runs"].values() for name in run["grads_left"]})
    return check_true("zero_grad_clears", not left,
                      f"zero_grad() 뒤에도 그래디언트가 남은 파라미터: {names(left)}" if left else "모두 지워짐",
                      "zero_grad()가 모든 랭크에서 모든 파라미터의 그래디언트를 지운다(None 또는 0)")


def param_groups_honoured(r: ClassRecords) -> Check:
    g = r.of("groups")
    bad = next((rank for rank in g if rank["lrs"] != rank["expected_lrs"] or max(rank["diffs"]) > TOLERANCE), None)
    shown = bad or g[0]
    return check_true("param_groups_honoured", bad is None,
                      f"param_groups의 lr {shown['lrs']} (torch: {shown['expected_lrs']}), K스텝 뒤 그룹별 차이 "
                      f"[{shown['diffs'][0]:.2e}, {shown['diffs'][1]:.2e}]",
                      "생성한 뒤 add_param_group으로 다른 lr의 그룹을 더해도, torch 옵티마이저에 같은 그룹을 준 DDP와 "
                      f"param_groups의 lr과 두 그룹의 파라미터가 같다(최대 절대 차이 {TOLERANCE:g} 이하)")


def matches_oracles(r: ClassRecords) -> Check:
    return check_at_most("matches_oracles", max(d for opt in worst_diffs(r.of("train")).values() for d in opt.values()),
                         TOLERANCE, f"SGD와 AdamW로 {r.params['steps']}스텝 뒤 파라미터가 torch DDP + 같은 옵티마이저, "
                         "그리고 전역 배치로 학습한 단일 프로세스와 같다(최대 절대 차이)")


def facts(r: ClassRecords) -> Facts:
    t = r.probes["train"]
    if not t:
        return {"grad_cause": None, "first_step": None, "diffs": None, "calls": None, "causes": {}}
    first, cause = t[0]["runs"]["sgd"]["steps"][0], state_cause(t, r.n)
    return {"grad_cause": None, "first_step": bad_first_step(t), "diffs": worst_diffs(t),
            "calls": {"where": "첫 step()", "ops": first["ops"], "bytes": first["bytes"]},
            "causes": {} if cause is None else {"state_divided": cause}}


CHECK_FNS = {f.__name__: f for f in (step_shares_params, replicas_identical, params_updated, state_divided, zero_grad_clears,
                                     param_groups_honoured, matches_oracles)}  # 확인의 이름은 함수의 이름
CHECKS = (*LEADING, *CHECK_FNS)  # 진단의 순서
PROBE_OF = {**dict.fromkeys(CHECK_FNS, "train"), "param_groups_honoured": "groups"}
JUDGE = Judge(CHECK_FNS, PROBE_OF, PROBE_NAMES, facts, needs_two_ranks=("step_shares_params", "replicas_identical"))
