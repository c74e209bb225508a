"""The launcher on real OS processes: results by rank, failures named by rank, no leftovers.

Every test here starts a real gloo process group (except the bad-input ones, which must not
start anything). The ``faults`` lab does one all_reduce of rank+1, so N ranks must all see
1 + 2 + … + N.
"""

from __future__ import annotations

import multiprocessing.forkserver
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch.distributed as dist

import labs
import labs.launch
from labs.context import resolve_backend
from labs.errors import LabConfigError, LabTimeoutError, RankCrashedError, RankFailedError

from conftest import has_hangul, live_children

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
    pytest.param(("faults",), {"nproc": 2, "mode": 3}, ["mode", "none, raise, hang, exit 중 하나", "3"], id="param-not-str"),
    pytest.param(("faults",), {"nproc": 2, "timeout": 0}, ["timeout", "0보다 큰"], id="timeout=0"),
    pytest.param(("faults",), {"nproc": 2, "timeout": -5}, ["timeout", "-5"], id="timeout<0"),
    pytest.param(("faults",), {"nproc": 2, "timeout": float("nan")}, ["timeout", "유한한"], id="timeout-nan"),
    pytest.param(("faults",), {"nproc": 2, "timeout": float("inf")}, ["timeout", "유한한"], id="timeout-inf"),
    pytest.param(("faults",), {"nproc": 2, "timeout": True}, ["timeout", "True"], id="timeout-bool"),
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
