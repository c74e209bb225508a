"""The parent's verdicts on a ZeRO-1 optimizer from the records of :mod:`labs.grading.zero_probes`.

The order of :data:`CHECKS` is the order of diagnosis: a step that shares nothing explains replicas that
differ, which explain parameters that are not DDP's, which explain results that are not the oracles'.
"""

from __future__ import annotations

from ..result import check_at_least, check_at_most, check_true, not_applicable
from .judge import TOLERANCE, _first_error, _records, leading_checks, unmeasured

CHECKS = ("runs_without_error", "same_collectives_on_ranks", "step_shares_params", "replicas_identical",
          "params_updated", "state_divided", "zero_grad_clears", "param_groups_honoured", "matches_oracles")
PROBE_NAMES = {"train": "학습 반복에서", "groups": "add_param_group으로 그룹을 더한 뒤"}
PROBE_OF = {"step_shares_params": "train", "replicas_identical": "train", "params_updated": "train",
            "state_divided": "train", "zero_grad_clears": "train", "param_groups_honoured": "groups",
            "matches_oracles": "train"}
OPT_NAMES = {"sgd": "SGD", "adamw": "AdamW"}
NEEDS_TWO_RANKS = ("step_shares_params", "replicas_identical")


def _shares(t: list[dict], total: int):
    # 모든 랭크가 나른 원소를 더한다: broadcast는 랭크마다 파라미터 전체, all_gather는 랭크마다 제 샤드를 센다
    sums = {(opt, i): sum(r["runs"][opt]["steps"][i]["elements"] for r in t)
            for opt in t[0]["runs"] for i in range(len(t[0]["runs"][opt]["steps"]))}
    (opt, i), least = min(sums.items(), key=lambda kv: kv[1])
    ops = t[0]["runs"][opt]["steps"][i]["ops"]
    shown = ", ".join(f"{op} {count}번" for op, count in sorted(ops.items())) or "집합 통신 없음"
    return check_at_least("step_shares_params", least, total,
                          f"step()마다 랭크들이 집합 통신으로 나른 원소의 합이 파라미터 원소 수 이상이다: 주인이 업데이트한 "
                          f"파라미터를 모두에게 보낸다(가장 적은 스텝: {OPT_NAMES[opt]} {i + 1}번째, 랭크 0의 호출 {shown})")


def _replicas(t: list[dict]):
    for opt in t[0]["runs"]:
        for i in range(len(t[0]["runs"][opt]["steps"])):
            prints = {r["runs"][opt]["steps"][i]["fingerprint"] for r in t}
            if len(prints) > 1:
                return check_true("replicas_identical", False,
                                  f"{OPT_NAMES[opt]} {i + 1}번째 스텝 뒤 랭크마다 다른 파라미터(지문 {len(prints)}종류)",
                                  "스텝마다 모든 랭크의 파라미터가 비트 단위로 같다(파라미터 바이트의 지문)")
    return check_true("replicas_identical", True, "모든 스텝 뒤 모든 랭크가 같음",
                      "스텝마다 모든 랭크의 파라미터가 비트 단위로 같다(파라미터 바이트의 지문)")


def bad_first_step(t: list[dict]) -> dict | None:
    """The first rank and optimizer whose parameters after the first ``step()`` are not DDP's: their names
    and how many kept exactly their value from before the step."""
    names = t[0]["names"]
    for opt in t[0]["runs"]:
        for rank, r in enumerate(t):
            first = r["runs"][opt]["first_step"]
            bad = [i for i, d in enumerate(first) if d["ref"] > TOLERANCE]
            if bad:
                return {"opt": opt, "rank": rank, "params": [names[i] for i in bad],
                        "unchanged": sum(first[i]["before"] == 0.0 for i in bad)}
    return None


def _updated(t: list[dict], facts: dict):
    bad = bad_first_step(t)
    facts["first_step"] = bad
    if bad is None:
        value = "모든 랭크에서 모든 파라미터가 같음"
    else:
        shown = ", ".join(bad["params"][:6]) + (" …" if len(bad["params"]) > 6 else "")
        value = (f"{OPT_NAMES[bad['opt']]}, 랭크 {bad['rank']}: {shown} — {len(bad['params'])}개 중 "
                 f"{bad['unchanged']}개가 스텝 전 값 그대로")
    return check_true("params_updated", bad is None, value,
                      "첫 step() 뒤 모든 랭크의 파라미터 하나하나가 torch DDP + 같은 옵티마이저의 한 스텝과 같다"
                      f"(최대 절대 차이 {TOLERANCE:g} 이하)")


def _state(t: list[dict], n: int):
    parts, ok = [], True
    for opt in t[0]["runs"]:
        held = [r["runs"][opt]["state_bytes"] for r in t]
        single = t[0]["runs"][opt]["single_state"]
        bound = sum(single) / n + max(single)
        ok = ok and max(held) <= bound
        parts.append(f"{OPT_NAMES[opt]} 랭크별 {held}바이트(한 프로세스 {sum(single):,}, 기준 ≤ {bound:,.0f})")
    found = any(r["runs"][opt]["state_bytes"] for r in t for opt in r["runs"])
    return check_true("state_divided", ok and found, "; ".join(parts) + ("" if found else
                      " — 어느 랭크에서도 옵티마이저 상태를 찾지 못함: 상태는 optimizer_cls로 만든 torch 옵티마이저의 "
                      "state에 있어야 잴 수 있다"),
                      "랭크마다 옵티마이저 상태(가진 torch 옵티마이저들의 state, 저장소 바이트)가 한 프로세스의 1/N에 "
                      "가장 큰 텐서 하나의 상태를 더한 것 이하다")


def _zero_grad(t: list[dict]):
    left = sorted({name for r in t for run in r["runs"].values() for name in run["grads_left"]})
    return check_true("zero_grad_clears", not left,
                      f"zero_grad() 뒤에도 그래디언트가 남은 파라미터: {', '.join(left[:6])}" if left else "모두 지워짐",
                      "zero_grad()가 모든 랭크에서 모든 파라미터의 그래디언트를 지운다(None 또는 0)")


def _groups(g: list[dict]):
    bad = next((r for r in g if r["lrs"] != r["expected_lrs"] or max(r["diffs"]) > TOLERANCE), None)
    r = bad or g[0]
    value = (f"param_groups의 lr {r['lrs']} (torch: {r['expected_lrs']}), K스텝 뒤 그룹별 차이 "
             f"[{r['diffs'][0]:.2e}, {r['diffs'][1]:.2e}]")
    return check_true("param_groups_honoured", bad is None, value,
                      "생성한 뒤 add_param_group으로 다른 lr의 그룹을 더해도, torch 옵티마이저에 같은 그룹을 준 DDP와 "
                      f"param_groups의 lr과 두 그룹의 파라미터가 같다(최대 절대 차이 {TOLERANCE:g} 이하)")


def class_checks(ranks: list[dict], j: int, params: dict) -> tuple[list, dict]:
    """The checks of a ``ShardedOptimizer`` (class ``j``) and the facts the report explains them with."""
    n = len(ranks)
    error = _first_error(ranks, j, PROBE_NAMES)
    mismatch = next((r["classes"][j]["mismatch"] for r in ranks if r["classes"][j]["mismatch"]), None)
    rec = {p: _records(ranks, j, p) for p in PROBE_NAMES}
    t, g = rec["train"], rec["groups"]
    facts: dict = {"grad_cause": None, "mismatch": mismatch, "first_step": None, "diffs": None, "calls": None}
    if t:
        facts["diffs"] = {opt: {k: max(r["runs"][opt]["diffs"][k] for r in t) for k in ("ddp", "single")}
                          for opt in t[0]["runs"]}
        first = t[0]["runs"]["sgd"]["steps"][0]
        facts["calls"] = {"where": "첫 step()", "ops": first["ops"], "bytes": first["bytes"]}
    makers = {
        "step_shares_params": lambda: _shares(t, sum(t[0]["numels"])),
        "replicas_identical": lambda: _replicas(t),
        "params_updated": lambda: _updated(t, facts),
        "state_divided": lambda: _state(t, n),
        "zero_grad_clears": lambda: _zero_grad(t),
        "param_groups_honoured": lambda: _groups(g),
        "matches_oracles": lambda: check_at_most(
            "matches_oracles", max(d for opt in facts["diffs"].values() for d in opt.values()), TOLERANCE,
            f"SGD와 AdamW로 {params['steps']}스텝 뒤 파라미터가 torch DDP + 같은 옵티마이저, 그리고 전역 배치로 "
            "학습한 단일 프로세스와 같다(최대 절대 차이)"),
    }

    def measured(name: str):
        probe = PROBE_OF[name]
        if rec[probe] is None or mismatch:
            return unmeasured(name, PROBE_NAMES[probe], mismatch)
        if n == 1 and name in NEEDS_TWO_RANKS:
            return not_applicable(name, "N=1이면 나눌 랭크도, 비교할 다른 랭크도 없다")
        return makers[name]()

    return leading_checks(error, mismatch) + [measured(name) for name in CHECKS[2:]], facts
