"""Errors of the lab engine. Every message is Korean and says what to do next."""

from __future__ import annotations


class LabError(RuntimeError):
    """Base class of every error the lab engine raises."""

    def __reduce__(self):  # pickle by constructor arguments (labs.replay records errors)
        args = getattr(self, "_init_args", None)
        return (type(self), args) if args is not None else super().__reduce__()


class LabConfigError(LabError, ValueError):
    """Bad input, caught before any process is spawned."""


class RankFailedError(LabError):
    """A rank raised an exception; carries the rank number and its traceback."""

    def __init__(self, lab: str, rank: int, traceback_text: str):
        self.lab = lab
        self.rank = rank
        self.traceback_text = traceback_text
        self._init_args = (lab, rank, traceback_text)
        last = traceback_text.strip().splitlines()[-1] if traceback_text.strip() else "(메시지 없음)"
        super().__init__(
            f"실습 '{lab}'의 랭크 {rank}에서 예외가 발생해 나머지 랭크를 모두 멈췄습니다: {last}\n"
            f"--- 랭크 {rank}의 traceback ---\n{traceback_text.rstrip()}"
        )


class RankCrashedError(LabError):
    """A rank process died without reporting (killed, segfault, os._exit)."""

    def __init__(self, lab: str, rank: int, exitcode: int | None):
        self.lab = lab
        self.rank = rank
        self.exitcode = exitcode
        self._init_args = (lab, rank, exitcode)
        super().__init__(
            f"실습 '{lab}'의 랭크 {rank} 프로세스가 결과를 보내지 않고 종료했습니다(종료 코드 {exitcode}). "
            "메모리 부족(OOM)이나 외부 종료 신호를 확인하세요. 나머지 랭크는 모두 멈췄습니다."
        )


class LabTimeoutError(LabError):
    """Some ranks did not finish within the time limit."""

    def __init__(self, lab: str, timeout: float, missing_ranks: list[int], where: dict[int, str] | None = None):
        self.lab = lab
        self.timeout = timeout
        self.missing_ranks = missing_ranks
        self.where = where or {}
        self._init_args = (lab, timeout, missing_ranks, self.where)
        ranks = ", ".join(str(r) for r in missing_ranks)
        details = "".join(f"\n  - 랭크 {r}: {self.where[r]}" for r in missing_ranks if r in self.where)
        super().__init__(
            f"실습 '{lab}'이(가) 제한 시간 {timeout:g}초 안에 끝나지 않았습니다. "
            f"끝나지 않은 랭크: {ranks}.{details}\n모든 랭크를 종료했습니다. "
            "한 랭크만 집합 통신(collective)을 건너뛰었거나 무한 루프에 빠졌는지 확인하세요. "
            "느린 기계라면 timeout 값을 늘리세요(CLI: --timeout)."
        )


class LabCheckFailed(LabError, AssertionError):
    """A lab ran, but one of its checks (a claim of the text) did not hold."""
