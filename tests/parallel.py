"""How `make test` shares the machine between pytest-xdist workers (``-n 3 --dist loadfile``).

Run one test at a time, the suite leaves most of the two cores idle while it waits (on browser pages,
Slurm jobs, launcher deadlines, notebook kernels); several workers overlap those waits, and with three
on the two cores the CPU is busy nearly all the run (CPU-heavy tests then slow each other down:
README's performance table has what it gains). The rules that keep this from changing what a test
measures:

- One file is one unit on one worker (``--dist loadfile``): its module fixtures run once, a
  notebook's cells run in order in one kernel, and every page is still opened once, because all the
  tests that share the per-page desktop visit (``page_report``) live in tests/test_site_pages.py.
- Tests marked ``alone`` (they time the machine: chapter 8's benchmark) run while no other test runs
  on any worker: :func:`turn` is a fair readers-writer lock over two ``flock`` files, held from the
  first fixture's setup to the last teardown of each test. A worker keeps the exclusive turn through
  consecutive ``alone`` tests (a whole file of them runs on one worker): taking it again for each one
  would let the other workers start long tests in between, and every ``alone`` test would then wait,
  with the machine half idle, for the longest of them to end.
- Which file goes first is xdist's own choice (``loadfile`` hands out the files with the most tests first; the
  page-visit file, the longest unit, is one of them). An ordering hook of ours was timed against it on one clean
  clone (1,249 s with it, 1,209 s without) and removed.

Without xdist (a reader's plain ``pytest``) nothing here changes the run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

ALONE = "alone"
MARKER = f"{ALONE}: runs while no other test runs on any worker (it times the machine; tests/parallel.py)"
LOCK_ENV = "DDP_COURSE_TEST_LOCKS"  # the lock folder, made by the controller, inherited by its workers
_FOLDER = pytest.StashKey[str]()


def configure(config) -> None:
    """On xdist's controller: make the lock folder before the workers start (they inherit the
    environment); ``pytest_unconfigure`` removes it after they have all ended."""
    config.addinivalue_line("markers", MARKER)
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        config.stash[_FOLDER] = os.environ[LOCK_ENV] = tempfile.mkdtemp(prefix="ddp-course-tests-")


def pytest_unconfigure(config):
    folder = config.stash.get(_FOLDER, None)
    if folder:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop(LOCK_ENV, None)


def lock_dir(config) -> Path | None:
    """The folder every worker of this run shares, or None outside an xdist worker."""
    if getattr(config, "workerinput", None) is None or not os.environ.get(LOCK_ENV):
        return None
    return Path(os.environ[LOCK_ENV])


@contextlib.contextmanager
def turn(folder: Path, alone: bool) -> Iterator[None]:
    """Hold the run's shared lock, or its exclusive one when ``alone``.

    Everyone passes the gate first and holds it only while taking the room, so a waiting ``alone``
    test (which keeps the gate until the room is empty) stops new tests from entering: it cannot be
    starved by workers that keep starting short tests.
    """
    with open(folder / "gate", "a") as gate, open(folder / "room", "a") as room:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(room, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


def _is_alone(item) -> bool:
    return item is not None and item.get_closest_marker(ALONE) is not None


_exclusive: contextlib.ExitStack | None = None  # this worker's exclusive turn, kept across consecutive alone tests


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    global _exclusive
    folder = lock_dir(item.config)
    if folder is None:
        yield
        return
    if not _is_alone(item):
        with turn(folder, alone=False):
            yield
        return
    if _exclusive is None:  # else the alone test just before still holds it
        _exclusive = contextlib.ExitStack()
        _exclusive.enter_context(turn(folder, alone=True))
    try:
        yield
    finally:
        if not _is_alone(nextitem):
            _exclusive.close()
            _exclusive = None
