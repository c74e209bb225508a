"""``labs.grade(path)``, and the same steps for ``python -m labs grade``. The file is checked in the parent from
its syntax tree (the lab's ``validate``) and never executed here; the ranks run it under the time limit, each
noting its phase and stack in a folder, so that a rank that dies or hangs is explained with the reader's line.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from .. import launch
from ..errors import LabError, LabTimeoutError, RankCrashedError
from ..result import LabResult
from .source import GradeInputError, class_names, default_classes, exit_calls

DEFAULT_TIMEOUT = 30.0


def grade(path: str | Path, classes: object = None, nproc: int = 2, backend: str = "auto",
          timeout: float = DEFAULT_TIMEOUT, **params: Any) -> LabResult:
    """Run the checks on ``nproc`` real ranks; raise :class:`GradeInputError` for a bad file or class.

    ``classes`` is a name, several names separated by spaces, or a list of names (repeats are dropped).
    """
    with traced(path) as trace_dir:
        # 파일과 클래스는 grade 실습의 validate가 랭크를 띄우기 전에 구문 트리로 한 번 검사한다
        result = launch.run("grade", nproc, backend, timeout, **lab_params(path, classes, trace_dir), **params)
    checked(result)
    return result


def lab_params(path: str | Path, classes: object, trace_dir: str) -> dict[str, str]:
    """The ``grade`` lab's file parameters: the absolute path, the classes to grade, the trace folder."""
    names = class_names(classes) or default_classes(path)
    # 랭크는 포크 서버의 작업 폴더에서 시작하므로, 상대 경로는 지금 폴더 기준의 절대 경로로 넘긴다
    return {"path": str(Path(path).absolute()), "classes": " ".join(names), "trace_dir": trace_dir}


@contextmanager
def traced(path: str | Path, spawned: bool = True) -> Iterator[str]:
    """A folder where the spawned ranks note their phase and stack: a rank that dies or hangs in the block comes out
    in the reader's words. Ranks joined under torchrun get ``""``: each reports its own place (:mod:`labs.hangwatch`)."""
    if not spawned:
        yield ""
        return
    with tempfile.TemporaryDirectory(prefix="labs-grade-") as trace_dir, launch.removed_if_killed(trace_dir):
        try:
            yield trace_dir
        except (RankCrashedError, LabTimeoutError) as err:
            raise _explained(err, path, trace_dir) from None


def checked(result: LabResult | None) -> LabResult | None:
    """The result, or :class:`GradeInputError` when the ranks could not grade the file at all."""
    if result is not None and result.data["input_error"]:
        raise GradeInputError(result.data["input_error"])
    return result


def _place(frame: list[Any]) -> str:
    file, line, fn, code = frame
    return f"{Path(file).name} {line}행 {fn}()" + (f": {code.strip()}" if code.strip() else "")


def _explained(err: RankCrashedError | LabTimeoutError, path: str | Path, trace_dir: str) -> LabError:
    """A dead or stuck rank in the reader's words: at import it is bad input (exit 2); later, a deadlock
    report that names the reader's own frame first, then the grader's."""
    states: dict[int, dict[str, Any]] = {}
    for file in Path(trace_dir).glob("rank*.json"):
        with suppress(ValueError, OSError):  # 랭크가 쓰다 만 파일
            states[int(file.stem[4:])] = json.loads(file.read_text(encoding="utf-8"))
    mine, name = Path(path).resolve(), Path(path).name
    reader = {r: [f for f in state["frames"] if Path(f[0]).resolve() == mine] for r, state in states.items()}
    ranks = [err.rank] if isinstance(err, RankCrashedError) else err.missing_ranks
    r = next((r for r in ranks if states.get(r, {}).get("phase") == "import"), None)
    if r is not None:
        if isinstance(err, RankCrashedError):
            lines = exit_calls(path)
            where = f" {', '.join(f'{line}행' for line in lines)}의 프로세스를 끝내는 호출(os._exit 등)을 보세요." if lines else ""
            return GradeInputError(f"{name}을(를) 불러오는(import) 동안 랭크 {r}의 프로세스가 끝났습니다(종료 코드 "
                                   f"{err.exitcode}).{where} 파일 맨 위(함수와 클래스 밖)에서 프로세스를 끝내지 마세요.")
        where = f" 마지막으로 본 곳: {_place(reader[r][-1])}." if reader[r] else ""
        return GradeInputError(f"{name}을(를) 불러오는(import) 동안 제한 시간 {err.timeout:g}초가 지났습니다: 파일 맨 위의 "
                               f"코드가 끝나지 않습니다(무한 루프나 입력 기다리기).{where} 그 코드를 함수 안이나 "
                               "if __name__ == \"__main__\": 아래로 옮기세요.")
    for r, state in states.items():
        grader = [f for f in state["frames"] if "/labs/" in f[0] and Path(f[0]).resolve() != mine]
        parts = ([f"여러분의 코드 {_place(reader[r][-1])}"] if reader[r] else []) + ([f"채점기 {_place(grader[-1])}"] if grader else [])
        if parts:
            err.places[r] = " ← ".join(parts)  # 오류의 메시지는 places와 상관없다: 같은 오류에 채워 넘긴다
    return err
