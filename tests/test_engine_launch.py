"""The launcher on real OS processes: results by rank, failures named by rank, no leftovers.

Every test here starts a real gloo process group (except the bad-input ones, which must not
start anything). The ``faults`` lab does one all_reduce of rank+1, so N ranks must all see
1 + 2 + … + N.
"""

from __future__ import annotations

import contextlib
import multiprocessing.forkserver
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import torch.distributed as dist
from conftest import clean_env, describe, has_hangul, live_children

import labs
import labs.launch
from labs.context import resolve_backend
from labs.errors import EXIT_SIGNAL, LabConfigError, LabTimeoutError, RankCrashedError, RankFailedError
from labs.stacks import BACKWARD, STOPPED, describe_faulthandler

pytestmark = [pytest.mark.timeout(90), pytest.mark.real_ranks]


def _assert_faults_ok(result, n: int) -> None:
    expected = n * (n + 1) / 2
    assert result.lab == "faults"
    assert result.world_size == n
    assert result.backend == "gloo"
    assert len(result.ranks) == n
    assert [r["rank"] for r in result.ranks] == list(range(n))
    assert all(r["world_size"] == n for r in result.ranks)
    assert [r["sum"] for r in result.ranks] == [expected] * n
    check = result.checks["all_reduce_sum"]
    assert check.ok is True
    assert check.value == 0.0
    assert result.ok
    assert result.data["expected_sum"] == expected


# ----------------------------------------------------------------------------- success paths

def test_three_ranks_return_in_rank_order_from_distinct_processes(no_leftover_children):
    result = labs.run("faults", nproc=3)

    _assert_faults_ok(result, 3)
    assert [r["sum"] for r in result.ranks] == [6.0, 6.0, 6.0]
    pids = [r["pid"] for r in result.ranks]
    assert len(set(pids)) == 3, pids
    assert os.getpid() not in pids
    assert result.assert_ok() is result
    # the JSON and the Korean report carry the same check
    assert '"all_reduce_sum"' in result.to_json()
    assert "[통과] all_reduce_sum" in result.report()
    no_leftover_children()


def test_single_rank(no_leftover_children):
    result = labs.run("faults", nproc=1)

    _assert_faults_ok(result, 1)
    assert result.ranks[0]["sum"] == 1.0
    assert result.ranks[0]["pid"] != os.getpid()
    no_leftover_children()


# ----------------------------------------------------------------------------- failure paths

@pytest.fixture(scope="module")
def warm_launcher():
    """Start the fork server (it imports torch and every lesson) before anything is timed."""
    labs.run("faults", nproc=1)


def test_raising_rank_is_named_with_its_traceback(warm_launcher, no_leftover_children):
    started = time.monotonic()
    with pytest.raises(RankFailedError) as info:
        labs.run("faults", nproc=3, mode="raise", fault_rank=2)
    elapsed = time.monotonic() - started

    err = info.value
    assert elapsed < 30, f"a raising rank must stop the run quickly, took {elapsed:.1f}s"
    assert err.rank == 2
    assert err.lab == "faults"
    message = str(err)
    assert "랭크 2" in message
    assert "의도한 실패" in message
    assert "나머지 랭크를 모두 멈췄습니다" in message
    # the rank's own traceback, not a peer's "connection closed" echo
    assert "faults.py" in err.traceback_text
    assert "의도한 실패: 랭크 2에서" in err.traceback_text
    assert "RuntimeError" in err.traceback_text.strip().splitlines()[-1]
    no_leftover_children()


def test_dying_rank_is_reported_with_exit_code(warm_launcher, no_leftover_children):
    started = time.monotonic()
    with pytest.raises(RankCrashedError) as info:
        labs.run("faults", nproc=3, mode="exit", fault_rank=1)
    elapsed = time.monotonic() - started

    err = info.value
    assert elapsed < 30, f"a dead rank must stop the run quickly, took {elapsed:.1f}s"
    assert err.rank == 1
    assert err.exitcode == 17
    assert "랭크 1" in str(err)
    assert "종료 코드 17" in str(err)
    no_leftover_children()


@pytest.mark.parametrize("mode, code, cause, not_said", [
    pytest.param("kill", -9, "OOM killer", "종료 코드 -9로 끝났습니다", id="SIGKILL"),
    pytest.param("abort", -6, "SIGABRT(6)", "OOM", id="SIGABRT"),
    pytest.param("exit", 17, "랭크가 종료 코드 17로 끝났습니다", "OOM", id="exit-17"),
])
def test_a_dead_ranks_exit_code_names_its_cause(warm_launcher, no_leftover_children, mode, code, cause, not_said):
    """F8: -9 is a kill (maybe the OOM killer); any other code is said as it is, with the rank's last stderr lines."""
    with pytest.raises(RankCrashedError) as info:
        labs.run("faults", nproc=2, mode=mode, fault_rank=1)
    err = info.value
    assert (err.rank, err.exitcode) == (1, code)
    message = str(err)
    assert cause in message and not_said not in message, message
    if mode == "exit":  # the rank printed one line before os._exit(17): it is in the report
        assert "의도한 종료: 랭크 1, 종료 코드 17" in err.stderr_tail
        assert "마지막 표준 오류" in message and "의도한 종료: 랭크 1" in message
    no_leftover_children()


def test_hanging_rank_times_out_and_says_where_each_rank_is(warm_launcher, no_leftover_children):
    # While the run hangs, check that the leftover-process helper really sees the ranks; this
    # keeps the "nothing left" assertion below from passing vacuously.
    seen: list[int] = []

    def probe():
        time.sleep(3.0)
        seen.append(len(live_children(no_leftover_children.baseline)))

    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    started = time.monotonic()
    with pytest.raises(LabTimeoutError) as info:
        labs.run("faults", nproc=3, mode="hang", fault_rank=2, timeout=6)
    elapsed = time.monotonic() - started
    prober.join(5)

    err = info.value
    assert 5.5 < elapsed < 25, f"the 6 s deadline must be kept, took {elapsed:.1f}s"
    assert seen and seen[0] >= 3, f"3 rank processes should be visible while hanging, saw {seen}"
    message = str(err)
    assert "끝나지 않은 랭크" in message
    assert "6초" in message
    assert 2 in err.missing_ranks
    assert err.timeout == 6
    assert "집합 통신 밖에서" in err.where[2]
    assert "faults.py" in err.where[2]
    for r in (0, 1):  # ranks 0 and 1 wait for rank 2 inside all_reduce
        assert err.where[r].startswith("집합 통신에서"), err.where
    assert set(err.missing_ranks) == {0, 1, 2}
    assert f"랭크 2: {err.where[2]}" in message
    no_leftover_children()


# ----------------------------------------------------------------------------- bad input

@pytest.fixture
def spawn_forbidden(monkeypatch, no_leftover_children):
    """Fail loudly if anything tries to start rank processes."""
    calls = []

    def forbidden(*args, **kwargs):
        calls.append(args)
        raise AssertionError("bad input must be rejected before spawning any rank")

    monkeypatch.setattr(labs.launch, "spawn_ranks", forbidden)
    labs.all_labs()  # import every lesson now, so the timing below measures validation only
    yield calls
    assert calls == []
    no_leftover_children(timeout=0.0)


BAD_INPUT = [
    pytest.param(("faults",), {"nproc": 0}, ["랭크 수(nproc)", "1 이상의 정수", "0"], id="nproc=0"),
    pytest.param(("faults",), {"nproc": -1}, ["랭크 수(nproc)", "-1"], id="nproc=-1"),
    pytest.param(("faults",), {"nproc": "2"}, ["랭크 수(nproc)", "'2'"], id="nproc-str"),
    pytest.param(("faults",), {"nproc": True}, ["랭크 수(nproc)", "True"], id="nproc-bool"),
    pytest.param(("faults",), {"nproc": 65}, ["64개 이하"], id="nproc-too-many"),
    pytest.param(("replica",), {"nproc": 2},
                 ["알 수 없는 실습 이름", "'replica'", "혹시 'replicas'", "replicas", "faults", "python -m labs list"],
                 id="unknown-lab"),
    pytest.param(("faults",), {"nproc": 2, "backend": "mpi"}, ["알 수 없는 백엔드", "'mpi'", "gloo"], id="backend-mpi"),
    pytest.param(("faults",), {"nproc": 2, "backend": "nccl"}, ["NCCL", "gloo", "찾지 못했습니다"], id="nccl-no-gpu"),
    pytest.param(("replicas",), {"nproc": 2, "batch": 4},
                 ["없는 인자", "batch", "쓸 수 있는 인자", "per_rank_batch"], id="unknown-param"),
    pytest.param(("replicas",), {"nproc": 2, "per_rank_batch": "4"},
                 ["per_rank_batch", "1 이상 1024 이하의 정수", "'4'"], id="param-wrong-type"),
    pytest.param(("replicas",), {"nproc": 2, "steps": 0}, ["steps", "1 이상"], id="param-zero"),
    pytest.param(("faults",), {"nproc": 2, "mode": 3}, ["mode", "none, raise, hang, exit, kill, abort 중 하나", "3"], id="param-not-str"),
    pytest.param(("faults",), {"nproc": 2, "timeout": 0}, ["timeout", "0.001초 이상"], id="timeout=0"),
    pytest.param(("faults",), {"nproc": 2, "timeout": -5}, ["timeout", "-5"], id="timeout<0"),
    pytest.param(("faults",), {"nproc": 2, "timeout": float("nan")}, ["timeout", "유한한"], id="timeout-nan"),
    pytest.param(("faults",), {"nproc": 2, "timeout": float("inf")}, ["timeout", "유한한"], id="timeout-inf"),
    pytest.param(("faults",), {"nproc": 2, "timeout": True}, ["timeout", "True"], id="timeout-bool"),
    pytest.param(("faults",), {"nproc": 2, "timeout": 1e14}, ["timeout", "86400초", "100000000000000.0"], id="timeout-1e14"),
    pytest.param(("faults",), {"nproc": 2, "timeout": 86401}, ["timeout", "86400초", "86401"], id="timeout-day+1"),
    pytest.param((None,), {"nproc": 2}, ["실습 이름은 문자열", "None", "python -m labs list"], id="lab-None"),
    pytest.param((3,), {}, ["실습 이름은 문자열", "3"], id="lab-int"),
    pytest.param(("faults",), {"nproc": 2, "mode": "bogus"}, ["mode", "raise", "'bogus'"], id="faults-mode"),
    pytest.param(("faults",), {"nproc": 2, "mode": "raise", "fault_rank": 5}, ["fault_rank", "N-1=1"],
                 id="fault-rank-range"),
]


@pytest.mark.parametrize("args, kwargs, fragments", BAD_INPUT)
def test_bad_input_is_rejected_in_korean_before_spawning(spawn_forbidden, args, kwargs, fragments):
    if kwargs.get("backend") == "nccl" and dist.is_nccl_available() and labs.launch.torch.cuda.device_count():
        pytest.skip("this machine has NCCL and a GPU")
    started = time.monotonic()
    with pytest.raises(LabConfigError) as info:
        labs.run(*args, **kwargs)
    elapsed = time.monotonic() - started

    assert elapsed < 2.0, f"validation must not wait for anything, took {elapsed:.2f}s"
    message = str(info.value)
    assert has_hangul(message), message
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    assert isinstance(info.value, ValueError)  # LabConfigError is also a ValueError


# ----------------------------------------------------------------------------- backend choice

@pytest.fixture
def nccl_available(monkeypatch):
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)


def test_auto_picks_nccl_when_every_rank_gets_a_gpu(nccl_available):
    assert resolve_backend("auto", 4, gpus_per_node=4) == "nccl"
    assert resolve_backend("auto", 2, gpus_per_node=8) == "nccl"


def test_auto_falls_back_to_gloo_with_fewer_gpus_than_ranks(nccl_available):
    assert resolve_backend("auto", 5, gpus_per_node=4) == "gloo"
    assert resolve_backend("auto", 1, gpus_per_node=0) == "gloo"


def test_auto_is_gloo_without_nccl(monkeypatch):
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    assert resolve_backend("auto", 2, gpus_per_node=8) == "gloo"


def test_explicit_backends_pass_through(nccl_available):
    assert resolve_backend("gloo", 8, gpus_per_node=8) == "gloo"
    assert resolve_backend("nccl", 4, gpus_per_node=4) == "nccl"


def test_nccl_with_more_ranks_than_gpus_names_both_numbers(nccl_available):
    with pytest.raises(LabConfigError) as info:
        resolve_backend("nccl", 8, gpus_per_node=4)
    message = str(info.value)
    assert "N=8" in message
    assert "GPU 수(4)" in message
    assert "--nproc 4" in message
    assert "gloo" in message


def test_nccl_without_gpus_is_refused(nccl_available):
    with pytest.raises(LabConfigError, match="NCCL 백엔드에는 CUDA GPU"):
        resolve_backend("nccl", 1, gpus_per_node=0)


def test_unknown_backend_is_refused_before_counting_gpus():
    with pytest.raises(LabConfigError, match="알 수 없는 백엔드입니다: 'mpi'"):
        resolve_backend("mpi", 2, gpus_per_node=0)


# ----------------------------------------------------------------------------- concurrency

def test_two_concurrent_launches_use_different_ports(monkeypatch, warm_launcher, no_leftover_children):
    real_store = dist.TCPStore
    ports: list[int] = []
    lock = threading.Lock()
    # Both launches must hold their store at the same moment, so the ports are really
    # chosen concurrently (not one after the other is freed).
    both_listening = threading.Barrier(2, timeout=30)

    def recording_store(*args, **kwargs):
        store = real_store(*args, **kwargs)
        with lock:
            ports.append(store.port)
        both_listening.wait()
        return store

    monkeypatch.setattr(labs.launch.dist, "TCPStore", recording_store)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(labs.run, "faults", nproc=2, timeout=60) for _ in range(2)]
        results = [f.result(timeout=75) for f in futures]

    assert len(ports) == 2, ports
    assert ports[0] != ports[1], ports
    assert all(p > 0 for p in ports)
    for result in results:
        _assert_faults_ok(result, 2)  # a group mixing both launches would not sum to 3
    pids = {r["pid"] for result in results for r in result.ranks}
    assert len(pids) == 4
    no_leftover_children()


def test_cli_start_imports_no_rank_only_module():
    """`python -m labs` starts without the seconds-long imports only ranks need (scikit-learn for
    train's data): a fresh interpreter that loads the whole catalog and the CLI has none of them,
    and the fork server imports them once for every rank instead."""
    code = ("import sys, labs, labs.cli; labs.all_labs(); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'sklearn'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", f"labs를 불러오기만 해도 scikit-learn이 들어옵니다: {proc.stdout[:200]}"
    labs.launch._context()
    preload = multiprocessing.forkserver._forkserver._preload_modules
    assert set(labs.launch.RANK_IMPORTS) <= set(preload), preload
    assert any(m.startswith("sklearn") for m in labs.launch.RANK_IMPORTS)


# ----------------------------------------------------------------------------- the launcher ends: nothing stays

HANG = ["run", "faults", "--nproc", "3", "--param", "mode=hang", "--timeout", "100"]
# torch's compile cache (made on import of torch._dynamo, kept on purpose): not something a run leaves behind
_TORCH_CACHE = "torchinductor_"


def _session(sid: int) -> list[psutil.Process]:
    """Every live process of session ``sid`` (the launcher's: ranks, fork server and resource tracker
    stay in it even after they are orphaned and adopted by init)."""
    found = []
    for p in psutil.process_iter():
        try:
            if os.getsid(p.pid) == sid and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def _temp_left(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if not p.name.startswith(_TORCH_CACHE))


def _start_hanging_launcher(tmp: Path, args=HANG, nranks: int = 3, children: int = 0) -> subprocess.Popen:
    """`python -m labs run faults --param mode=hang` (or ``args``) in a session of its own, TMPDIR=``tmp``;
    returns once every process is up (with at least ``children`` processes the ranks started) and every rank
    has reached the hang (its stack pipe is idle)."""
    env = clean_env(TMPDIR=str(tmp))
    launcher = subprocess.Popen([sys.executable, "-m", "labs", *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    while True:
        procs = _session(launcher.pid)
        ranks = [p for p in procs if p.pid != launcher.pid and "forkserver" in " ".join(p.cmdline())
                 and p.ppid() != launcher.pid]
        # launcher + fork server + resource tracker + the ranks, all idle (past import and setup)
        up = len(procs) == 3 + nranks if not children else len(procs) >= 3 + nranks + children
        if up and len(ranks) == nranks and _idle(ranks):
            return launcher
        assert launcher.poll() is None, launcher.communicate()
        assert time.monotonic() < deadline, f"런처와 랭크가 120초 안에 모두 뜨지 않았습니다: {describe(procs)}"
        time.sleep(0.3)


def _sigkill_and_wait(launcher: subprocess.Popen, tmp: Path) -> list[psutil.Process]:
    """SIGKILL the launcher; what of its session is still alive 15 s later (TMPDIR gets 10 s more to empty)."""
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.communicate(timeout=60)
    left = _wait_gone(launcher.pid, 15)
    deadline = time.monotonic() + 10
    while _temp_left(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _idle(procs: list[psutil.Process], seconds: float = 1.0) -> bool:
    try:
        before = [sum(p.cpu_times()[:2]) for p in procs]
        time.sleep(seconds)
        return all(sum(p.cpu_times()[:2]) - b < 0.1 * seconds for p, b in zip(procs, before))
    except psutil.Error:
        return False


def _kill_session(sid: int) -> None:
    for p in _session(sid):
        with contextlib.suppress(psutil.Error):
            p.kill()


def _wait_gone(sid: int, seconds: float) -> list[psutil.Process]:
    deadline = time.monotonic() + seconds
    while True:
        left = _session(sid)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("how, code", [
    pytest.param("TERM", EXIT_SIGNAL + signal.SIGTERM, id="SIGTERM"),
    pytest.param("HUP", EXIT_SIGNAL + signal.SIGHUP, id="SIGHUP"),
    pytest.param("INT-group", EXIT_SIGNAL + signal.SIGINT, id="ctrl-c"),
    pytest.param("TERM-group", EXIT_SIGNAL + signal.SIGTERM, id="group-SIGTERM"),
    pytest.param("KILL", -9, id="SIGKILL"),
])
def test_ending_the_launcher_leaves_no_process_and_no_temp_folder(run_tmpdir, how, code):
    """F1: however the launcher ends, no rank, fork server or resource tracker outlives it by more than a
    few seconds, TMPDIR is left as it was, and INT/TERM/HUP end in one Korean line and 128 + the signal."""
    launcher = _start_hanging_launcher(run_tmpdir)
    sid = launcher.pid
    try:
        name, _, group = how.partition("-")
        sig = getattr(signal, f"SIG{name}")
        (os.killpg if group else os.kill)(sid, sig)
        out, err = launcher.communicate(timeout=60)
        left = _wait_gone(sid, 15)
    finally:
        _kill_session(sid)
    assert not left, f"런처가 끝난 뒤에도 프로세스가 남았습니다: {describe(left)}"
    assert launcher.returncode == code, (launcher.returncode, err[-2000:])
    assert _temp_left(run_tmpdir) == [], f"TMPDIR에 남은 것: {_temp_left(run_tmpdir)}"
    if how != "KILL":
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and has_hangul(lines[0]) and "중단" in lines[0], err[-3000:]
        assert "Traceback" not in err and "leaked" not in err
        assert out == ""


HANGING_DDP = """import torch.distributed as dist
from torch import nn


class BucketedDDP(nn.Module):
    def __init__(self, module, bucket_cap_mb=25):
        super().__init__()
        self.module = module

    def forward(self, *args):
        return self.module(*args)

    def finish_gradient_synchronization(self):
        dist.recv(next(self.module.parameters()).detach().clone(), src=(dist.get_rank() + 1) % 2)
"""


@pytest.mark.timeout(240)
def test_a_grade_ended_by_sigterm_says_so_in_one_korean_line(tmp_path):
    """The grader goes through the CLI's handler too: SIGTERM while the reader's class hangs ends in
    143 and one Korean line, nothing left (before, grade skipped the handler: 143 and no word)."""
    reader = tmp_path / "hangs.py"
    reader.write_text(HANGING_DDP, encoding="utf-8")
    launcher = _start_hanging_launcher(tmp_path, ("grade", str(reader), "--timeout", "200"), nranks=2)
    sid = launcher.pid
    try:
        os.kill(sid, signal.SIGTERM)
        out, err = launcher.communicate(timeout=60)
        left = _wait_gone(sid, 15)
    finally:
        _kill_session(sid)
    assert not left, describe(left)
    assert launcher.returncode == EXIT_SIGNAL + signal.SIGTERM, (launcher.returncode, err[-2000:])
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "중단" in lines[0] and has_hangul(lines[0]), err[-3000:]


@pytest.mark.timeout(240)
def test_a_grade_killed_with_sigkill_leaves_no_folder(tmp_path, run_tmpdir):
    """SIGKILL of `labs grade` while the reader's class hangs: the launcher cannot clean up, so its ranks remove its
    labs-grade-* folder (their stack notes) before they end (before, rank0.json and rank1.json stayed in TMPDIR)."""
    reader, tmp = tmp_path / "src" / "hangs.py", run_tmpdir
    reader.parent.mkdir()
    reader.write_text(HANGING_DDP, encoding="utf-8")
    launcher = _start_hanging_launcher(tmp, ("grade", str(reader), "--timeout", "200"), nranks=2)
    sid = launcher.pid
    try:
        assert any(p.name.startswith("labs-grade-") for p in tmp.iterdir()), _temp_left(tmp)
        left = _sigkill_and_wait(launcher, tmp)
    finally:
        _kill_session(sid)
    assert not left, describe(left)
    assert _temp_left(tmp) == [], f"TMPDIR에 남은 것: {_temp_left(tmp)}"


# A graded class that leaves things a rank's own cleanup cannot reach: a temp folder and a child process of its own
# (both made in the constructor), then rank FAILING raises and the other hangs in a receive (FAILING=-1: both hang).
LITTERING_DDP = HANGING_DDP.replace("import torch.distributed", "import subprocess\nimport tempfile\n\nimport torch.distributed").replace(
    "        self.module = module\n",
    "        self.module = module\n        self.folder = tempfile.mkdtemp(prefix='reader-')\n"
    "        self.child = subprocess.Popen(['sleep', '300'])\n").replace(
    "    def finish_gradient_synchronization(self):\n",
    "    def finish_gradient_synchronization(self):\n        if dist.get_rank() == FAILING:\n"
    "            raise RuntimeError('the reader raised')\n")


def _littering_file(tmp_path: Path, failing: int) -> Path:
    reader = tmp_path / "src" / "littering.py"
    reader.parent.mkdir()
    reader.write_text(f"FAILING = {failing}\n" + LITTERING_DDP, encoding="utf-8")
    return reader


@pytest.mark.timeout(240)
def test_sigkill_with_a_frozen_rank_ends_every_process_the_ranks_started(tmp_path, run_tmpdir):
    """Issue 39: SIGKILL of the launcher while one rank is frozen (SIGSTOP) left that rank, and a graded file's own
    child processes and temp folders outlived the ranks. The frozen rank is woken by its parent's death
    (PR_SET_PDEATHSIG → SIGCONT), each rank ends its whole process group, and the ranks' temp files live in the
    run's folder, which the ranks remove."""
    tmp = run_tmpdir
    reader = _littering_file(tmp_path, failing=-1)
    launcher = _start_hanging_launcher(tmp, ("grade", str(reader), "--timeout", "200"), nranks=2, children=2)
    sid = launcher.pid
    try:
        ranks = [p for p in _session(sid) if "forkserver" in " ".join(p.cmdline()) and p.ppid() != sid]
        frozen = max(ranks, key=lambda p: p.pid)
        frozen.suspend()
        assert any(p.name() == "sleep" for p in _session(sid)), describe(_session(sid))
        left = _sigkill_and_wait(launcher, tmp)
    finally:
        _kill_session(sid)
    assert not left, describe(left)
    assert _temp_left(tmp) == [], f"TMPDIR에 남은 것: {_temp_left(tmp)}"


@pytest.mark.timeout(240)
def test_a_failing_rank_takes_the_others_processes_and_temp_files_along(tmp_path, run_tmpdir):
    """Issue 39: when one rank raised, the ranks the launcher stopped kept their temp folders, and a graded file's
    child processes stayed. Now the launcher removes the run's folder and ends each rank's process group."""
    tmp = run_tmpdir
    reader = _littering_file(tmp_path, failing=1)
    grade = subprocess.Popen([sys.executable, "-m", "labs", "grade", str(reader), "--timeout", "100"],
                             env=clean_env(TMPDIR=str(tmp)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, start_new_session=True)
    try:
        out, err = grade.communicate(timeout=200)
        left = _wait_gone(grade.pid, 10)
    finally:
        _kill_session(grade.pid)
    assert "littering.py:" in out, (out[-2000:], err[-2000:])  # 예외가 난 줄을 짚었다
    assert not left, describe(left)
    assert _temp_left(tmp) == [], f"TMPDIR에 남은 것: {_temp_left(tmp)}"


@pytest.mark.timeout(240)
def test_a_frozen_rank_is_named_as_frozen(tmp_path):
    """Issue 39: a rank stopped with SIGSTOP cannot send its stack; it was reported as "스택을 읽지 못함" and the
    rank waiting for it took the blame. Now its line says it is stopped and the others still say where they wait."""
    launcher = _start_hanging_launcher(tmp_path, ["run", "faults", "--nproc", "3", "--param", "mode=hang",
                                                  "--param", "fault_rank=2", "--timeout", "40"])
    sid = launcher.pid
    try:
        ranks = sorted((p for p in _session(sid) if "forkserver" in " ".join(p.cmdline()) and p.ppid() != sid),
                       key=lambda p: p.pid)
        ranks[0].suspend()
        out, err = launcher.communicate(timeout=120)
    finally:
        _kill_session(sid)
    assert launcher.returncode == 3, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip().startswith("- 랭크")]
    assert len(lines) == 3 and sum(STOPPED in line for line in lines) == 1, err[-3000:]
    assert any(re.search(r"랭크 2: 집합 통신 밖에서 멈춤", line) for line in lines) or any(
        "랭크 2: " + STOPPED in line for line in lines), err[-3000:]


def test_a_rank_inside_backward_is_said_to_wait_there():
    """DDP's All-Reduce runs from autograd's C++ engine: a rank stuck in loss.backward() has no c10d frame, and
    was called "집합 통신 밖에서 멈춤" (the culprit's words). Its stack now reads as waiting in the backward."""
    dump = ('  File "/x/torch/autograd/graph.py", line 829 in _engine_run_backward\n'
            '  File "/x/torch/_tensor.py", line 625 in backward\n'
            '  File "/x/labs/ddp/train_script.py", line 275 in train_one_epoch\n')
    assert describe_faulthandler(dump) == f"{BACKWARD} (train_script.py 275행 train_one_epoch())"
    assert describe_faulthandler(dump.split("\n", 2)[2]).startswith("집합 통신 밖에서 멈춤")


# ----------------------------------------------------------------------------- a Jupyter kernel that ran a lab

KERNEL_CELL = """import atexit
import labs

labs.run("faults", nproc=2).assert_ok()
atexit.register(lambda: open({exited!r}, "w").write("atexit"))
"""


@pytest.mark.timeout(240)
def test_a_kernel_that_ran_a_lab_exits_normally_and_leaves_no_folder(tmp_path, run_tmpdir):
    """Issue 39: ipykernel signals its children at shutdown and waits; the resource tracker ignores SIGTERM, so a
    kernel that had run a lab was killed by jupyter_client (no atexit) and left multiprocessing's pymp-* folder,
    one per chapter of `make book`. Now the kernel's own atexit runs and TMPDIR is left as it was."""
    from jupyter_client.manager import KernelManager

    tmp, exited = run_tmpdir, tmp_path / "exited"
    manager = KernelManager(kernel_name="python3")
    manager.start_kernel(env=clean_env(TMPDIR=str(tmp)))
    client = manager.client()
    try:
        client.start_channels()
        client.wait_for_ready(timeout=60)
        reply = client.execute_interactive(KERNEL_CELL.format(exited=str(exited)), timeout=120)
        assert reply["content"]["status"] == "ok", reply["content"]
        assert any(p.name.startswith("pymp-") for p in tmp.iterdir()), _temp_left(tmp)  # 포크 서버를 썼다
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=False)
    assert exited.exists(), "커널이 atexit을 돌리지 못하고 강제로 끝났습니다(SIGKILL)"
    assert _temp_left(tmp) == [], f"TMPDIR에 남은 것: {_temp_left(tmp)}"


# ----------------------------------------------------------------------------- a script without the main guard

SCRIPT = """import labs

result = labs.run("faults", nproc=2)
print("합계", result.ranks[0]["sum"])
"""
GUARDED = SCRIPT.replace("result = labs.run", 'if __name__ == "__main__":\n    result = labs.run').replace(
    "\nprint(", "\n    print(")


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path, no_leftover_children):
    """F8: the ranks re-import the script (multiprocessing's spawn and forkserver do), so an unguarded
    labs.run runs again in each of them; the launcher says so in Korean, not "OOM or a signal"."""
    plain, guarded = tmp_path / "plain.py", tmp_path / "guarded.py"
    plain.write_text(SCRIPT, encoding="utf-8")
    guarded.write_text(GUARDED, encoding="utf-8")
    env = clean_env(PYTHONPATH=str(Path(labs.__file__).resolve().parent.parent))

    bad = subprocess.run([sys.executable, str(plain)], capture_output=True, text=True, timeout=120, env=env)
    good = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, timeout=120, env=env)

    assert bad.returncode != 0 and "MainGuardMissing" in bad.stderr, bad.stderr[-3000:]
    last = bad.stderr.strip().splitlines()[-1]
    assert 'if __name__ == "__main__":' in last and str(plain) in last and has_hangul(last), last
    assert "OOM" not in bad.stderr and "합계" not in bad.stdout
    assert good.returncode == 0, good.stderr[-3000:]
    assert good.stdout.strip() == "합계 3.0"
    no_leftover_children()


def test_a_script_read_from_stdin_runs_its_ranks(tmp_path, no_leftover_children):
    """``python - <<EOF``: the main module names '<stdin>', which a new process cannot run again;
    the ranks start as for ``python -c`` (on the old launcher every rank died with exit code 1)."""
    env = clean_env(PYTHONPATH=str(Path(labs.__file__).resolve().parent.parent))
    proc = subprocess.run([sys.executable, "-"], input=SCRIPT, capture_output=True, text=True, timeout=120,
                          env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "합계 3.0"
    no_leftover_children()


def test_a_stop_signal_during_the_cleanup_is_raised_after_it():
    """The first SIGTERM raises at once; one that comes while the ranks are being stopped is not lost."""
    from labs.errors import LaunchInterrupted
    from labs.launch import _StopSignals  # noqa: PLC2701  (the launcher's own signal latch, tested directly)

    first = _StopSignals()
    with pytest.raises(LaunchInterrupted) as info:
        first.handler(signal.SIGTERM, None)
    assert info.value.code == 143 and "SIGTERM" in str(info.value) and has_hangul(str(info.value))
    first.hold()
    first.handler(signal.SIGHUP, None)
    first.release()  # already raised once: the caller is leaving anyway

    during = _StopSignals()
    during.hold()
    during.handler(signal.SIGHUP, None)  # while cleaning up: nothing yet
    with pytest.raises(LaunchInterrupted) as info:
        during.release()
    assert info.value.code == 129


def test_run_in_place_refuses_outside_torchrun(monkeypatch):
    for key in labs.launch.TORCHRUN_VARIABLES:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RANK", "0")  # a stale variable is not a torchrun rank
    with pytest.raises(LabConfigError, match="torchrun이 띄운 랭크가 아닙니다.*labs.run"):
        labs.launch.run_in_place("faults")
