"""Errors of the lab engine. Every message is Korean and says what to do next."""

from __future__ import annotations

import os
import signal
import sys

# The exit codes, one table: every command of ``python -m labs`` (run, bench, grade, list), a torchrun
# rank's hang watch, the launcher and the tests read them from here.
EXIT_OK = 0                # it ran and every check held
EXIT_CHECK_FAILED = 1      # it ran and a check failed (grade: the reader's class failed a check)
EXIT_BAD_INPUT = 2         # bad input (LabConfigError), said in Korean before any rank started
EXIT_LAB_ERROR = 3         # a rank raised, died or did not finish in time
EXIT_SIGNAL = 128          # + the signal that stopped the launcher (SIGHUP 129, SIGINT 130, SIGTERM 143), as a shell says
EXIT_MAIN_REIMPORTED = 86  # a rank's own exit: it re-ran the main script (the launcher raises MainGuardMissing)


def say(line: str) -> None:
    """One line on stderr, even when the terminal is gone (SIGHUP)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except OSError:
        pass


def end_on_ctrl_c_while_loading(signum: int, frame: object) -> None:
    """SIGINT handler of ``python -m labs`` until its command starts: torch is still loading, nothing has been
    started, so one Korean line and 130, not a KeyboardInterrupt traceback from inside torch's import."""
    say("중단: Ctrl-C(SIGINT)로 멈췄습니다. 아직 불러오는 중이라 띄운 것은 없습니다.")
    os._exit(EXIT_SIGNAL + signal.SIGINT)


class LabError(RuntimeError):
    """Base class of every error the lab engine raises."""

    def __reduce__(self):  # pickle by constructor arguments (labs.replay records errors)
        args = getattr(self, "_init_args", None)
        return (type(self), args) if args is not None else super().__reduce__()


class LabConfigError(LabError, ValueError):
    """Bad input, caught before any process is spawned."""


class MainGuardMissing(LabConfigError):
    """A script called labs.run at import time: each rank re-ran the script and labs.run with it."""

    def __init__(self, lab: str, script: str | None):
        self.lab = lab
        self.script = script
        self._init_args = (lab, script)
        where = f"스크립트 {script}" if script else "이 프로그램의 메인 모듈"
        super().__init__(
            f"{where}이(가) `if __name__ == \"__main__\":` 없이 labs.run('{lab}', …)을 부릅니다. 랭크 프로세스는 "
            "시작할 때 메인 모듈을 다시 import하므로 랭크마다 labs.run이 또 불려 실습을 시작하지 못했습니다. "
            "labs.run을 부르는 코드를 `if __name__ == \"__main__\":` 아래로 옮기세요(README의 파이썬 예)."
        )


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


def exit_cause(exitcode: int | None) -> str:
    """What a rank's exit code says about why it ended (Korean)."""
    if exitcode == -signal.SIGKILL:
        return ("SIGKILL로 강제 종료되었습니다: 메모리가 모자라 운영체제의 OOM killer가 죽였거나(dmesg, "
                "free -h로 확인) 누군가 kill -9를 보냈습니다")
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"신호 {-exitcode}"
        return f"신호 {name}({-exitcode})를 받고 끝났습니다(SIGABRT·SIGSEGV는 대개 C++ 쪽 오류입니다)"
    return f"랭크가 종료 코드 {exitcode}로 끝났습니다(파이썬 예외가 아니라 os._exit·sys.exit 같은 종료입니다)"


class RankCrashedError(LabError):
    """A rank process died without reporting (killed, segfault, os._exit); ``places``: where each rank
    was last seen, in the reader's words (the grader fills it)."""

    def __init__(self, lab: str, rank: int, exitcode: int | None, stderr_tail: str = "",
                 places: dict[int, str] | None = None):
        self.lab = lab
        self.rank = rank
        self.exitcode = exitcode
        self.stderr_tail = stderr_tail
        self.places = places or {}
        self._init_args = (lab, rank, exitcode, stderr_tail, self.places)
        tail = (f"\n--- 랭크 {rank}의 마지막 표준 오류 ---\n{stderr_tail}" if stderr_tail.strip()
                else "\n(이 랭크가 표준 오류에 남긴 것은 없습니다.)")
        super().__init__(
            f"실습 '{lab}'의 랭크 {rank} 프로세스가 결과를 보내지 않고 종료했습니다(종료 코드 {exitcode}): "
            f"{exit_cause(exitcode)}. 나머지 랭크는 모두 멈췄습니다.{tail}"
        )


class PeerLostError(LabError):
    """Under torchrun: a collective's connection to another rank broke (that rank's process or node died)."""

    def __init__(self, lab: str, rank: int, peer: str, message: str):
        self.lab, self.rank, self.peer, self.message = lab, rank, peer, message
        self._init_args = (lab, rank, peer, message)
        super().__init__(
            f"실습 '{lab}'의 랭크 {rank}: 다른 랭크와의 연결이 끊겼습니다(상대 {peer}). 그 노드의 랭크나 torchrun "
            "에이전트가 죽었습니다(메모리 부족, kill, 노드 장애). 그 노드의 로그를 확인한 뒤 잡을 다시 띄우세요.\n"
            f"--- gloo의 오류 ---\n{message}")


class LabTimeoutError(LabError):
    """Some ranks did not finish within the time limit; ``places``: where each rank was stuck, in the reader's
    words (the grader fills it)."""

    def __init__(self, lab: str, timeout: float, missing_ranks: list[int], where: dict[int, str] | None = None,
                 places: dict[int, str] | None = None):
        self.lab = lab
        self.timeout = timeout
        self.missing_ranks = missing_ranks
        self.where = where or {}
        self.places = places or {}
        self._init_args = (lab, timeout, missing_ranks, self.where, self.places)
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


class LaunchInterrupted(SystemExit):
    """The launcher got SIGTERM or SIGHUP: every rank was stopped; the exit status is 128 + the signal."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(EXIT_SIGNAL + signum)

    def __str__(self) -> str:
        return f"{signal.Signals(self.signum).name} 신호를 받아 실행을 멈췄습니다. 띄운 랭크는 모두 종료했습니다."
