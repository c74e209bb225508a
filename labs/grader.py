"""Grade a reader's own DDP class on real ranks: ``python -m labs grade my_ddp.py`` or ``labs.grade(path)``.

The file is checked once here from its syntax tree, before any rank starts (:mod:`labs.grading.source`:
it exists, its path and size are sane, it parses, it defines the classes, their constructors take
``(module)`` or ``(module, bucket_cap_mb)``; chapter 13's ``ShardedOptimizer(params, optimizer_cls, **kwargs)``
and ``FullyShardedDP(module, compute_dtype=None)`` are graded against their own interfaces, with the
words of :mod:`labs.grading.hints`); it is never executed in this process. The ``grade`` lab
(:mod:`labs.lessons.grade`) then imports and runs it inside N real ranks under the time limit, and
:func:`report` explains each check: an exception in the reader's code first, with its file and line.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from . import launch
from .errors import LabConfigError, LabError, LabTimeoutError, RankCrashedError, RankFailedError
from .grading.hints import FSDP_CAUSES, FSDP_HINTS, ZERO_HINTS
from .grading.judge import checks_of
from .grading.source import DEFAULT_CLASSES, GradeInputError, class_names, default_classes, exit_calls, kind_of
from .lessons.grade import REFERENCE
from .registry import get_lab
from .result import LabResult, _fmt

__all__ = ["DEFAULT_CLASSES", "GradeInputError", "diagnosis", "explain_error", "failed_checks", "grade", "main",
           "report"]

DEFAULT_TIMEOUT = 30.0

# 확인 항목마다: 무엇을 보는지, 실패했을 때 가장 가능성 높은 원인, 고칠 곳
HINTS = {
    "runs_without_error": ("채점 중 예외 없이 실행",
                           "여러분의 코드가 예외를 냈습니다. 위의 파일:행이 그 자리입니다. 다른 확인은 이 예외 때문에 "
                           "측정하지 못했거나 함께 실패했을 수 있습니다.",
                           "예외가 난 줄"),
    "same_collectives_on_ranks": ("모든 랭크가 같은 집합 통신을 같은 순서로",
                                  "랭크마다 부르는 집합 통신이 다릅니다(버킷 크기나 순서를 랭크에 따라 다르게 계산했거나, 한 "
                                  "랭크만 부르는 호출). 그대로 두면 서로 다른 크기의 버퍼를 더하거나, 한 랭크가 오지 않을 "
                                  "호출을 기다리며 멈춥니다.",
                                  "__init__의 버킷 나누기: 랭크 번호, 난수, 역전파 순서처럼 랭크마다 다를 수 있는 값에 기대지 마세요"),
    "broadcast_at_construction": ("생성할 때 랭크 0의 파라미터를 나눠 주기",
                                  "생성자에서 파라미터를 랭크 0에서 브로드캐스트하지 않았습니다. 랭크마다 다른 초기값으로 "
                                  "출발하면 같은 평균 그래디언트로도 복제본이 끝까지 다릅니다.",
                                  "__init__: 모든 파라미터에 dist.broadcast(tensor, src=0)"),
    "buffers_broadcast": ("생성할 때 랭크 0의 버퍼도 나눠 주기",
                          "파라미터는 맞췄지만 버퍼(BatchNorm의 running_mean·running_var 등)를 브로드캐스트하지 않았습니다. "
                          "평가 모드의 출력이 랭크마다 달라집니다. 위에 이름이 나온 버퍼입니다.",
                          "__init__: module.buffers()도 dist.broadcast(buffer, src=0)"),
    "handles_waited": ("돌아올 때 모든 통신이 끝나 있기",
                       "finish_gradient_synchronization()이 돌아온 뒤에도 p.grad가 바뀌었습니다: 끝나지 않은 All-Reduce가 "
                       "남아 있었습니다(핸들이나 퓨처를 기다리지 않음, 또는 .then()으로 이은 퓨처를 기다리지 않음). "
                       "옵티마이저가 합이 도착하기 전의 값을 씁니다. 실행마다 결과가 달라지는 경쟁 상태입니다.",
                       "finish_gradient_synchronization(): 모든 핸들(또는 마지막에 이은 퓨처)에 .wait()를 부른 뒤 돌아오세요"),
    "grads_averaged": ("finish 직후 p.grad = 전역 배치의 평균 그래디언트", "", ""),
    "reduced_during_backward": ("그래디언트가 준비되면 역전파 중에 통신 시작",
                                "역전파가 끝난 뒤에야 All-Reduce를 시작했습니다. 훅이 불리지 않거나(걸지 않음, 잘못된 텐서에 "
                                "걸음) 모든 통신을 finish_gradient_synchronization()에서 하고 있습니다.",
                                "파라미터마다 p.register_post_accumulate_grad_hook(hook)처럼 그래디언트가 준비될 때 불리는 "
                                "훅에서 All-Reduce를 시작하세요"),
    "collectives_per_iteration": ("반복마다의 All-Reduce 배치",
                                  "All-Reduce의 배치가 맞지 않습니다(측정값에 이유가 있습니다). 반복마다 호출이 늘어나면 훅을 "
                                  "반복마다 다시 걸고 있는 것이고, 원소가 두 번 보내지면 같은 텐서를 두 버킷에 넣은 것입니다.",
                                  "훅과 버킷은 __init__에서 한 번만 만들고, 버킷은 bytes(numel × element_size)로 cap과 비교"),
    "launch_order": ("역전파와 통신의 겹침",
                     "첫 All-Reduce가 모든 그래디언트가 준비된 뒤에야 시작했습니다. 버킷을 순전파 순서로 채우면 0번 버킷에 "
                     "맨 앞 층이 들어가는데, 그 그래디언트는 역전파의 맨 마지막에 나옵니다. 결과는 맞아도 겹침이 사라집니다.",
                     "버킷은 reversed(파라미터 목록) 순서로 채우고, 훅에서 버킷이 차는 즉시 시작하세요"),
    "frozen_untouched": ("얼린 파라미터는 통신도 변경도 없이",
                         "requires_grad=False인 파라미터를 통신 대상에 넣었거나 그 값을 바꿨습니다.",
                         "통신할 파라미터 목록: [p for p in module.parameters() if p.requires_grad]"),
    "tied_reduced_once": ("공유 가중치는 한 번만",
                          "두 층이 공유하는 가중치를 두 번 보냈습니다. 층마다 파라미터를 모으면 같은 텐서가 두 번 나옵니다.",
                          "module.parameters()는 같은 텐서를 한 번만 냅니다: 층별 목록이나 named_parameters(remove_duplicate=False)를 쓰지 마세요"),
    "matches_oracles": ("torch DDP·단일 프로세스와 같은 결과",
                        "여러 스텝 뒤 파라미터가 torch DDP, 전역 배치 단일 프로세스와 다릅니다. 위의 다른 실패가 있다면 그것부터 "
                        "고치세요.",
                        "finish_gradient_synchronization(): 기다린 뒤 p.grad를 world_size로 나누기"),
}

# 인터페이스마다(labs.grading.source.kind_of) 확인의 설명: 예외는 어느 인터페이스든 같은 말로
HINTS_OF = {"ddp": HINTS, "zero": {"runs_without_error": HINTS["runs_without_error"], **ZERO_HINTS},
            "fsdp": {"runs_without_error": HINTS["runs_without_error"], **FSDP_HINTS}}
ORACLES = {"ddp": "DDP", "single": "단일"}  # 파라미터를 견준 기준의 이름
# 보고서 머리의 인터페이스 이름과, 모두 통과했을 때의 한 줄
TITLES = {"zero": "ZeRO-1 옵티마이저", "fsdp": "FSDP"}
PASSED = {"ddp": "실제 랭크에서 torch DDP와 같은 결과를 냅니다.",
          "zero": "실제 랭크에서 옵티마이저 상태를 나눠 가지면서 torch DDP + 같은 옵티마이저와 같은 결과를 냅니다.",
          "fsdp": "실제 랭크에서 가중치를 1/N씩 나눠 가지면서 단일 프로세스와 같은 결과를 냅니다."}

# grads_averaged가 실패했을 때 그래디언트가 무엇이었는지(labs.grading.judge.grad_cause)에 따른 원인과 고칠 곳
GRAD_CAUSES = {
    "missing": ("finish 뒤 p.grad가 None입니다: 그래디언트를 지웠거나 새 텐서로 바꿔 끼웠습니다.",
                "p.grad를 None으로 두지 말고 평균을 p.grad에 제자리(in-place)로 쓰세요"),
    "not_reduced": ("p.grad가 이 랭크 자신의 그래디언트 그대로입니다(또는 그것을 N으로 나눈 값): All-Reduce가 p.grad에 닿지 "
                    "않았습니다. p.data(파라미터 값)를 보냈거나, register_hook이 받은 텐서처럼 p.grad가 아닌 텐서를 보냈거나, "
                    "이 파라미터들에 훅이 없습니다.",
                    "훅에서 p.grad를 All-Reduce하세요(p.register_post_accumulate_grad_hook). 위에 나온 파라미터가 일부뿐이면 "
                    "그 파라미터들이 훅이나 버킷에서 빠졌습니다"),
    "not_divided": ("p.grad가 평균의 N배입니다: All-Reduce는 합만 구하는데 N으로 나누지 않았습니다(SGD의 스텝이 N배).",
                    "finish_gradient_synchronization(): 기다린 뒤 p.grad를 world_size로 나누기"),
    "divided_twice": ("p.grad가 평균을 한 번 더 N으로 나눈 값입니다: 두 번 나눴습니다(보내기 전에 한 번, 받은 뒤에 한 번 등).",
                      "나누기는 합을 받은 뒤 한 번만"),
    "stale_handles": ("첫 반복은 맞고 그 뒤 반복에서 p.grad가 평균의 1/N^k입니다: 지난 반복의 핸들 목록을 비우지 않아 "
                      "finish가 예전 항목까지 다시 나눕니다.",
                      "finish_gradient_synchronization() 끝에서 핸들 목록을 비우세요(self.pending.clear())"),
    "stale": ("p.grad가 지난 반복의 평균 그래디언트입니다: 버킷 버퍼에 이번 그래디언트를 복사하지 않았거나, 지난 반복의 결과를 "
              "되돌려 썼습니다.",
              "훅에서 이번 p.grad를 버퍼에 복사하고, 기다린 뒤 버퍼에서 p.grad로 되돌려 쓰세요"),
    "wrong_op": ("p.grad가 랭크들의 그래디언트를 원소마다 {op}로 모은 값(또는 그것을 N으로 나눈 값)입니다: All-Reduce의 op가 "
                 "합(SUM)이 아닙니다. 평균은 합을 N으로 나눈 것입니다.",
                 "dist.all_reduce(tensor)의 op를 기본값 dist.ReduceOp.SUM으로 두고, 받은 뒤 N으로 나누세요"),
    "wrong": ("p.grad가 평균 그래디언트와 다르고, 알려진 어느 모양(N배, 1/N, 이 랭크 것, 지난 반복)과도 맞지 않습니다.",
              "버퍼의 어느 조각이 어느 파라미터인지(순서, view 모양)를 확인하세요"),
}


def grade(path: str | Path, classes=None, nproc: int = 2, backend: str = "auto",
          timeout: float = DEFAULT_TIMEOUT, **params) -> LabResult:
    """Run the checks on ``nproc`` real ranks; raise :class:`GradeInputError` for a bad file or class.

    ``classes`` is a name, several names separated by spaces, or a list of names (repeats are dropped).
    """
    names = class_names(classes) or default_classes(path)
    with tempfile.TemporaryDirectory(prefix="labs-grade-") as trace_dir:
        try:
            # 파일과 클래스는 grade 실습의 validate가 랭크를 띄우기 전에 구문 트리로 한 번 검사한다
            result = launch.run("grade", nproc, backend, timeout, path=_absolute(path), classes=" ".join(names),
                                trace_dir=trace_dir, **params)
        except (RankCrashedError, LabTimeoutError) as err:
            raise _explained(err, path, trace_dir) from None
    if result.data["input_error"]:
        raise GradeInputError(result.data["input_error"])
    return result


def _absolute(path: str | Path) -> str:
    # 랭크는 포크 서버의 작업 폴더에서 시작하므로, 상대 경로는 지금 폴더 기준의 절대 경로로 넘긴다
    return str(Path(path).absolute())


def _rank_states(trace_dir: str) -> dict[int, dict]:
    states = {}
    for file in Path(trace_dir).glob("rank*.json"):
        try:
            states[int(file.stem[4:])] = json.loads(file.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue
    return states


def _place(frame: list) -> str:
    file, line, fn, code = frame
    return f"{Path(file).name} {line}행 {fn}()" + (f": {code.strip()}" if code.strip() else "")


def _explained(err: LabError, path: str | Path, trace_dir: str) -> LabError:
    """A dead or stuck rank in the reader's words: at import it is bad input (exit 2); later, a deadlock
    report that names the reader's own frame first, then the grader's."""
    states = _rank_states(trace_dir)
    mine = Path(path).resolve()
    name = Path(path).name
    ranks = [err.rank] if isinstance(err, RankCrashedError) else err.missing_ranks
    importing = [r for r in ranks if states.get(r, {}).get("phase") == "import"]
    if importing:
        r = importing[0]
        frames = [f for f in states[r]["frames"] if Path(f[0]).resolve() == mine]
        if isinstance(err, RankCrashedError):
            lines = exit_calls(path)
            where = f" {', '.join(f'{line}행' for line in lines)}의 프로세스를 끝내는 호출(os._exit 등)을 보세요." if lines else ""
            return GradeInputError(f"{name}을(를) 불러오는(import) 동안 랭크 {r}의 프로세스가 끝났습니다(종료 코드 "
                                   f"{err.exitcode}).{where} 파일 맨 위(함수와 클래스 밖)에서 프로세스를 끝내지 마세요.")
        where = f" 마지막으로 본 곳: {_place(frames[-1])}." if frames else ""
        return GradeInputError(f"{name}을(를) 불러오는(import) 동안 제한 시간 {err.timeout:g}초가 지났습니다: 파일 맨 위의 "
                               f"코드가 끝나지 않습니다(무한 루프나 입력 기다리기).{where} 그 코드를 함수 안이나 "
                               "if __name__ == \"__main__\": 아래로 옮기세요.")
    err.places = {}
    for r, state in states.items():
        reader = [f for f in state["frames"] if Path(f[0]).resolve() == mine]
        grader = [f for f in state["frames"] if "/labs/" in f[0] and Path(f[0]).resolve() != mine]
        parts = ([f"여러분의 코드 {_place(reader[-1])}"] if reader else []) + \
                ([f"채점기 {_place(grader[-1])}"] if grader else [])
        if parts:
            err.places[r] = " ← ".join(parts)
    return err


def _kind(result: LabResult, name: str) -> str:
    """The interface class ``name`` was graded against (by its name when the file could not be graded)."""
    return next((c["kind"] for c in result.data["classes"] if c["name"] == name), kind_of(name))


def diagnosis(result: LabResult, name: str) -> str | None:
    """The first failing check of class ``name`` in the grader's order: the most likely cause."""
    for check in checks_of(_kind(result, name)):
        c = result.checks.get(f"{name}.{check}")
        if c is not None and not c.ok:
            return check
    return None


def failed_checks(result: LabResult, name: str) -> set[str]:
    return {c for c in checks_of(_kind(result, name))
            if f"{name}.{c}" in result.checks and not result.checks[f"{name}.{c}"].ok}


def cause_text(cls: dict, check: str) -> tuple[str, str]:
    """Why the check most likely failed and where to look (for grads_averaged: what the gradients were)."""
    cause = cls["grad_cause"]
    if cls["kind"] == "fsdp" and check == "grads_averaged" and cause:
        return FSDP_CAUSES[cause["cause"]]
    if check == "grads_averaged" and cause:
        if cause["cause"] == "not_reduced" and not cause["all"]:
            return (f"이 파라미터들만 p.grad가 이 랭크 자신의 그래디언트 그대로입니다: {', '.join(cause['params'])}. "
                    "나머지는 평균이 맞으므로, 이 파라미터들이 훅이나 버킷에서 빠졌습니다.",
                    "훅을 거는 목록과 버킷에 넣는 목록이 학습하는 모든 파라미터를 담는지 보세요")
        why, where = GRAD_CAUSES[cause["cause"]]
        return why.format(op=cause.get("op")), where
    _, why, where = HINTS_OF[cls["kind"]][check]
    return why, where


def report(result: LabResult) -> str:
    """The Korean report: every check, its measured value, and for a failure the cause and where to look."""
    lines = []
    for cls in result.data["classes"]:
        name, kind = cls["name"], cls["kind"]
        title = TITLES.get(kind) or ("버킷" if cls["bucketed"] else "파라미터별")
        head = f"채점: 클래스 {name}({title}) · 랭크 N={result.world_size} ({result.backend})"
        checks, hints = checks_of(kind), HINTS_OF[kind]
        lines += [head, "=" * len(head)]
        cause = diagnosis(result, name)
        if cause == "runs_without_error":  # 예외가 먼저: 읽는 사람의 파일과 줄이 맨 앞에 온다
            lines.append(f"예외: {result.checks[f'{name}.runs_without_error'].value}")
        for check in checks:
            c = result.checks[f"{name}.{check}"]
            mark = "해당 없음" if not c.applicable else ("통과" if c.ok else "실패")
            measured = f" — 측정 {_fmt(c.value)} (기준 {c.criterion()})" if c.applicable else ""
            lines.append(f"[{mark}] {hints[check][0]} ({check}){measured}")
            if not c.applicable:
                lines.append(f"        {c.description}")
        if cls["diffs"]:
            d = cls["diffs"]
            lines.append("파라미터 최대 차이: " + ", ".join(
                f"{opt.upper()} " + " · ".join(f"vs {ORACLES[k]} {v:.2e}" for k, v in d[opt].items()) for opt in d)
                + f" (허용 {result.data['tolerance']:g})")
        if cls.get("calls"):
            calls = cls["calls"]
            lines.append(f"랭크 0의 {calls['where']}이 부른 집합 통신: " + (", ".join(
                f"{op} {count}번" for op, count in sorted(calls["ops"].items())) or "없음") + f", {calls['bytes']:,}바이트")
        for probe, text in cls["errors"].items():
            lines.append(f"실행 중 예외 ({probe} 검사): {text}")
        if cause is None:
            lines.append(f"결과: 확인 {len(checks)}개 모두 통과했습니다. {PASSED[kind]}")
        else:
            why, where = cause_text(cls, cause)
            lines += [f"결과: 확인 {len(checks)}개 중 {len(failed_checks(result, name))}개 실패.",
                      f"가장 가능성 높은 원인 ({cause}): {why}", f"볼 곳: {where}"]
        lines.append("")
    return "\n".join(lines).rstrip()


def explain_error(err: LabError, timeout: float) -> str:
    """A launcher error in the reader's words: a deadlock, or an exception outside the probes."""
    if isinstance(err, LabTimeoutError):
        places = getattr(err, "places", {})
        where = "".join(f"\n  - 랭크 {r}: " + (f"{places[r]} — " if r in places else "")
                        + err.where.get(r, "위치를 읽지 못함") for r in err.missing_ranks)
        return (f"채점이 제한 시간 {timeout:g}초 안에 끝나지 않아 모든 랭크를 멈췄습니다: 교착(deadlock)으로 보입니다."
                f"{where}\n한 랭크만 부르는 집합 통신(예: 랭크 0에서만 barrier/all_reduce)이나, 끝나지 않는 반복문이 "
                "없는지 보세요. 느린 기계라면 --timeout을 늘리세요.")
    if isinstance(err, RankCrashedError):
        return (f"채점 중 랭크 {err.rank}의 프로세스가 결과를 보내지 않고 끝났습니다(종료 코드 {err.exitcode}). "
                "여러분의 코드에 os._exit()나 프로세스를 끝내는 호출이 없는지, 메모리가 모자라지 않은지 보세요.")
    if isinstance(err, RankFailedError):
        last = err.traceback_text.strip().splitlines()[-1]
        return f"랭크 {err.rank}에서 채점 중 예외가 났습니다: {last}"
    return f"채점을 끝내지 못했습니다: {err}"


def main(args) -> int:
    """``python -m labs grade [PATH] [--class NAME] [--nproc N] [--timeout S]``; returns the exit code
    (without a path: the reference ``labs/ddp/miniddp.py``)."""
    path = getattr(args, "path", None) or str(REFERENCE)
    try:
        params = dict(get_lab("grade").parse_params(args.param))
        if launch.in_torchrun():  # torchrun이 띄운 랭크 하나로 실행: 랭크 0이 모두의 결과를 보고한다
            names = class_names(args.classes) or default_classes(path)
            result = launch.run_in_place("grade", args.backend, args.timeout, path=_absolute(path),
                                         classes=" ".join(names), **params)
            if result is None:
                return 0
            if result.data["input_error"]:
                raise GradeInputError(result.data["input_error"])
        else:
            result = grade(path, args.classes or None, args.nproc, args.backend, args.timeout, **params)
    except LabConfigError as err:
        print(f"오류: {err}", file=sys.stderr)
        return 2
    except LabError as err:
        print(explain_error(err, args.timeout), file=sys.stderr)
        return 3
    print(report(result))
    return 0 if result.ok else 1
