"""Grade a reader's own DDP class on real ranks: ``python -m labs grade my_ddp.py`` or ``labs.grade(path)``.

The file is checked once here, before any rank starts (it exists, compiles, defines the class, the
class is an ``nn.Module`` built as ``cls(module)`` or ``cls(module, bucket_cap_mb)`` with a
``finish_gradient_synchronization()`` method); a problem is a Korean :class:`GradeInputError`.
Then the ``grade`` lab (:mod:`labs.lessons.grade`) runs the class on N real ranks, with a short
time limit so that a deadlock ends in a named timeout, and :func:`report` explains each check.
"""

from __future__ import annotations

import difflib
import inspect
import sys
from pathlib import Path

from torch import nn

from . import launch
from .errors import LabConfigError, LabError, LabTimeoutError, RankFailedError
from .lessons.grade import CHECKS, load_class
from .registry import get_lab
from .result import LabResult, _fmt

DEFAULT_CLASSES = ("PerParameterDDP", "BucketedDDP")
DEFAULT_TIMEOUT = 30.0

# 확인 항목마다: 무엇을 보는지, 실패했을 때 가장 가능성 높은 원인, 고칠 곳
HINTS = {
    "broadcast_at_construction": ("생성할 때 랭크 0의 파라미터를 나눠 주기",
                                  "생성자에서 파라미터(와 버퍼)를 랭크 0에서 브로드캐스트하지 않았습니다. 랭크마다 다른 초기값으로 "
                                  "출발하면 같은 평균 그래디언트로도 복제본이 끝까지 다릅니다.",
                                  "__init__: 모든 파라미터와 버퍼에 dist.broadcast(tensor, src=0)"),
    "same_collectives_on_ranks": ("모든 랭크가 같은 All-Reduce를 같은 순서로",
                                  "랭크마다 버킷 배치가 다릅니다(버킷 크기나 순서를 랭크에 따라 다르게 계산). 그대로 두면 "
                                  "서로 다른 크기의 버퍼를 더하거나, 한 랭크가 오지 않을 호출을 기다리며 멈춥니다.",
                                  "__init__의 버킷 나누기: 랭크 번호, 난수, 역전파 순서처럼 랭크마다 다를 수 있는 값에 기대지 마세요"),
    "hooks_after_accumulation": ("그래디언트 누적이 끝난 뒤의 훅",
                                 "tensor.register_hook()의 훅은 그래디언트가 p.grad에 누적되기 전에 불립니다. 그때 p.grad는 "
                                 "아직 이번 그래디언트가 아니고, 훅이 받은 텐서는 autograd가 따로 복사해 p.grad에 넣습니다.",
                                 "훅 등록: p.register_post_accumulate_grad_hook(hook)을 쓰고, 훅 안에서 p.grad를 보내세요"),
    "handles_waited": ("비동기 핸들을 모두 기다리기",
                       "dist.all_reduce(..., async_op=True)가 돌려준 핸들을 기다리지 않았습니다(또는 비동기 호출이 없습니다). "
                       "기다리지 않으면 합이 도착하기 전의 값을 나누고 옵티마이저가 씁니다. 결과가 실행마다 달라질 수 있습니다.",
                       "finish_gradient_synchronization(): 모든 핸들에 .wait()를 부른 뒤 N으로 나누세요"),
    "collectives_per_iteration": ("반복마다의 All-Reduce 횟수",
                                  "All-Reduce 횟수가 기대와 다릅니다. 반복마다 늘어나면 훅을 반복마다 다시 걸고 있는 것이고, "
                                  "버킷 수가 다르면 버킷을 나누는 규칙(역순으로 채우고 크기가 cap에 이르면 닫기)을 확인하세요.",
                                  "훅은 __init__에서 한 번만 걸고, 버킷 나누기는 bucket_cap_mb 규칙대로"),
    "launch_order": ("역전파와 통신의 겹침",
                     "첫 All-Reduce가 모든 그래디언트가 준비된 뒤에야 시작했습니다. 버킷을 순전파 순서로 채우면 0번 버킷에 "
                     "맨 앞 층이 들어가는데, 그 그래디언트는 역전파의 맨 마지막에 나옵니다. 결과는 맞아도 겹침이 사라집니다.",
                     "버킷은 reversed(파라미터 목록) 순서로 채우고, 훅에서 버킷이 차는 즉시 시작하세요"),
    "frozen_untouched": ("얼린 파라미터는 통신도 변경도 없이",
                         "requires_grad=False인 파라미터를 통신 대상에 넣었거나(훅을 걸 수 없어 오류가 나기도 합니다) 그 값을 바꿨습니다.",
                         "통신할 파라미터 목록: [p for p in module.parameters() if p.requires_grad]"),
    "tied_reduced_once": ("공유 가중치는 한 번만",
                          "두 층이 공유하는 가중치를 두 번 보냈습니다. 층마다 파라미터를 모으면 같은 텐서가 두 번 나옵니다.",
                          "module.parameters()는 같은 텐서를 한 번만 냅니다: 층별 목록이나 named_parameters(remove_duplicate=False)를 쓰지 마세요"),
    "matches_oracles": ("torch DDP·단일 프로세스와 같은 결과",
                        "여러 스텝 뒤 파라미터가 torch DDP, 전역 배치 단일 프로세스와 다릅니다. 가장 흔한 원인은 합을 N으로 "
                        "나누지 않은 것입니다(SGD의 스텝이 N배). 위의 다른 실패가 있다면 그것부터 고치세요.",
                        "finish_gradient_synchronization(): 기다린 뒤 p.grad를 world_size로 나누기"),
}


class GradeInputError(LabConfigError):
    """The file or class cannot be graded (Korean message, exit 2)."""


def validate(path: str | Path, classes: list[str] | None = None) -> None:
    """Check the file and classes once, before spawning (the ``grade`` lab's ``validate``)."""
    file = Path(path)
    if not file.is_file():
        raise GradeInputError(f"채점할 파일이 없습니다: {str(path)!r}. 경로를 확인하세요 "
                              "(노트북에서는 %%writefile로 먼저 파일을 만드세요).")
    source = file.read_text(encoding="utf-8", errors="replace")
    try:
        compile(source, str(file), "exec")
    except SyntaxError as err:
        line = (err.text or "").rstrip()
        raise GradeInputError(f"{file.name} {err.lineno}행에 문법 오류가 있습니다: {err.msg}\n    {line}\n"
                              "이 줄을 고친 뒤 다시 채점하세요.") from None
    names = list(classes) if classes else default_classes(file)
    for name in names:
        _check_class(file, name)


def default_classes(path: str | Path) -> list[str]:
    """The classes graded when none are named: those of ``DEFAULT_CLASSES`` the file defines."""
    file = Path(path)
    try:
        found = _module_classes(file)
    except (OSError, SyntaxError, ValueError):
        return list(DEFAULT_CLASSES)  # 없는 파일, 문법 오류는 validate가 한국어 오류로 알린다
    names = [n for n in DEFAULT_CLASSES if n in found]
    if not names:
        raise GradeInputError(f"{file.name}에 {' 또는 '.join(DEFAULT_CLASSES)} 클래스가 없습니다. "
                              "채점할 클래스 이름을 --class NAME(파이썬: classes=[...])으로 알려 주세요.")
    return names


def _check_class(file: Path, name: str) -> None:
    try:
        cls = load_class(str(file), name)
    except AttributeError:
        found = _module_classes(file)
        close = difflib.get_close_matches(name, found, n=1)
        hint = f" 혹시 '{close[0]}'인가요?" if close else ""
        raise GradeInputError(f"{file.name}에 클래스 {name!r}가 없습니다.{hint} 이 파일의 클래스: "
                              f"{', '.join(found) or '(없음)'}") from None
    except Exception as err:
        raise GradeInputError(f"{file.name}을(를) 불러오다가 오류가 났습니다: {type(err).__name__}: {err}") from None
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise GradeInputError(f"{name}은(는) torch.nn.Module을 상속한 클래스여야 합니다 "
                              f"(class {name}(nn.Module): ...).")
    if not callable(getattr(cls, "finish_gradient_synchronization", None)):
        raise GradeInputError(f"{name}에 finish_gradient_synchronization(self) 메서드가 없습니다. "
                              "backward() 뒤, optimizer.step() 전에 부를 이 메서드가 그래디언트 평균을 마무리합니다.")
    params = list(inspect.signature(cls).parameters.values())
    required = [p.name for p in params if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    if not params or params[0].kind not in (params[0].POSITIONAL_ONLY, params[0].POSITIONAL_OR_KEYWORD) \
            or any(r not in (params[0].name, "bucket_cap_mb") for r in required):
        shown = ", ".join(p.name for p in params)
        raise GradeInputError(f"{name}의 생성자는 {name}(module) 또는 {name}(module, bucket_cap_mb)여야 합니다. "
                              f"지금 받는 인자: ({shown})")


def _module_classes(file: Path) -> list[str]:
    import ast

    tree = ast.parse(file.read_text(encoding="utf-8", errors="replace"))
    return [node.name for node in tree.body if isinstance(node, ast.ClassDef)]


def grade(path: str | Path, classes: list[str] | None = None, nproc: int = 2, backend: str = "auto",
          timeout: float = DEFAULT_TIMEOUT, **params) -> LabResult:
    """Run the checks on ``nproc`` real ranks; raise :class:`GradeInputError` for a bad file or class."""
    names = list(classes) if classes else default_classes(path)
    # 파일과 클래스는 grade 실습의 validate가 랭크를 띄우기 전에 한 번 검사한다
    return launch.run("grade", nproc, backend, timeout, path=_absolute(path), classes=" ".join(names), **params)


def _absolute(path: str | Path) -> str:
    # 랭크는 포크 서버의 작업 폴더에서 시작하므로, 상대 경로는 지금 폴더 기준의 절대 경로로 넘긴다
    return str(Path(path).absolute())


def diagnosis(result: LabResult, name: str) -> str | None:
    """The first failing check of class ``name`` in the grader's order: the most likely cause."""
    for check in CHECKS:
        c = result.checks.get(f"{name}.{check}")
        if c is not None and not c.ok:
            return check
    return None


def failed_checks(result: LabResult, name: str) -> set[str]:
    return {c for c in CHECKS if not result.checks[f"{name}.{c}"].ok}


def report(result: LabResult) -> str:
    """The Korean report: every check, its measured value, and for a failure the cause and where to look."""
    lines = []
    for cls in result.data["classes"]:
        name = cls["name"]
        head = (f"채점: 클래스 {name}({'버킷' if cls['bucketed'] else '파라미터별'}) · "
                f"랭크 N={result.world_size} ({result.backend})")
        lines += [head, "=" * len(head)]
        for check in CHECKS:
            c = result.checks[f"{name}.{check}"]
            mark = "해당 없음" if not c.applicable else ("통과" if c.ok else "실패")
            measured = f" — 측정 {_fmt(c.value)} (기준 {c.criterion()})" if c.applicable else ""
            lines.append(f"[{mark}] {HINTS[check][0]} ({check}){measured}")
            if not c.applicable:
                lines.append(f"        {c.description}")
        if cls["diffs"]:
            d = cls["diffs"]
            lines.append("파라미터 최대 차이: " + ", ".join(
                f"{opt.upper()} vs DDP {d[opt]['ddp']:.2e} · vs 단일 {d[opt]['single']:.2e}" for opt in d)
                + f" (허용 {result.data['tolerance']:g})")
        for probe, text in cls["errors"].items():
            lines.append(f"실행 중 예외 ({probe} 검사): {text}")
        cause = diagnosis(result, name)
        if cause is None:
            lines.append(f"결과: 확인 {len(CHECKS)}개 모두 통과했습니다. 실제 랭크에서 torch DDP와 같은 결과를 냅니다.")
        else:
            _, why, where = HINTS[cause]
            lines += [f"결과: 확인 {len(CHECKS)}개 중 {len(failed_checks(result, name))}개 실패.",
                      f"가장 가능성 높은 원인 ({cause}): {why}", f"볼 곳: {where}"]
        lines.append("")
    return "\n".join(lines).rstrip()


def explain_error(err: LabError, timeout: float) -> str:
    """A launcher error in the reader's words: a deadlock, or an exception outside the probes."""
    if isinstance(err, LabTimeoutError):
        where = "".join(f"\n  - 랭크 {r}: {err.where.get(r, '위치를 읽지 못함')}" for r in err.missing_ranks)
        return (f"채점이 제한 시간 {timeout:g}초 안에 끝나지 않아 모든 랭크를 멈췄습니다: 교착(deadlock)으로 보입니다."
                f"{where}\n한 랭크만 부르는 집합 통신(예: 랭크 0에서만 barrier/all_reduce)이나, 랭크마다 횟수가 다른 "
                "All-Reduce가 없는지 보세요. 느린 기계라면 --timeout을 늘리세요.")
    if isinstance(err, RankFailedError):
        last = err.traceback_text.strip().splitlines()[-1]
        return f"랭크 {err.rank}에서 채점 중 예외가 났습니다: {last}"
    return f"채점을 끝내지 못했습니다: {err}"


def main(args) -> int:
    """``python -m labs grade PATH [--class NAME] [--nproc N] [--timeout S]``; returns the exit code."""
    try:
        params = dict(get_lab("grade").parse_params(args.param))
        if launch.in_torchrun():  # torchrun이 띄운 랭크 하나로 실행: 랭크 0이 모두의 결과를 보고한다
            names = args.classes or default_classes(args.path)
            result = launch.run_in_place("grade", args.backend, args.timeout, path=_absolute(args.path),
                                         classes=" ".join(names), **params)
            if result is None:
                return 0
        else:
            result = grade(args.path, args.classes or None, args.nproc, args.backend, args.timeout, **params)
    except LabConfigError as err:
        print(f"오류: {err}", file=sys.stderr)
        return 2
    except LabError as err:
        print(explain_error(err, args.timeout), file=sys.stderr)
        return 3
    print(report(result))
    return 0 if result.ok else 1
