"""A rank the course starts ends with the process that started it, and leaves nothing behind.

:func:`end_with_parent` runs in every rank: a thread waits until the process that started the rank (the
launcher, or torchrun's agent) has ended, even by SIGKILL or the OOM killer, then removes that process's
folders and ends the rank with every process the rank started (a graded file may start its own). A rank
frozen with SIGSTOP cannot run that thread, so the kernel is asked to send it SIGCONT when its parent ends
(``PR_SET_PDEATHSIG``): the launcher's fork server ends with the launcher once the ranks have let go of it
(:func:`leave_fork_server`); under torchrun the agent is the parent itself.
:func:`use_temp_dir` points a rank's temporary files into a folder the launcher removes (or, under torchrun,
the rank itself), so a rank the launcher stops keeps nothing in TMPDIR either.
"""

from __future__ import annotations

import ctypes
import os
import select
import shutil
import signal
import sys
import tempfile
import threading
import time
from multiprocessing import forkserver

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def lead_own_group() -> None:
    """Make this rank the leader of a process group of its own: what it starts is ended with it."""
    os.setpgrp()


def leave_fork_server() -> None:
    """Close this rank's copy of the fork server's keep-alive pipe (multiprocessing hands one to every child), so
    the fork server ends with the launcher, not with its last rank, and the parent-death signal reaches the ranks.
    A rank that needs a fork server itself then starts its own."""
    server = forkserver._forkserver
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None  # type: ignore[attr-defined]


def end_with_parent(parent_pid: int, leftovers: list[str]) -> None:
    """When ``parent_pid`` has ended: remove ``leftovers`` and end this rank (its whole group when it leads one)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGCONT)  # 멈춘(SIGSTOP) 랭크도 부모가 끝나면 깨어나 아래 스레드를 돈다

    def watch() -> None:
        try:
            select.select([os.pidfd_open(parent_pid)], [], [])  # Linux 5.3+: readable once it has ended
        except (AttributeError, OSError):  # no pidfd: ask every half second
            while _alive(parent_pid):
                time.sleep(0.5)
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)
        if os.getpgid(0) == os.getpid():
            os.killpg(0, signal.SIGKILL)  # 이 랭크와 이 랭크가 띄운 프로세스 모두
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="labs-parent-watch", daemon=True).start()


def end_group(pid: int) -> None:
    """End what is left of the process group a rank led (its own children), once the rank itself has ended."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left, or the rank never led a group
        pass


def use_temp_dir(path: str) -> None:
    """Create this process's temporary files and folders under ``path`` (tempfile, and TMPDIR for what it starts)."""
    os.environ["TMPDIR"] = path
    tempfile.tempdir = path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
