"""Gradient accumulation that all-reduces on every micro-step: the DDP forwards with gradient sync on
between two optimizer steps, counted (and the All-Reduces the process group really ran in the profiled step)."""

from __future__ import annotations

from collections import Counter

from ..findings import Finding, finding, where
from .view import View


def check(view: View) -> list[Finding]:
    forwards = [e for e in view.events(0, "forward") if e["grad"]]
    steps = view.steps(0)
    per_step = Counter(e["step"] for e in forwards if e["step"] < steps)
    synced = Counter(e["step"] for e in forwards if e["step"] < steps and e["grad_sync"])
    wasteful = [s for s, k in sorted(per_step.items()) if k > 1 and synced[s] == k]
    if not wasteful:
        return []
    step = wasteful[0]
    k = per_step[step]
    site = next(e["site"] for e in forwards if e["step"] == step)
    profile = view.first(0, "profile")
    measured_ar = ""
    if profile is not None and profile["step_from"] in wasteful:
        measured_ar = (f" 프로세스 그룹이 스텝 {profile['step_to']}에서 실제로 한 All-Reduce: "
                       f"{profile['counts'].get('all_reduce', 0)}번.")
    measured = (f"스텝 {step + 1}까지의 마이크로 스텝 {k}개가 모두 동기화를 켠 채 순전파했습니다({where(site)}): 역전파마다 "
                f"그래디언트를 All-Reduce해 한 스텝에 {k}번 통신합니다(필요한 것은 마지막 한 번). 이런 스텝: "
                f"{len(wasteful)}/{steps}.{measured_ar}")
    fix = ("앞의 K−1개 마이크로 스텝은 `with model.no_sync():` 안에서 순전파와 역전파를 하고, 마지막 마이크로 스텝만 밖에서 "
           "하세요(그래디언트는 그대로 쌓이고 마지막 역전파가 한 번 평균합니다). 결과는 같고 통신은 K분의 1입니다.")
    return [finding("accumulation_sync", "그래디언트 누적이 마이크로 스텝마다 All-Reduce합니다(no_sync 없음)", [0], site,
                    measured, fix, microsteps=k, steps=len(wasteful),
                    all_reduce=profile["counts"].get("all_reduce") if profile else None)]
