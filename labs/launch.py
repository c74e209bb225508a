"""The one launcher: run a lab's rank function on N real OS processes, or join torchrun's.

Spawn mode (notebooks, tests, ``python -m labs run``): the caller holds a TCPStore on
127.0.0.1 with a port the OS picked (so two launches never collide and no fixed port can be
busy), starts N processes from a fork server that has already imported torch, and reads each
rank's record from its own pipe. Any rank's exception is re-raised here with its rank and
traceback, and the whole call has a deadline; in every case all ranks are stopped before
returning. Nothing outlives the launcher: SIGTERM and SIGHUP run the same cleanup as an error,
Ctrl-C reaches only the launcher, and each rank watches the launcher and ends itself (removing
the launcher's multiprocessing folder) when it is gone, even after SIGKILL.

In-place mode (``torchrun ... -m labs run``): this process already is a rank; it joins the
group from torchrun's environment, rank 0 gathers the records, and each rank's watchdog names the
rank that hung (:mod:`labs.hangwatch`).
"""

from __future__ import annotations

import contextlib
import faulthandler
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, cast

import torch
import torch.distributed as dist

from . import replay
from .context import RankContext, check_nproc, device_for, resolve_backend
from .errors import (
    EXIT_MAIN_REIMPORTED,
    LabConfigError,
    LabTimeoutError,
    LaunchInterrupted,
    MainGuardMissing,
    PeerLostError,
    RankCrashedError,
    RankFailedError,
)
from .hangwatch import HangWatch, store_timeout
from .kernel_exit import stop_helpers_at_kernel_shutdown
from .rank_exit import end_group, end_with_parent, lead_own_group, leave_fork_server, use_temp_dir
from .registry import Lab, get_lab, lesson_modules
from .result import LabResult
from .stacks import STOPPED, describe_faulthandler, stopped
from .torchrun import VARIABLES as TORCHRUN_VARIABLES
from .torchrun import detect as detect_torchrun
from .torchrun import in_torchrun

__all__ = ["run", "run_in_place", "in_torchrun", "check_timeout", "spawn_ranks"]

HOST = "127.0.0.1"
DEFAULT_TIMEOUT = 120.0
MAX_TIMEOUT = 86400.0  # one day: beyond it no deadline means anything (and timedelta overflows near 8.6e13 s)
MIN_TIMEOUT = 0.001  # a millisecond: the store's deadlines and the launcher's polls count in milliseconds (1e-320 is no deadline)
# After a first error, how long to listen for the root cause (a crashed or raising peer).
_CAUSE_GRACE = 0.5
# Errors a rank gets only because a *peer* failed: never the root cause when another exists.
_PEER_FAILURE = re.compile(r"Connection (reset|closed) by peer|Broken pipe|Socket closed|Timed out waiting")
_STACK_SIGNAL = getattr(signal, "SIGUSR1", None)
_STOP_SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))
_RANK_TIMEOUT_MARGIN = 30.0
_SOCKET_PATH_MAX = 107  # bytes of an AF_UNIX socket path on Linux (sun_path is 108 with the closing NUL)
MIN_TEMP_SPACE = 16 << 20  # bytes free in TMPDIR before a run: room for the ranks' temporary files and checkpoints
_STDERR_TAIL = 8192  # bytes of each rank's standard error kept for a crash report
# Imported once by the fork server, not by every rank: DDP's constructor imports torch._dynamo, and
# train's ranks load their data with scikit-learn (labs.ddp.train_script imports it only then); each
# costs seconds of CPU per process.
RANK_IMPORTS = ("torch._dynamo", "sklearn.datasets", "sklearn.model_selection", "sklearn.preprocessing")


def run(lab_name: str, nproc: int | None = None, backend: str = "auto",
        timeout: float = DEFAULT_TIMEOUT, **params) -> LabResult:
    """Run lab ``lab_name`` on ``nproc`` real ranks and return its :class:`LabResult`.

    This is the entry used by chapters, tests and the CLI. Bad input raises
    :class:`~labs.errors.LabConfigError` before anything is spawned.
    """
    if getattr(mp.current_process(), "_inheriting", False):
        os._exit(EXIT_MAIN_REIMPORTED)  # a rank re-running the main script: the launcher explains
    lab = get_lab(_checked_name(lab_name))
    nproc = lab.default_nproc if nproc is None else nproc
    check_nproc(nproc)
    check_timeout(timeout)
    params = lab.resolve_params(params, nproc)
    resolved = resolve_backend(backend, nproc)
    recording = replay.Recording(lab.name, nproc, resolved, params, timeout, lab.folders, lab.input_files)
    recorded = recording.load()
    if recorded is not None:
        return _replayed(lab, recorded, resolved, params)
    _tell_leftovers()
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


_told: set[str] = set()


def _tell_leftovers() -> None:
    """Say once per process which torchrun variables left in the shell are being ignored."""
    notice = detect_torchrun().notice()
    if notice and notice not in _told:
        _told.add(notice)
        print(notice, file=sys.stderr, flush=True)


def _checked_name(lab_name) -> str:
    if not isinstance(lab_name, str):
        raise LabConfigError(f"실습 이름은 문자열이어야 합니다(예: \"replicas\"). 받은 값: {lab_name!r} "
                             "(목록은 `python -m labs list`).")
    return lab_name


def _replayed(lab, recorded: dict, backend: str, params: dict) -> LabResult:
    """A recorded run (see :mod:`labs.replay`): its error raised again, or its records summarized anew."""
    if "error" in recorded:
        raise recorded["error"]
    result = lab.finish(recorded["records"], backend, params)
    result.wall_seconds = recorded["wall_seconds"]
    result.replayed = True
    return result


def check_timeout(timeout) -> None:
    ok = (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and math.isfinite(timeout)
          and MIN_TIMEOUT <= timeout <= MAX_TIMEOUT)
    if not ok:
        raise LabConfigError(f"timeout은 {MIN_TIMEOUT:g}초 이상 {MAX_TIMEOUT:g}초(하루) 이하의 유한한 초 단위 숫자여야 "
                             f"합니다. 받은 값: {timeout!r}")


def run_in_place(lab_name: str, backend: str = "auto", timeout: float = DEFAULT_TIMEOUT,
                 **params) -> LabResult | None:
    """Run as one rank of a torchrun job. Returns the result on rank 0, ``None`` elsewhere."""
    lab = get_lab(_checked_name(lab_name))
    check_timeout(timeout)
    env = detect_torchrun()
    if not env.in_place:
        raise LabConfigError(f"torchrun이 띄운 랭크가 아닙니다({env.reason or '변수 없음'}). "
                             "torchrun 없이 실행하려면 labs.run을 쓰세요.")
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    params = lab.resolve_params(params, world_size)
    local_rank = int(os.environ["LOCAL_RANK"])
    resolved = resolve_backend(backend, int(os.environ["LOCAL_WORLD_SIZE"]))
    temp_dir = tempfile.mkdtemp(prefix=f"labs-rank{rank}-")
    end_with_parent(os.getppid(), [temp_dir])  # torchrun의 에이전트가 죽으면(SIGKILL, OOM) 이 랭크도 끝난다
    use_temp_dir(temp_dir)
    try:
        gathered = _run_in_group(lab, rank, world_size, local_rank, resolved, timeout, params)
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)  # also when joining the group failed
    return lab.finish(gathered, resolved, params) if gathered is not None else None


def _run_in_group(lab: Lab, rank: int, world_size: int, local_rank: int, backend: str, timeout: float,
                  params: dict) -> list[Any] | None:
    """Join torchrun's group, run the lab's rank function, gather the records on rank 0 (None elsewhere)."""
    _join_attempt(backend, rank, world_size, timeout)
    watch = HangWatch(lab.name, rank, world_size, timeout)
    try:
        ctx = RankContext(rank, world_size, local_rank, backend, device_for(backend, local_rank))
        record = lab.run_rank(ctx, params)
        watch.finished()
        gathered: list[Any] | None = [None] * world_size if rank == 0 else None
        dist.gather_object(record, gathered, dst=0)
    except Exception as err:
        watch.absorb_echo()
        peer = lost_peer(err)
        if peer is not None:
            raise PeerLostError(lab.name, rank, peer, str(err).strip().splitlines()[0]) from None
        raise
    finally:
        watch.stop()
        dist.destroy_process_group()
    return gathered


def _short_socket_folder() -> None:
    """The fork server listens on a socket in multiprocessing's folder under TMPDIR (``pymp-…/listener-…``), and an
    AF_UNIX path holds at most 107 bytes: with a long TMPDIR (a cluster's home folder) nothing started ("AF_UNIX path
    too long"). Then that one folder goes to /tmp, removed at exit as multiprocessing removes its own."""
    config = mp.process.current_process()._config  # type: ignore[attr-defined]
    if config.get("tempdir") is not None:
        return
    if len(os.fsencode(tempfile.gettempdir())) + len("/pymp-12345678/listener-12345678") <= _SOCKET_PATH_MAX:
        return
    folder = tempfile.mkdtemp(prefix="pymp-", dir="/tmp")
    mp.util.Finalize(None, shutil.rmtree, args=(folder,), kwargs={"ignore_errors": True}, exitpriority=-100)
    config["tempdir"] = folder


def _context() -> mp.context.BaseContext:
    # A fork server imports torch once; every later rank is a cheap fork of it, and it is a
    # fresh process, so forking never copies a Jupyter kernel's threads.
    if "forkserver" in mp.get_all_start_methods():
        _short_socket_folder()
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["labs.launch", *RANK_IMPORTS, *lesson_modules()])
        stop_helpers_at_kernel_shutdown()  # 주피터 커널이 끝날 때 포크 서버가 커널을 붙잡지 않게
        return ctx
    return mp.get_context("spawn")


class _Rank:
    """One spawned rank: its process and the launcher's ends of its three pipes (record, stack, stderr)."""

    def __init__(self, ctx, lab_name: str, rank: int, args: tuple):
        self.rank = rank
        self.results, result_w = ctx.Pipe(duplex=False)
        self.stack, stack_w = ctx.Pipe(duplex=False)
        self.stderr, stderr_w = ctx.Pipe(duplex=False)
        self._child_ends = (result_w, stack_w, stderr_w)
        self.process = ctx.Process(target=_rank_main, args=(lab_name, rank, *args, *self._child_ends),
                                   name=f"{lab_name}-rank{rank}", daemon=True)
        self.tail = b""
        self.stderr_open = True

    def start(self) -> None:
        self.process.start()
        for end in self._child_ends:  # the rank holds its own copies now
            end.close()

    def forward_stderr(self) -> None:
        """Pass what the rank wrote to standard error on to the launcher's, keeping the last bytes."""
        try:
            data = os.read(self.stderr.fileno(), 65536)
        except OSError:
            data = b""
        if not data:
            self.stderr_open = False
            return
        self.tail = (self.tail + data)[-_STDERR_TAIL:]
        with contextlib.suppress(OSError):  # a closed terminal (SIGHUP) must not stop the cleanup
            os.write(2, data)

    def close(self) -> None:
        for conn in (self.results, self.stack, self.stderr):
            conn.close()


_REMOVED_IF_KILLED: list[str] = []


@contextlib.contextmanager
def removed_if_killed(path: str) -> Iterator[str]:
    """While inside: the ranks spawned now remove ``path`` if this launcher is killed (SIGKILL, OOM), since the
    launcher cannot clean up then. Its own exit removes the folder as usual."""
    _REMOVED_IF_KILLED.append(path)
    try:
        yield path
    finally:
        _REMOVED_IF_KILLED.remove(path)


def check_temp_space() -> None:
    """Refuse, before any rank starts, a TMPDIR too full for the ranks' temporary files and checkpoints."""
    folder = tempfile.gettempdir()
    free = shutil.disk_usage(folder).free
    if free < MIN_TEMP_SPACE:
        raise LabConfigError(f"임시 폴더 {folder}에 남은 공간이 {free / 1024:.0f} KiB뿐입니다. 랭크는 임시 파일과 "
                             f"체크포인트를 여기에 씁니다(최소 {MIN_TEMP_SPACE >> 20} MiB). 여유 있는 폴더를 TMPDIR로 "
                             "주세요(예: TMPDIR=$HOME/tmp).")


def spawn_ranks(lab_name: str, nproc: int, backend: str, params: dict, timeout: float) -> list:
    """Start ``nproc`` processes, each running the lab's rank function; return records by rank."""
    check_temp_space()
    store = dist.TCPStore(HOST, 0, None, True, timedelta(seconds=timeout + _RANK_TIMEOUT_MARGIN),
                          wait_for_workers=False)
    ctx = _context()
    temp_dir = tempfile.mkdtemp(prefix="labs-run-")  # the ranks' temporary files: removed below whatever happens
    # the fork server's socket folder, the ranks' and the callers' folders: a rank removes them if we are killed
    leftovers = [mp.util.get_temp_dir(), temp_dir, *_REMOVED_IF_KILLED]
    args = (nproc, backend, store.port, params, timeout, os.getpid(), leftovers, temp_dir)
    ranks: list[_Rank] = []
    ok = False
    with _stop_signals_raise() as stopping:
        try:
            ranks.extend(_Rank(ctx, lab_name, rank, args) for rank in range(nproc))  # pipes may fail (ulimit -n)
            with _main_without_missing_file():
                for r in ranks:
                    r.start()
            records = _collect(lab_name, ranks, timeout)
            ok = True
            return [records[r] for r in range(nproc)]
        finally:
            stopping.hold()  # a signal now must not cut the cleanup short: it is raised after it
            _stop(ranks, graceful=ok)
            for r in ranks:
                r.close()
            shutil.rmtree(temp_dir, ignore_errors=True)
            del store
            stopping.release()


@contextlib.contextmanager
def _main_without_missing_file():
    """A main module read from stdin (``python - <<EOF``) names a file that does not exist; a new
    process would try to run it again and die. Such a main is started like ``python -c``: not re-run."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or path is None or os.path.isfile(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


class _StopSignals:
    """The first SIGTERM/SIGHUP raises; one that comes during the cleanup waits until it is done."""

    def __init__(self):
        self.held = False
        self.raised = False
        self.pending: int | None = None

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        if self.pending is not None and not self.raised:
            self.raised = True
            raise LaunchInterrupted(self.pending)

    def handler(self, signum, frame):
        if self.held:
            self.pending = signum
        elif not self.raised:
            self.raised = True
            raise LaunchInterrupted(signum)


@contextlib.contextmanager
def _stop_signals_raise():
    """SIGTERM/SIGHUP become :class:`LaunchInterrupted` in the launcher, so its cleanup runs (main thread only)."""
    state = _StopSignals()
    if threading.current_thread() is not threading.main_thread():
        yield state
        return
    previous = {s: signal.signal(s, state.handler) for s in _STOP_SIGNALS}
    try:
        yield state
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _collect(lab_name: str, ranks: list[_Rank], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    records: dict[int, object] = {}
    errors: dict[int, str] = {}
    crashed: dict[int, int | None] = {}
    cause_until = None
    while len(records) < len(ranks):
        now = time.monotonic()
        if cause_until is not None and now >= cause_until:
            break
        if now >= deadline:
            missing = [r.rank for r in ranks if r.rank not in records]
            raise LabTimeoutError(lab_name, timeout, missing, _where_stuck(ranks, missing))
        pending = [r for r in ranks if r.rank not in records and r.rank not in errors and r.rank not in crashed]
        waiting = {r.results: r for r in pending}
        waiting.update({r.stderr: r for r in ranks if r.stderr_open})
        limit = min(deadline, cause_until or deadline) - now
        for conn in cast("list[Connection]", mp.connection.wait(list(waiting), timeout=min(0.5, max(0.0, limit)))):
            r = waiting[conn]
            if conn is r.stderr:
                r.forward_stderr()
                continue
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):  # the process ended without a word
                crashed[r.rank] = _exitcode(r)
                cause_until = cause_until or time.monotonic() + _CAUSE_GRACE
                continue
            if kind == "error":
                errors[r.rank] = payload
                cause_until = cause_until or time.monotonic() + _CAUSE_GRACE
            else:
                records[r.rank] = pickle.loads(payload)
    if crashed:
        _drain_stderr(ranks)
        rank, code = min(crashed.items())
        if code == EXIT_MAIN_REIMPORTED and all(c == code for c in crashed.values()):
            raise MainGuardMissing(lab_name, getattr(sys.modules.get("__main__"), "__file__", None))
        raise RankCrashedError(lab_name, rank, code, _tail_lines(ranks[rank].tail))
    if errors:
        own = [r for r, text in errors.items() if not _PEER_FAILURE.search(text)]
        first = own[0] if own else min(errors)
        raise RankFailedError(lab_name, first, errors[first])
    return records


def _exitcode(r: _Rank) -> int | None:
    r.process.join(timeout=2.0)
    return r.process.exitcode


def _drain_stderr(ranks: list[_Rank], seconds: float = 0.3) -> None:
    """Read what the ranks still have in their standard error pipes (a dying rank's last words)."""
    until = time.monotonic() + seconds
    while True:
        open_pipes = {r.stderr: r for r in ranks if r.stderr_open}
        ready = mp.connection.wait(list(open_pipes), timeout=max(0.0, until - time.monotonic())) if open_pipes else []
        if not ready:
            return
        for conn in ready:
            open_pipes[conn].forward_stderr()


def _tail_lines(data: bytes, lines: int = 10) -> str:
    text = data.decode(errors="replace").rstrip()
    return "\n".join(text.splitlines()[-lines:])


def _where_stuck(ranks: list[_Rank], missing: list[int]) -> dict[int, str]:
    """Ask each unfinished rank for its Python stack; return its innermost lab frame per rank."""
    if _STACK_SIGNAL is None:
        return {}
    for r in missing:
        if ranks[r].process.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(ranks[r].process.pid, _STACK_SIGNAL)
    texts = {r: b"" for r in missing}
    until = time.monotonic() + 2.0
    while time.monotonic() < until:
        pipes = {ranks[r].stack: r for r in missing}
        ready = cast("list[Connection]", mp.connection.wait(list(pipes), timeout=0.3 if all(texts.values()) else until - time.monotonic()))
        if not ready:
            break
        for conn in ready:
            chunk = os.read(conn.fileno(), 65536)
            texts[pipes[conn]] += chunk
    return {r: STOPPED if not text and stopped(ranks[r].process.pid or 0) else describe_faulthandler(text.decode(errors="replace"))
            for r, text in texts.items()}


def _join_attempt(backend: str, rank: int, world_size: int, timeout: float) -> None:
    """Join torchrun's group through its store, under a prefix of this attempt. torchrun's default (static)
    rendezvous keeps one TCPStore for every attempt (torch 2.13, ``StaticTCPRendezvous.next_rendezvous``), so
    after ``--max-restarts`` the new ranks read the dead ranks' gloo addresses and never connect."""
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    store, _, _ = next(dist.rendezvous("env://", timeout=store_timeout(timeout)))
    dist.init_process_group(backend, store=dist.PrefixStore(f"labs/attempt_{attempt}/", store), rank=rank,
                            world_size=world_size, timeout=store_timeout(timeout))


def _describe_stack(text: str) -> str:
    """A faulthandler dump as a Korean phrase (kept here for callers of the launcher's old helper)."""
    return describe_faulthandler(text)


def _stop(ranks: list[_Rank], graceful: bool) -> None:
    procs = [r.process for r in ranks if r.process.pid is not None]
    if graceful:  # the ranks leave the group on their own; their last words still reach stderr
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(p.is_alive() for p in procs):
            pipes = {r.stderr: r for r in ranks if r.stderr_open}
            sentinels = [p.sentinel for p in procs if p.is_alive()]
            for ready in mp.connection.wait([*pipes, *sentinels], timeout=deadline - time.monotonic()):
                if ready in pipes:
                    pipes[ready].forward_stderr()
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(timeout=2.0)
        if p.is_alive():
            p.kill()
            p.join()
        end_group(p.pid)  # what the rank started (a graded file's own processes) ends with it
    _drain_stderr(ranks, seconds=0.0)


# gloo's words when the other end of a rank's connection has gone (its process died, its node went down)
_PEER_GONE = re.compile(r"(?:Connection closed by peer|Connection reset by peer|Broken pipe|Connection refused)"
                        r"(?: \[([^\]]+)\]:(\d+))?")


def lost_peer(err: BaseException) -> str | None:
    """The address of the rank whose connection broke (``host:port``, or ``알 수 없음``), or None."""
    found = _PEER_GONE.search(str(err))
    if found is None:
        return None
    return f"{found[1]}:{found[2]}" if found[1] else "알 수 없음"


def _rank_main(lab_name: str, rank: int, world_size: int, backend: str, port: int, params: dict,
               timeout: float, launcher_pid: int, leftovers: list[str], temp_dir: str, results, stack,
               stderr) -> None:
    """Body of one spawned rank process."""
    # Ctrl-C reaches the terminal's whole process group: only the launcher decides what it means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    lead_own_group()
    leave_fork_server()
    end_with_parent(launcher_pid, leftovers)
    use_temp_dir(temp_dir)
    os.dup2(stderr.fileno(), 2)  # the launcher passes it on and keeps the last lines for a crash report
    stderr.close()
    for key in TORCHRUN_VARIABLES:  # a spawned rank is not a torchrun rank, whatever the shell left behind
        os.environ.pop(key, None)
    if _STACK_SIGNAL is not None:  # the launcher asks a stuck rank for its stack with this signal
        faulthandler.register(_STACK_SIGNAL, file=stack.fileno(), all_threads=False)
    try:
        if sys.platform.startswith("linux"):
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # every rank is on this machine
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        # 랭크 쪽 제한 시간은 런처의 마감보다 길게 둔다: 멈춘 랭크는 런처가 먼저 찾아 보고한다.
        rank_timeout = timedelta(seconds=timeout + _RANK_TIMEOUT_MARGIN)
        store = dist.TCPStore(HOST, port, None, False, rank_timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size, timeout=rank_timeout)
        # Every rank's connections are up before the lab starts: a lab that never communicates (traps set_epoch)
        # must not let one rank finish and close its sockets while another is still connecting (gloo's
        # connectFullMesh then fails with "Connection closed by peer").
        dist.barrier(device_ids=[rank]) if backend == "nccl" else dist.barrier()
        ctx = RankContext(rank, world_size, rank, backend, device_for(backend, rank))
        record = get_lab(lab_name).run_rank(ctx, params)
        payload = pickle.dumps(record)
    except BaseException:
        results.send(("error", traceback.format_exc()))
        return
    results.send(("ok", payload))
    dist.destroy_process_group()
