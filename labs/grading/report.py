"""The grader's report: every check of every class with its measured value, for a failure the most likely
cause and where to look (:mod:`~labs.grading.hints`), the warnings torch gave the reader's own calls, and a
launcher error (a deadlock, a dead rank) in the reader's words.
"""

from __future__ import annotations

from typing import Any

from ..errors import LabError, LabTimeoutError, RankCrashedError, RankFailedError
from ..result import LabResult, format_value
from .hints import CAUSES, HINTS_OF
from .summary import JUDGES

ORACLES = {"ddp": "DDP", "single": "단일"}  # 파라미터를 견준 기준의 이름
# 보고서 머리의 인터페이스 이름과, 모두 통과했을 때의 한 줄
TITLES = {"zero": "ZeRO-1 옵티마이저", "fsdp": "FSDP"}
PASSED = {"ddp": "실제 랭크에서 torch DDP와 같은 결과를 냅니다.",
          "zero": "실제 랭크에서 옵티마이저 상태를 나눠 가지면서 torch DDP + 같은 옵티마이저와 같은 결과를 냅니다.",
          "fsdp": "실제 랭크에서 가중치를 1/N씩 나눠 가지면서 단일 프로세스와 같은 결과를 냅니다."}


def _failed(result: LabResult, name: str) -> list[str]:
    """The failed checks of class ``name`` in the grader's order (the summary adds them in the order of diagnosis)."""
    return [key.removeprefix(f"{name}.") for key, c in result.checks.items() if key.startswith(f"{name}.") and not c.ok]


def failed_checks(result: LabResult, name: str) -> set[str]:
    return set(_failed(result, name))


def diagnosis(result: LabResult, name: str) -> str | None:
    """The first failing check of class ``name`` in the grader's order: the most likely cause."""
    return next(iter(_failed(result, name)), None)


def cause_text(cls: dict[str, Any], check: str) -> tuple[str, str]:
    """Why the check most likely failed and where to look: what the judge's records narrowed it down to
    (``causes``), else the check's own words."""
    if (cause := cls["causes"].get(check)) is not None:
        why, where = CAUSES[cls["kind"]][check][cause["key"]]
        return why.format(**cause), where.format(**cause)
    return HINTS_OF[cls["kind"]][check][1:]


def _facts_lines(cls: dict[str, Any], tolerance: float) -> list[str]:
    """The numbers under the checks: the parameter differences, the first step's collectives, the errors."""
    d, calls = cls["diffs"], cls.get("calls")
    diffs = ", ".join(f"{opt.upper()} " + " · ".join(f"vs {ORACLES[k]} {v:.2e}" for k, v in d[opt].items()) for opt in d or [])
    ops = ", ".join(f"{op} {count}번" for op, count in sorted(calls["ops"].items())) if calls else ""
    return ([f"파라미터 최대 차이: {diffs} (허용 {tolerance:g})"] if d else []) + \
        ([f"랭크 0의 {calls['where']}이 부른 집합 통신: {ops or '없음'}, {calls['bytes']:,}바이트"] if calls else []) + \
        [f"실행 중 예외 ({probe} 검사): {text}" for probe, text in cls["errors"].items()]


def class_report(result: LabResult, cls: dict[str, Any]) -> list[str]:
    """One class's part of the report."""
    name, kind = cls["name"], cls["kind"]
    head = f"채점: 클래스 {name}({TITLES.get(kind) or ('버킷' if cls['bucketed'] else '파라미터별')}) · " \
           f"랭크 N={result.world_size} ({result.backend})"
    lines, checks, cause = [head, "=" * len(head)], JUDGES[kind].checks, diagnosis(result, name)
    if cause == "runs_without_error":  # 예외가 먼저: 읽는 사람의 파일과 줄이 맨 앞에 온다
        lines.append(f"예외: {result.checks[f'{name}.runs_without_error'].value}")
    for check in checks:
        c = result.checks[f"{name}.{check}"]
        mark = "해당 없음" if not c.applicable else ("통과" if c.ok else "실패")
        measured = f" — 측정 {format_value(c.value)} (기준 {c.criterion()})" if c.applicable else ""
        lines.append(f"[{mark}] {HINTS_OF[kind][check][0]} ({check}){measured}")
        if not c.applicable:
            lines.append(f"        {c.description}")
    lines += _facts_lines(cls, result.data["tolerance"])
    if cause is None:
        return lines + [f"결과: 확인 {len(checks)}개 모두 통과했습니다. {PASSED[kind]}"]
    why, where = cause_text(cls, cause)
    return lines + [f"결과: 확인 {len(checks)}개 중 {len(failed_checks(result, name))}개 실패.",
                    f"가장 가능성 높은 원인 ({cause}): {why}", f"볼 곳: {where}"]


def report(result: LabResult) -> str:
    """The Korean report: every check, its measured value, and for a failure the cause and where to look; then
    the warnings torch gave the reader's own calls (a deprecated function, say): worth fixing, graded or not."""
    lines = [line for cls in result.data["classes"] for line in [*class_report(result, cls), ""]]
    warnings = result.data.get("warnings", [])
    lines += (["torch가 여러분의 코드에 낸 경고 (채점과 별개로 고칠 만한 것):"] if warnings else []) + [
        f"  - {w['where'][0]} {w['where'][1]}행 `{w['where'][2]}`: {w['category']}: {w['message']}" for w in warnings]
    return "\n".join(lines).rstrip()


def explain_error(err: LabError, timeout: float) -> str:
    """A launcher error in the reader's words: a deadlock, or an exception outside the probes."""
    if isinstance(err, LabTimeoutError):
        where = "".join(f"\n  - 랭크 {r}: " + (f"{err.places[r]} — " if r in err.places else "")
                        + err.where.get(r, "위치를 읽지 못함") for r in err.missing_ranks)
        return (f"채점이 제한 시간 {timeout:g}초 안에 끝나지 않아 모든 랭크를 멈췄습니다: 교착(deadlock)으로 보입니다."
                f"{where}\n한 랭크만 부르는 집합 통신(예: 랭크 0에서만 barrier/all_reduce)이나, 끝나지 않는 반복문이 "
                "없는지 보세요. 느린 기계라면 --timeout을 늘리세요.")
    if isinstance(err, RankCrashedError):
        where = f" 마지막으로 본 곳: {err.places[err.rank]}." if err.rank in err.places else ""
        return (f"채점 중 랭크 {err.rank}의 프로세스가 결과를 보내지 않고 끝났습니다(종료 코드 {err.exitcode}).{where} "
                "여러분의 코드에 os._exit()나 프로세스를 끝내는 호출이 없는지, 메모리가 모자라지 않은지 보세요.")
    if isinstance(err, RankFailedError):
        return f"랭크 {err.rank}에서 채점 중 예외가 났습니다: {err.traceback_text.strip().splitlines()[-1]}"
    return f"채점을 끝내지 못했습니다: {err}"
