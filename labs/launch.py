"""The one launcher: run a lab's rank function on N real OS processes, or join torchrun's.

Spawn mode (notebooks, tests, ``python -m labs run``): the caller holds a TCPStore on
127.0.0.1 with a port the OS picked (so two launches never collide and no fixed port can be
busy), starts N processes from a fork server that has already imported torch, and gathers each
rank's record from a queue. Any rank's exception is re-raised here with its rank and traceback,
and the whole call has a deadline; in every case all ranks are stopped before returning.

In-place mode (``torchrun ... -m labs run``): this process already is a rank; it joins the
group from torchrun's environment and rank 0 gathers the records.
"""

from __future__ import annotations

import faulthandler
import math
import multiprocessing as mp
import os
import pickle
import queue as queue_mod
import re
import signal
import sys
import tempfile
import time
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from .context import RankContext, check_nproc, device_for, resolve_backend
from .errors import LabConfigError, LabTimeoutError, RankCrashedError, RankFailedError
from . import replay
from .registry import get_lab, lesson_modules
from .result import LabResult

HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 120.0
# How long a rank may be seen dead before its result is given up for lost.
_EXIT_GRACE = 2.0
# After a first error, how long to listen for the root cause (a crashed or raising peer).
_CAUSE_GRACE = 0.5
# Errors a rank gets only because a *peer* failed: never the root cause when another exists.
_PEER_FAILURE = re.compile(r"Connection (reset|closed) by peer|Broken pipe|Socket closed|Timed out waiting")
_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
_RANK_TIMEOUT_MARGIN = 30.0
# Imported once by the fork server, not by every rank: DDP's constructor imports torch._dynamo, and
# train's ranks load their data with scikit-learn (labs.train_script imports it only then); each
# costs seconds of CPU per process.
RANK_IMPORTS = ("torch._dynamo", "sklearn.datasets", "sklearn.model_selection", "sklearn.preprocessing")


def run(lab_name: str, nproc: int | None = None, backend: str = "auto",
        timeout: float = DEFAULT_TIMEOUT, **params) -> LabResult:
    """Run lab ``lab_name`` on ``nproc`` real ranks and return its :class:`LabResult`.

    This is the entry used by chapters, tests and the CLI. Bad input raises
    :class:`~labs.errors.LabConfigError` before anything is spawned.
    """
    lab = get_lab(lab_name)
    nproc = lab.default_nproc if nproc is None else nproc
    check_nproc(nproc)
    check_timeout(timeout)
    params = lab.resolve_params(params, nproc)
    resolved = resolve_backend(backend, nproc)
    recording = replay.Recording(lab.name, nproc, resolved, params, timeout, lab.folders, lab.input_files)
    recorded = recording.load()
    if recorded is not None:
        return _replayed(lab, recorded, resolved, params)
    started = time.perf_counter()
    try:
        records = spawn_ranks(lab.name, nproc, resolved, params, timeout)
    except (RankFailedError, RankCrashedError, LabTimeoutError) as err:
        recording.save({"error": err})
        raise
    wall = time.perf_counter() - started
    recording.save({"records": records, "wall_seconds": wall})
    result = lab.finish(records, resolved, params)
    result.wall_seconds = wall
    return result


def _replayed(lab, recorded: dict, backend: str, params: dict) -> LabResult:
    """A recorded run (see :mod:`labs.replay`): its error raised again, or its records summarized anew."""
    if "error" in recorded:
        raise recorded["error"]
    result = lab.finish(recorded["records"], backend, params)
    result.wall_seconds = recorded["wall_seconds"]
    result.replayed = True
    return result


def check_timeout(timeout) -> None:
    ok = isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and math.isfinite(timeout) and timeout > 0
    if not ok:
        raise LabConfigError(f"timeout은 0보다 큰 유한한 초 단위 숫자여야 합니다. 받은 값: {timeout!r}")


def in_torchrun() -> bool:
    """True when this process was started by torchrun (or another env:// launcher)."""
    env = os.environ
    return "TORCHELASTIC_RUN_ID" in env or all(k in env for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR"))


def run_in_place(lab_name: str, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 **params) -> LabResult | None:
    """Run as one rank of a torchrun job. Returns the result on rank 0, ``None`` elsewhere."""
    lab = get_lab(lab_name)
    check_timeout(timeout)
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    params = lab.resolve_params(params, world_size)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world_size)))
    resolved = resolve_backend(backend, local_world)
    dist.init_process_group(resolved, timeout=timedelta(seconds=timeout))
    try:
        ctx = RankContext(rank, world_size, local_rank, resolved, device_for(resolved, local_rank))
        record = lab.run_rank(ctx, params)
        gathered = [None] * world_size if rank == 0 else None
        dist.gather_object(record, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    return lab.finish(gathered, resolved, params) if rank == 0 else None


def _context() -> mp.context.BaseContext:
    # A fork server imports torch once; every later rank is a cheap fork of it, and it is a
    # fresh process, so forking never copies a Jupyter kernel's threads.
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["labs.launch", *RANK_IMPORTS, *lesson_modules()])
        return ctx
    return mp.get_context("spawn")


def spawn_ranks(lab_name: str, nproc: int, backend: str, params: dict, timeout: float) -> list:
    """Start ``nproc`` processes, each running the lab's rank function; return records by rank."""
    store = dist.TCPStore(HOST, 0, None, True, timedelta(seconds=timeout + _RANK_TIMEOUT_MARGIN),
                          wait_for_workers=False)
    ctx = _context()
    results = ctx.Queue()
    stacks = tempfile.TemporaryDirectory(prefix="ddp-lab-stacks-")
    procs = [
        ctx.Process(
            target=_rank_main,
            args=(lab_name, rank, nproc, backend, store.port, params, results, timeout, stacks.name),
            name=f"{lab_name}-rank{rank}",
            daemon=True,
        )
        for rank in range(nproc)
    ]
    for p in procs:
        p.start()
    ok = False
    try:
        records = _collect(lab_name, procs, results, timeout, Path(stacks.name))
        ok = True
        return [records[r] for r in range(nproc)]
    finally:
        _stop(procs, graceful=ok)
        results.close()
        results.cancel_join_thread()
        stacks.cleanup()
        del store


def _collect(lab_name: str, procs: list, results, timeout: float, stack_dir: Path) -> dict:
    deadline = time.monotonic() + timeout
    records: dict[int, object] = {}
    seen_dead: dict[int, float] = {}
    while len(records) < len(procs):
        now = time.monotonic()
        if now >= deadline:
            missing = [r for r in range(len(procs)) if r not in records]
            raise LabTimeoutError(lab_name, timeout, missing, _where_stuck(procs, missing, stack_dir))
        try:
            kind, rank, payload = results.get(timeout=min(0.2, deadline - now))
        except queue_mod.Empty:
            for rank, p in enumerate(procs):
                if rank in records or p.exitcode is None:
                    continue
                first_seen = seen_dead.setdefault(rank, now)
                if now - first_seen > _EXIT_GRACE:
                    raise RankCrashedError(lab_name, rank, p.exitcode) from None
            continue
        if kind == "error":
            raise _root_cause(lab_name, procs, results, records, rank, payload)
        records[rank] = pickle.loads(payload)
    return records


def _root_cause(lab_name: str, procs: list, results, records: dict, rank: int, tb: str) -> Exception:
    """The error to show: a crashed rank, else a rank's own failure, not its peers' echoes of it."""
    errors = {rank: tb}
    until = time.monotonic() + _CAUSE_GRACE
    while time.monotonic() < until:
        try:
            kind, other, payload = results.get(timeout=0.05)
        except queue_mod.Empty:
            continue
        if kind == "error":
            errors.setdefault(other, payload)
    for r, p in enumerate(procs):
        if r not in errors and r not in records and p.exitcode not in (None, 0):
            return RankCrashedError(lab_name, r, p.exitcode)
    own = [r for r, text in errors.items() if not _PEER_FAILURE.search(text)]
    first = own[0] if own else rank
    return RankFailedError(lab_name, first, errors[first])


def _where_stuck(procs: list, missing: list[int], stack_dir: Path) -> dict[int, str]:
    """Ask each unfinished rank for its Python stack; return its innermost lab frame per rank."""
    if _STACK_SIGNAL is None:
        return {}
    for r in missing:
        if procs[r].is_alive():
            os.kill(procs[r].pid, _STACK_SIGNAL)
    time.sleep(0.5)
    where = {}
    for r in missing:
        path = stack_dir / f"rank{r}.txt"
        text = path.read_text(errors="replace") if path.exists() else ""
        where[r] = _describe_stack(text)
    return where


def _describe_stack(text: str) -> str:
    # faulthandler prints the most recent call first: 'File "…/x.py", line 12 in fn'
    frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', text)
    if not frames:
        return "스택을 읽지 못함"
    # DDP's own collectives (buffer broadcast, bucket rebuild) start in C++ from its forward.
    in_collective = any("distributed_c10d" in f or "torch/distributed" in f or f.endswith("nn/parallel/distributed.py")
                        for f, _, _ in frames)
    lab_frames = [(f, line, fn) for f, line, fn in frames if "/labs/" in f and not f.endswith("launch.py")]
    f, line, fn = (lab_frames or frames)[0]
    place = f"{Path(f).name} {line}행 {fn}()"
    return f"집합 통신에서 다른 랭크를 기다리는 중 ({place})" if in_collective else f"집합 통신 밖에서 멈춤 ({place})"


def _stop(procs: list, graceful: bool) -> None:
    if graceful:
        deadline = time.monotonic() + 5.0
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join()


def _rank_main(lab_name: str, rank: int, world_size: int, backend: str, port: int,
               params: dict, results, timeout: float, stack_dir: str) -> None:
    """Body of one spawned rank process."""
    if _STACK_SIGNAL is not None:  # the launcher asks a stuck rank for its stack with this signal
        stack_file = open(Path(stack_dir) / f"rank{rank}.txt", "w")
        faulthandler.register(_STACK_SIGNAL, file=stack_file, all_threads=False)
    try:
        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this machine
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        # 랭크 쪽 제한 시간은 런처의 마감보다 길게 둔다: 멈춘 랭크는 런처가 먼저 찾아 보고한다.
        rank_timeout = timedelta(seconds=timeout + _RANK_TIMEOUT_MARGIN)
        store = dist.TCPStore(HOST, port, None, False, rank_timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=rank_timeout)
        ctx = RankContext(rank, world_size, rank, backend, device_for(backend, rank))
        record = get_lab(lab_name).run_rank(ctx, params)
        payload = pickle.dumps(record)
    except BaseException:
        results.put(("error", rank, traceback.format_exc()))
        return
    results.put(("ok", rank, payload))
    dist.destroy_process_group()
