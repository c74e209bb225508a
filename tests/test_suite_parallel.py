"""The rules of tests/parallel.py: an ``alone`` test never overlaps another test on any worker, shared
tests do overlap each other, a waiting ``alone`` test is not starved, and the suite's grouping puts
every shared page visit on one worker. Workers are real processes taking the real flock locks."""

from __future__ import annotations

import contextlib
import fcntl
import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import parallel
import pytest

HOLD_S = 0.03


def _hold(lock, folder: str, alone: bool, times: int, out) -> None:
    """A worker: take the lock ``times`` times, hold it HOLD_S each, report (alone, start, end)."""
    for _ in range(times):
        with lock(Path(folder), alone):
            start = time.monotonic()
            time.sleep(HOLD_S)
            out.put((alone, start, time.monotonic()))


@contextlib.contextmanager
def _alone_ignored(folder: Path, alone: bool):
    """A broken lock: everybody shares the room, ``alone`` or not."""
    with open(folder / "room", "a") as room:
        fcntl.flock(room, fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)


def _intervals(lock, folder: Path) -> list[tuple[bool, float, float]]:
    """Two shared workers and one ``alone`` worker, as three processes started together."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hold, args=(lock, str(folder), False, 40, out)) for _ in range(2)]
    procs.append(ctx.Process(target=_hold, args=(lock, str(folder), True, 8, out)))
    for p in procs:
        p.start()
    rows = [out.get(timeout=60) for _ in range(2 * 40 + 8)]
    for p in procs:
        p.join(10)
    return rows


def _overlaps(rows) -> tuple[int, int]:
    """(pairs where an alone interval overlaps another interval, pairs of overlapping shared intervals)."""
    alone_clash = shared_overlap = 0
    for i, (a_alone, a0, a1) in enumerate(rows):
        for b_alone, b0, b1 in rows[i + 1:]:
            if a0 < b1 and b0 < a1:
                if a_alone or b_alone:
                    alone_clash += 1
                else:
                    shared_overlap += 1
    return alone_clash, shared_overlap


def test_alone_never_overlaps_and_shared_tests_do(tmp_path):
    clash, shared = _overlaps(_intervals(parallel.turn, tmp_path))
    assert clash == 0, f"alone 테스트가 다른 테스트와 {clash}번 겹쳤습니다"
    assert shared > 0, "공유 테스트끼리는 겹쳐야 합니다 (겹치지 않으면 위 확인은 아무것도 재지 않은 것)"


def test_a_lock_that_ignores_alone_is_caught(tmp_path):
    clash, _ = _overlaps(_intervals(_alone_ignored, tmp_path))
    assert clash > 0


def test_waiting_alone_test_is_not_starved(tmp_path):
    """Shared workers that re-enter back to back never leave the room empty; the gate lets the
    waiting alone test in after the tests already inside have finished."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    readers = [ctx.Process(target=_hold, args=(parallel.turn, str(tmp_path), False, 200, out)) for _ in range(2)]
    for p in readers:
        p.start()
    out.get(timeout=60)  # the room is busy
    asked = time.monotonic()
    with parallel.turn(tmp_path, alone=True):
        waited = time.monotonic() - asked
    for p in readers:
        p.terminate()
        p.join(10)
    assert waited < 20 * HOLD_S, f"alone 테스트가 {waited:.2f}초 기다렸습니다"


SUITE_CONFTEST = """
import os, sys, time
sys.path.insert(0, {here!r})
import parallel
import pytest
{hooks}

def pytest_configure(config):
    parallel.configure(config)

@pytest.fixture(scope="module")
def page_report():
    return "visit"

@pytest.fixture
def log(request):
    start = time.monotonic()
    time.sleep(0.1)
    yield
    with open(os.path.join(os.path.dirname(__file__), "log.txt"), "a") as f:
        f.write(f"{{request.node.module.__name__}} {{request.node.name}} {{os.environ['PYTEST_XDIST_WORKER']}} "
                f"{{start}} {{time.monotonic()}}\\n")
"""

PLAIN_FILE = """
import time
import pytest

@pytest.mark.alone
def test_alone(log):
    time.sleep(0.5)

@pytest.mark.parametrize("i", range(3))
def test_plain(log, i):
    pass
"""

TIMED_FILE = """
import time
import pytest

pytestmark = pytest.mark.alone


@pytest.mark.parametrize("i", range(3))
def test_timed(log, i):
    time.sleep(0.3)
"""

VISITS_FILE = """
import pytest

@pytest.mark.parametrize("i", range(8))
def test_visit(page_report, log, i):
    pass
"""


def xdist_flags() -> list[str]:
    """The worker flags `make test` passes to pytest (the Makefile's TEST_WORKERS line)."""
    makefile = (Path(__file__).resolve().parent.parent / "Makefile").read_text(encoding="utf-8")
    for line in makefile.splitlines():
        if line.startswith("TEST_WORKERS"):
            return line.split("=", 1)[1].split()
    raise AssertionError("Makefile에 TEST_WORKERS 줄이 없습니다")


@pytest.mark.parametrize("rules", [True, False], ids=["with-parallel-rules", "without"])
def test_make_test_flags_keep_files_whole_visits_first_alone_alone(tmp_path, rules):
    """A small suite under `make test`'s xdist flags: each file runs on one worker, the page-visit
    file (last by name, most tests) starts first (xdist's own order), the ``alone`` tests overlap no other
    test, and a file of ``alone`` tests runs as one stretch that no other test enters. Without the hooks of
    tests/parallel.py the same suite runs ``alone`` beside other tests."""
    hooks = "from parallel import pytest_runtest_protocol, pytest_unconfigure" if rules else ""
    (tmp_path / "conftest.py").write_text(SUITE_CONFTEST.format(here=str(Path(__file__).resolve().parent), hooks=hooks))
    for name in ("a", "b", "c"):
        (tmp_path / f"test_{name}.py").write_text(PLAIN_FILE)
    (tmp_path / "test_m_timed.py").write_text(TIMED_FILE)
    (tmp_path / "test_z_pages.py").write_text(VISITS_FILE)
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop(parallel.LOCK_ENV, None)
    proc = subprocess.run([sys.executable, "-m", "pytest", *xdist_flags(), "-p", "no:cacheprovider", "-q", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = []
    for line in (tmp_path / "log.txt").read_text().splitlines():
        module, name, worker, start, end = line.split()
        runs.append((module, name, worker, float(start), float(end)))
    assert len(runs) == 3 * 4 + 3 + 8, runs
    workers = {module: {w for m, _, w, _, _ in runs if m == module} for module, *_ in runs}
    assert all(len(w) == 1 for w in workers.values()), workers
    first = {w: min((r for r in runs if r[2] == w), key=lambda r: r[3])[0] for w in {r[2] for r in runs}}
    alone = [r for r in runs if r[1] == "test_alone" or r[0] == "test_m_timed"]
    timed = [r for r in runs if r[0] == "test_m_timed"]
    stretch = (min(r[3] for r in timed), max(r[4] for r in timed))
    inside = [(r[0], r[1]) for r in runs if r[0] != "test_m_timed" and stretch[0] < r[4] and r[3] < stretch[1]]
    clashes = [(a[0], r[0], r[1]) for a in alone for r in runs if r is not a and a[3] < r[4] and r[3] < a[4]]
    assert "test_z_pages" in first.values(), first
    if rules:
        assert not clashes, clashes
        assert not inside, f"alone 파일을 도는 사이에 다른 테스트가 돌았습니다: {inside}"
        assert not list(tmp_path.glob("ddp-course-tests-*")), "잠금 폴더가 남았습니다"
    else:
        assert clashes, clashes
