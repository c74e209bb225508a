"""Under torchrun, each rank's own watchdog: at the deadline, name the rank that hung and where.

torchrun cannot tell a hung rank from its waiting peers: rank 0's gloo timeout would be reported
as the root cause and the rank that hung only as SIGTERMed. So every rank runs this thread. At the
lab's deadline each unfinished rank writes where its main thread is into the group's store; rank 0
gathers those lines and prints the same Korean report the spawn launcher gives; then the ranks that
hung outside a collective exit first (so torchrun's "first observed failure" is one of them) and
the rest follow, all with exit code 3.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist

from .errors import EXIT_LAB_ERROR, LabTimeoutError
from .stacks import OUTSIDE, describe_thread

_GATHER_GRACE = 5.0   # how long rank 0 waits for the other ranks' lines after the deadline
_LATER = 2.0          # how much later than the hung ranks the waiting ranks exit
_POLL = 0.1


class HangWatch:
    """Start after ``init_process_group``; call :meth:`finished` when the rank function returned and
    :meth:`stop` when the run is over (in time or not)."""

    def __init__(self, lab: str, rank: int, world_size: int, timeout: float):
        restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")  # a restarted group must not read old keys
        self.store = dist.PrefixStore(f"labs-hangwatch/{restart}/", dist.distributed_c10d._get_default_store())
        self.lab, self.rank, self.world_size, self.timeout = lab, rank, world_size, timeout
        self.main = threading.current_thread()
        self._over = threading.Event()
        self._fired = threading.Event()
        self._exited = threading.Event()  # never set: os._exit ends the process first
        self._thread = threading.Thread(target=self._watch, name="labs-hangwatch", daemon=True)
        self._thread.start()

    def finished(self) -> None:
        self.store.set(f"done/{self.rank}", "1")

    def stop(self) -> None:
        self._over.set()

    def absorb_echo(self) -> None:
        """Called with an exception in the main thread: past the deadline it is only the echo of a peer
        the watchdog already ended (Connection closed by peer), so wait for the watchdog's exit instead."""
        if self._fired.is_set():
            self._exited.wait()

    def _has(self, key: str) -> bool:
        return self.store.check([key])

    def _watch(self) -> None:
        if self._over.wait(self.timeout):
            return
        self._fired.set()
        if not self._has(f"done/{self.rank}"):
            self.store.set(f"where/{self.rank}", describe_thread(self.main))
        if self.rank == 0:
            self._report()
        deadline = time.monotonic() + _GATHER_GRACE + _LATER
        while not self._has("reported") and time.monotonic() < deadline:
            time.sleep(_POLL)
        if not self._hung_outside_collective():
            time.sleep(_LATER)
        os._exit(EXIT_LAB_ERROR)

    def _hung_outside_collective(self) -> bool:
        key = f"where/{self.rank}"
        return self._has(key) and self.store.get(key).decode().startswith(OUTSIDE)

    def _report(self) -> None:
        ranks = range(self.world_size)
        deadline = time.monotonic() + _GATHER_GRACE
        while time.monotonic() < deadline and not all(self._has(f"done/{r}") or self._has(f"where/{r}") for r in ranks):
            time.sleep(_POLL)
        missing = [r for r in ranks if not self._has(f"done/{r}")]
        where = {r: (self.store.get(f"where/{r}").decode() if self._has(f"where/{r}") else "응답 없음(위치를 보내지 않음)")
                 for r in missing}
        err = LabTimeoutError(self.lab, self.timeout, missing, where)
        print(f"실습 실행 실패: {err}", file=sys.stderr, flush=True)
        self.store.set("reported", "1")


def store_timeout(timeout: float) -> timedelta:
    """The process group's own timeout: past the watchdog's deadline and its report."""
    return timedelta(seconds=timeout + _GATHER_GRACE + _LATER + 30.0)
