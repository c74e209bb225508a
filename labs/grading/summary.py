"""The parent's summary of a grading run: each class judged by the judge of its interface (:data:`JUDGES`); a
file that could not be graded at all (its import, a class's shape) is one input error instead of checks; the
warnings torch gave the reader's calls on any rank, once each.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypedDict

from ..result import Check, Summary, check_true
from . import fsdp_judge, judge, zero_judge
from .verdicts import TOLERANCE, Judge, Record, judge_class

JUDGES: dict[str, Judge] = {"ddp": judge.JUDGE, "zero": zero_judge.JUDGE, "fsdp": fsdp_judge.JUDGE}  # 인터페이스마다


def input_error(ranks: list[Record]) -> str | None:
    """Why the file could not be graded at all (exit 2): its import, or a class's shape."""
    for r in ranks:
        if e := r["import_error"]:
            advice = ("sys.exit()·exit()·quit()는 랭크를 끝내 버립니다. 파일 맨 위에서 부르지 말고 "
                      "if __name__ == \"__main__\": 아래로 옮기세요." if e["kind"] in ("SystemExit", "KeyboardInterrupt")
                      else "파일 맨 위(함수와 클래스 밖)에서 실행되는 코드를 확인하세요.")
            return (f"파일을 불러오는(import) 동안 랭크 {r['rank']}에서 {e['kind']}이(가) 났습니다: {e['text']}\n"
                    f"채점기는 랭크마다 이 파일을 불러옵니다. {advice}")
    return next((cls["input_error"] for cls in ranks[0]["classes"] if cls["input_error"]), None)


class GradeData(TypedDict):
    """The summary data of the 'grade' lab."""

    classes: list[dict[str, Any]]
    tolerance: float
    input_error: str | None
    warnings: list[Record]  # torch가 읽는 사람의 호출에 낸 경고 (어느 랭크에서든, 하나씩)


def summarize(ranks: list[Record], backend: str, params: Mapping[str, Any]) -> Summary[GradeData]:
    warnings = list({(w["category"], w["message"], w["where"][1]): w for r in ranks for w in r["warnings"]}.values())
    problem = input_error(ranks)
    if problem is not None:
        failed = [check_true(f"{name}.runs_without_error", False, problem, "파일을 불러와 클래스를 만들 수 있다")
                  for name in params["classes"].split()]
        return Summary({"classes": [], "tolerance": TOLERANCE, "input_error": problem, "warnings": warnings}, failed)
    checks: list[Check] = []
    classes = []
    for j, first in enumerate(ranks[0]["classes"]):
        mine, facts = judge_class(JUDGES[first["kind"]], ranks, j, params)
        checks += [dataclasses.replace(c, name=f"{first['name']}.{c.name}") for c in mine]
        errors: dict[str, str] = {}
        for r in ranks:
            for probe, text in r["classes"][j]["errors"].items():
                errors.setdefault(probe, f"랭크 {r['rank']}: {text}")
        classes.append({"name": first["name"], "kind": first["kind"], "bucketed": first["bucketed"], "errors": errors,
                        **facts, "checks": [c.name for c in mine]})
    return Summary({"classes": classes, "tolerance": TOLERANCE, "input_error": None, "warnings": warnings}, checks)
