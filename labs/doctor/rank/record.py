"""The rank's event log and where in the reader's own files a call came from.

Each event is one JSON line appended to the rank's file with a single ``os.write`` (so a rank that is
killed leaves every line it finished). The doctor's bookkeeping time is summed in :attr:`Recorder.overhead`
so that the step time in the summary leaves it out, and code inside :meth:`Recorder.bookkeeping` is not
recorded again by the probes it calls into.
"""

from __future__ import annotations

import json
import linecache
import os
import signal
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TypedDict

STACK_SIGNAL = signal.SIGUSR1  # the doctor asks a rank for its Python stacks with it (faulthandler)


class Site(TypedDict):
    """A line of the reader's code: the file as the reader names it, the line, the function, the source."""

    file: str
    line: int
    func: str
    code: str


class ReaderFiles:
    """Which files are the reader's: under the script's folder, outside Python, its packages and the doctor."""

    def __init__(self, script: str, cwd: str) -> None:
        self.root = os.path.realpath(os.path.dirname(os.path.abspath(script)))
        self.cwd = os.path.realpath(cwd)
        here = os.path.dirname(os.path.realpath(__file__))  # the probes are never the reader's code
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, here, *sysconfig.get_paths().values()}
        self._excluded = tuple(os.path.realpath(p) + os.sep for p in prefixes if p and os.path.realpath(p) != self.root)
        self._known: dict[str, bool] = {}

    def owns(self, filename: str) -> bool:
        known = self._known.get(filename)
        if known is None:
            path = "" if filename.startswith("<") else os.path.realpath(filename)
            known = (path.startswith(self.root + os.sep) and not path.startswith(self._excluded)
                     and f"{os.sep}site-packages{os.sep}" not in path)
            self._known[filename] = known
        return known

    def display(self, filename: str) -> str:
        """The path as the reader would type it: relative to the folder the doctor ran in, when inside it."""
        path = os.path.realpath(filename)
        return os.path.relpath(path, self.cwd) if path.startswith(self.cwd + os.sep) else path

    def site_of(self, frame: FrameType) -> Site:
        filename, line = frame.f_code.co_filename, frame.f_lineno
        return Site(file=self.display(filename), line=line, func=frame.f_code.co_name,
                    code=linecache.getline(filename, line).strip())

    def site(self, frame: FrameType | None = None) -> Site | None:
        """The innermost frame of the reader's code on the current stack (or above ``frame``)."""
        frame = frame or sys._getframe(1)
        while frame is not None:
            if self.owns(frame.f_code.co_filename):
                return self.site_of(frame)
            frame = frame.f_back
        return None

    def frames(self, tb_frames: list[tuple[str, int, str]]) -> list[Site]:
        """The reader's frames of a traceback (file, line, function; outermost first)."""
        return [Site(file=self.display(f), line=line, func=fn, code=linecache.getline(f, line).strip())
                for f, line, fn in tb_frames if self.owns(f)]


class Recorder:
    """The event log of one rank, plus the counters the probes share."""

    def __init__(self, path: str, reader: ReaderFiles, rank: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()
        self._local = threading.local()
        self._once: set[object] = set()
        self.reader = reader
        self.rank = rank
        self.overhead = 0.0   # seconds spent in the doctor's own bookkeeping
        self.steps = 0        # optimizer steps of the first optimizer that stepped
        self.syncs = 0        # sync points so far (collectives and DDP calls that all ranks must make)

    def emit(self, ev: str, **fields: object) -> None:
        line = json.dumps({"ev": ev, "t": time.monotonic(), **fields}, default=repr) + "\n"
        with self._lock:
            os.write(self._fd, line.encode())

    def once(self, *key: object) -> bool:
        """True the first time this key is seen (to record a mapping once per line, not once per call)."""
        if key in self._once:
            return False
        self._once.add(key)
        return True

    @property
    def busy(self) -> bool:
        """Inside the doctor's own bookkeeping: probes do not record what it calls."""
        return getattr(self._local, "depth", 0) > 0

    @contextmanager
    def bookkeeping(self) -> Iterator[None]:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        started = time.perf_counter()
        try:
            yield
        finally:
            self._local.depth -= 1
            if self._local.depth == 0:
                self.overhead += time.perf_counter() - started

    def sync_point(self) -> int:
        """The index of a new sync point in this rank's sequence."""
        self.syncs += 1
        return self.syncs - 1
