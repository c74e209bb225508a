"""Shared helpers: Korean text checks, leftover-process checks, and the built site + one Chromium
for the browser tests (session-wide, so the whole suite starts the browser once)."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import parallel  # noqa: E402
import site_server  # noqa: E402
from parallel import pytest_runtest_protocol, pytest_unconfigure  # noqa: E402,F401  (hooks: xdist rules)

import labs.launch  # noqa: E402
from labs.errors import LabCheckFailed  # noqa: E402
from labs.grading import diagnosis, failed_checks, report  # noqa: E402
from labs.replay import RECORD_ENV, REPLAY_ENV  # noqa: E402

REPLAY_VARS = (RECORD_ENV, REPLAY_ENV)


@pytest.fixture(autouse=True)
def _real_ranks_when_marked(request, monkeypatch):
    """Tests marked ``real_ranks`` (the launcher's own) always start processes: no lab replay."""
    if request.node.get_closest_marker("real_ranks"):
        for name in REPLAY_VARS:
            monkeypatch.delenv(name, raising=False)


def pytest_configure(config):
    config.addinivalue_line("markers", "real_ranks: never replay recorded lab runs (labs/replay.py)")
    parallel.configure(config)


HANGUL = re.compile(r"[\uac00-\ud7a3]")
QUIZ_BANK = Path(__file__).resolve().parent.parent / "book" / "quizzes"  # the book's quiz bank (labs.quiz is told)

# Environment variables that make ``python -m labs`` believe it runs under torchrun.
TORCHRUN_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "TORCHELASTIC_RUN_ID", "GROUP_RANK", "ROLE_RANK")


def has_hangul(text: str) -> bool:
    return bool(HANGUL.search(text or ""))


def clean_env(**extra: str) -> dict:
    """os.environ without torchrun's variables (so the CLI takes the spawn path) and without lab
    replay (a command run by a test really starts its ranks), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_ENV and k not in REPLAY_VARS}
    env.update(extra)
    return env


def write_source(folder: Path, name: str, text: str) -> str:
    """Write ``text`` (dedented) to ``folder / name`` as a reader would save it; the path as a string."""
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def grade_cli(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """``python -m labs grade ARGS`` as a reader types it (no torchrun variables, no replay)."""
    return subprocess.run([sys.executable, "-m", "labs", "grade", *args], capture_output=True, text=True,
                          encoding="utf-8", timeout=timeout, env=clean_env())


@pytest.fixture
def run_tmpdir() -> Iterator[Path]:
    """An empty TMPDIR for a command under test, short enough that multiprocessing's socket folder (``pymp-*``)
    goes there: labs.launch moves that folder to /tmp when the path would pass 107 bytes, and pytest's own
    ``tmp_path`` does once its counter has three digits (``/tmp/pytest-of-root/pytest-102/popen-gw1/test_…``)."""
    folder = Path(tempfile.mkdtemp(prefix="t-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def no_spawn(monkeypatch):
    """Bad input must be refused before any rank starts: starting one fails the test."""
    def forbidden(*args, **kwargs):
        raise AssertionError("bad input must be rejected before spawning any rank")

    monkeypatch.setattr(labs.launch, "spawn_ranks", forbidden)


def run_two_rank_script(folder: Path, source: str) -> tuple[str, list[dict]]:
    """Run ``source`` (a script that ``mp.spawn``s two ranks, each writing ``{out}.{rank}`` as JSON, given
    ``sys.argv[1:] = port, out``) in ``folder``; its stderr and the two ranks' records."""
    script = folder / "unit.py"
    script.write_text(source, encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = str(Path(__file__).resolve().parent.parent)
    proc = subprocess.run([sys.executable, str(script), str(port), str(folder / "out")], capture_output=True,
                          text=True, timeout=180, env=clean_env(PYTHONPATH=repo), cwd=folder)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr, [json.loads((folder / f"out.{r}").read_text()) for r in (0, 1)]


def assert_gallery_bug(gallery, bugs: dict, bug: str, cause: str) -> None:
    """Class ``bug`` of a graded gallery fails exactly the checks ``bugs[bug]`` names, the first is its
    diagnosis, and its part of the report gives ``cause`` as the most likely cause."""
    expected = bugs[bug]
    assert diagnosis(gallery, bug) == expected[0], report(gallery)
    assert failed_checks(gallery, bug) == set(expected)
    text = report(gallery).split("채점: 클래스 ")[list(bugs).index(bug) + 1]
    assert f"가장 가능성 높은 원인 ({expected[0]}): {cause}" in text, text


def _cmdline(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return ""


def _is_mp_helper(p: psutil.Process) -> bool:
    """The long-lived multiprocessing fork server / resource tracker themselves.

    Careful: rank processes are *forked* from the fork server without exec, so their cmdline
    also says "forkserver". Only a process whose parent is not a fork server is the server.
    """
    cmd = _cmdline(p)
    if "resource_tracker" in cmd:
        return True
    if "forkserver" not in cmd:
        return False
    try:
        parent = p.parent()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
    return parent is None or "forkserver" not in _cmdline(parent)


def live_children(ignore: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Descendants of this test process that are alive, not multiprocessing helpers, not in ``ignore``."""
    out = []
    for p in psutil.Process().children(recursive=True):
        if p.pid in ignore:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                continue
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if not _is_mp_helper(p) and not _is_browser(p):
            out.append(p)
    return out


def _is_browser(p: psutil.Process) -> bool:
    """The session's Chromium (and playwright's driver): it starts helper processes of its own at any
    time, so a test that ran after a browser test in the same worker would see them as leftovers."""
    cmd = _cmdline(p)
    return "chromium" in cmd or "playwright" in cmd


def wait_for_no_children(timeout: float = 5.0, ignore: frozenset[int] = frozenset()) -> list[psutil.Process]:
    """Poll until no live non-helper descendant remains; return what is left after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        left = live_children(ignore)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def describe(procs: list[psutil.Process]) -> str:
    rows = []
    for p in procs:
        try:
            rows.append(f"pid={p.pid} ppid={p.ppid()} status={p.status()} cmd={_cmdline(p)[:120]!r}")
        except psutil.Error:
            rows.append(f"pid={p.pid} (gone)")
    return "; ".join(rows)


@pytest.fixture
def no_leftover_children():
    """A callable ``check(timeout=5.0)`` asserting that every rank process has been stopped.

    Processes that already existed when the test started (another suite's server, say) are
    ignored. On teardown, anything this test left behind is killed (by pid) so it cannot
    disturb the next test; the assertion itself is what the test calls.
    """
    before = frozenset(p.pid for p in live_children())

    def check(timeout: float = 5.0) -> None:
        left = wait_for_no_children(timeout, before)
        assert not left, f"랭크 프로세스가 아직 살아 있습니다: {describe(left)}"

    check.baseline = before
    yield check
    for p in live_children(before):
        try:
            p.kill()
        except psutil.Error:
            pass


@pytest.fixture(scope="session")
def site_root() -> Path:
    """The built site (fails with the `make book` message when it is missing)."""
    return site_server.require_site()


@pytest.fixture(scope="session")
def site_url(site_root) -> Iterator[str]:
    """Base URL (ending in /) of the built site served on 127.0.0.1."""
    with site_server.serve(site_root) as url:
        yield url


@pytest.fixture(scope="session")
def chromium():
    """Debian's headless Chromium driven by playwright (never a downloaded browser)."""
    from playwright.sync_api import sync_playwright

    executable = site_server.chromium_path()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=site_server.CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def assert_checks_hold(result, not_applicable: set[str] | None = None) -> None:
    """The part of a lab's contract every run keeps: every check passes (or is not applicable), says in Korean
    what it compares, and the checks that are not applicable are exactly ``not_applicable`` (when given)."""
    assert result.ok, result.report()
    assert result.checks and all(has_hangul(c.description) for c in result.checks.values()), result.report()
    if not_applicable is not None:
        assert {name for name, c in result.checks.items() if not c.applicable} == not_applicable, result.report()


def summarize_again(lab_module, ranks: list[dict], backend: str, **params):
    """The engine's summary of ``ranks`` (records of a real run, maybe altered) with the lab's
    defaults updated by ``params``: what ``labs.run`` would have returned for those records."""
    lab = lab_module.LAB
    return lab.finish(ranks, backend, lab.resolve_params(params, len(ranks)))


def set_in_records(path: tuple, value, ranks_to=None):
    """A tamper for :func:`assert_only_these_fail` that sets ``record[path...] = value(old)`` on the given ranks
    (all when None)."""
    def tamper(ranks):
        for r in ranks if ranks_to is None else [ranks[i] for i in ranks_to]:
            node = r
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value(node[path[-1]])
    return tamper


def assert_only_these_fail(lab_module, result, tamper, failing: set[str], **params) -> None:
    """The lab's summary of a tampered copy of ``result``'s rank records: exactly the checks named
    in ``failing`` must fail, and ``assert_ok()`` must raise (a check CAN fail)."""
    ranks = copy.deepcopy(result.ranks)
    tamper(ranks)
    tampered = summarize_again(lab_module, ranks, result.backend, **{**result.params, **params})
    assert {c.name for c in tampered.failed()} == failing, tampered.report()
    with pytest.raises(LabCheckFailed):
        tampered.assert_ok()


def tamper_tests(lab_module, tampers: dict, n: int, runs: str = "runs"):
    """The two tests of a lab whose every check has one tamper (``tampers``: check name → tamper), on the run with
    ``n`` ranks of the module's ``runs`` fixture: every check has its tamper, and each tamper fails exactly its check.

        test_every_check_is_tampered, test_each_comparison_can_fail = tamper_tests(mixed_lab, TAMPERS, n=3)
    """
    def test_every_check_is_tampered(request):
        assert set(tampers) == set(request.getfixturevalue(runs)[n].checks)

    @pytest.mark.parametrize("check", sorted(tampers))
    def test_each_comparison_can_fail(request, check):
        assert_only_these_fail(lab_module, request.getfixturevalue(runs)[n], tampers[check], {check})

    return test_every_check_is_tampered, test_each_comparison_can_fail
