"""Start the reader's script on N ranks as ``torchrun --standalone --nproc_per_node=N`` would, and stop them all.

The doctor plays torchrun's agent: it holds the TCPStore the ranks rendezvous on (``TORCHELASTIC_USE_AGENT_STORE``)
and gives each rank the variables torch 2.13's ``LocalElasticAgent._start_workers`` sets (listed in
:data:`TORCHRUN_VARIABLES`; ``tests/test_doctor_engine.py`` compares them with a real torchrun's), ``OMP_NUM_THREADS=1``
as torchrun's launcher does when it is unset, and the same command (``python -u``; the script itself is run by
``rank/bootstrap.py``, which then installs the probes). Two deliberate differences: ``CUDA_VISIBLE_DEVICES`` is empty
(the rehearsal is on the CPU even on a GPU machine) and ``TORCHELASTIC_ERROR_FILE`` lies in the doctor's folder.

Nothing outlives a rehearsal: each rank is its own session (Ctrl-C reaches only the doctor, which then stops
them), every exit path kills each rank's whole process group (its DataLoader workers too) and removes the
folder, and each rank watches the doctor and ends itself (removing the folder) if the doctor is killed.
At the deadline, or a few seconds after a rank failed, every rank still running is asked for its Python stack
(faulthandler) before it is stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import FrameType

import torch.distributed as dist

from ..errors import LaunchInterrupted
from . import syncs
from .rank.record import STACK_SIGNAL

BOOTSTRAP = Path(__file__).resolve().parent / "rank" / "bootstrap.py"
HOST = "localhost"  # torchrun --standalone's MASTER_ADDR
TORCHRUN_VARIABLES = ("RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE", "WORLD_SIZE",
                      "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                      "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE",
                      "TORCH_NCCL_ASYNC_ERROR_HANDLING", "LOCAL_RANK", "TORCHELASTIC_ERROR_FILE",
                      "TORCHELASTIC_SIGNALS_TO_HANDLE", "OMP_NUM_THREADS")
FAILURE_GRACE = 5.0   # after a rank failed, how long the others get to end on their own (a peer's error reaches them)
DEADLOCK_GRACE = 3.0  # how long every rank must sit in mismatched collectives before the doctor calls it a deadlock
STACK_WAIT = 2.0      # how long a stuck rank gets to write its stack
_POLL = 0.1


@dataclass
class RankRun:
    """What one rank left: its events (one dict per line), how it ended and what it printed."""

    rank: int
    returncode: int | None
    events: list[dict[str, object]]
    stack: str = ""            # faulthandler's dump when the doctor asked for it (the rank was still running)
    stopped: str = ""          # "timeout" | "after_failure" | "deadlock" when the doctor stopped it, else ""
    stdout: str = ""
    stderr: str = ""


@dataclass
class Rehearsal:
    ranks: list[RankRun]
    wall_seconds: float
    timeout: float
    timed_out: bool = False
    deadlock_after: float | None = None  # seconds into the run when the doctor saw every rank wait in another collective


def rank_environment(base: dict[str, str], rank: int, nproc: int, port: int, run_id: str, folder: str) -> dict[str, str]:
    """The environment torchrun gives worker ``rank`` of a one-node job of ``nproc`` workers."""
    env = dict(base)
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")  # torch/distributed/run.py sets it when unset
    env.update({
        "RANK": str(rank), "GROUP_RANK": "0", "ROLE_RANK": str(rank), "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": str(nproc), "GROUP_WORLD_SIZE": "1",
        "ROLE_WORLD_SIZE": str(nproc), "MASTER_ADDR": HOST, "MASTER_PORT": str(port),
        "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0", "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": base.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        "LOCAL_RANK": str(rank), "TORCHELASTIC_ERROR_FILE": os.path.join(folder, f"error{rank}.json"),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": base.get("TORCHELASTIC_SIGNALS_TO_HANDLE", "SIGTERM,SIGINT,SIGHUP,SIGQUIT"),
        "CUDA_VISIBLE_DEVICES": "",
    })
    return env


class _Signals:
    """SIGTERM/SIGHUP become :class:`LaunchInterrupted` in the doctor (main thread), so its cleanup runs."""

    def __init__(self) -> None:
        self.previous: dict[int, object] = {}
        self.raised = False

    def __enter__(self) -> _Signals:
        if threading.current_thread() is threading.main_thread():
            for signum in (signal.SIGTERM, signal.SIGHUP):
                self.previous[signum] = signal.signal(signum, self._raise)
        return self

    def _raise(self, signum: int, frame: FrameType | None) -> None:
        if not self.raised:  # a second signal must not cut the cleanup short
            self.raised = True
            raise LaunchInterrupted(signum)

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def _kill(proc: subprocess.Popen[bytes], signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _events(path: Path) -> list[dict[str, object]]:
    events = []
    for line in _read(path).splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            events.append(json.loads(line))  # a line cut by a kill is the only one that can be broken
    return events


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix="labs-doctor-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def rehearse(script: str, args: list[str], nproc: int, timeout: float, steps: int | None, batches: int | None,
             cwd: str) -> Rehearsal:
    """Run ``script ARGS`` on ``nproc`` ranks; every rank is stopped and the folder removed before this returns."""
    store = dist.TCPStore(HOST, 0, None, True, timedelta(seconds=timeout + 60), wait_for_workers=False)
    run_id = str(uuid.uuid4())
    with _folder() as folder, _Signals():
        config = json.dumps({"parent": os.getpid(), "steps": steps, "batches": batches})
        procs: list[subprocess.Popen[bytes]] = []
        outputs = []
        started = time.monotonic()
        stopped: dict[int, str] = {}
        why, deadlock_after = "", None
        try:
            for rank in range(nproc):
                out = open(folder / f"rank{rank}.out", "wb")  # noqa: SIM115 - closed in the finally below
                err = open(folder / f"rank{rank}.err", "wb")  # noqa: SIM115
                outputs += [out, err]
                env = rank_environment(dict(os.environ), rank, nproc, store.port, run_id, str(folder))
                procs.append(subprocess.Popen([sys.executable, "-u", str(BOOTSTRAP), str(folder), config, script, *args],
                                              cwd=cwd, env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                              start_new_session=True))
            why = _wait(procs, started, timeout, _Progress(folder, nproc))
            running = [r for r, p in enumerate(procs) if p.poll() is None]
            stopped = {r: why for r in running} if why else {}
            deadlock_after = time.monotonic() - started if why == "deadlock" else None
            _ask_stacks(procs, stopped, folder)
        finally:
            for proc in procs:
                _kill(proc, signal.SIGKILL if proc.poll() is None else signal.SIGTERM)
            for proc in procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
                _kill(proc, signal.SIGKILL)  # what is left of its process group (DataLoader workers)
            for f in outputs:
                f.close()
        wall = time.monotonic() - started
        ranks = [RankRun(rank, proc.returncode, _events(folder / f"rank{rank}.jsonl"),
                         stack=_read(folder / f"rank{rank}.stack") if rank in stopped else "",
                         stopped=stopped.get(rank, ""), stdout=_read(folder / f"rank{rank}.out"),
                         stderr=_read(folder / f"rank{rank}.err"))
                 for rank, proc in enumerate(procs)]
    del store
    return Rehearsal(ranks, wall, timeout, why == "timeout", deadlock_after)


class _Progress:
    """The ranks' sync events read as they are written: is every running rank inside a Python collective
    (``sync`` without its ``synced``), and do those collectives disagree? Then none of them can return."""

    def __init__(self, folder: Path, nproc: int) -> None:
        self.paths = [folder / f"rank{r}.jsonl" for r in range(nproc)]
        self.offsets = [0] * nproc
        self.open: list[dict[str, object] | None] = [None] * nproc
        self.since: float | None = None

    def _read(self, rank: int) -> None:
        try:
            with self.paths[rank].open("rb") as f:
                f.seek(self.offsets[rank])
                chunk = f.read()
        except OSError:
            return
        complete = chunk[:chunk.rfind(b"\n") + 1]
        self.offsets[rank] += len(complete)
        for line in complete.splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                event = json.loads(line)
                if event["ev"] == "sync" and event["seq"] >= 0 and "synced" not in event:
                    self.open[rank] = event if event["op"] in syncs.PYTHON_SYNCS else None
                elif event["ev"] == "synced" and (waiting := self.open[rank]) is not None \
                        and event["seq"] == waiting["seq"]:
                    self.open[rank] = None

    def deadlocked(self, running: list[int], now: float) -> bool:
        for rank in running:
            self._read(rank)
        waiting = [self.open[r] for r in running]
        stuck = len(running) > 1 and all(w is not None for w in waiting) and \
            len({(w["seq"], syncs.key(w)) for w in waiting if w is not None}) > 1
        if not stuck:
            self.since = None
            return False
        self.since = self.since or now
        return now - self.since >= DEADLOCK_GRACE


def _wait(procs: list[subprocess.Popen[bytes]], started: float, timeout: float, progress: _Progress) -> str:
    """Wait for every rank. Return "" when all ended, else why the doctor stops those still running: the
    deadline ("timeout"), a few seconds after one failed ("after_failure"), or all waiting in mismatched
    collectives ("deadlock")."""
    failed_at: float | None = None
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return ""
        now = time.monotonic()
        if failed_at is None and any(c not in (None, 0) for c in codes):
            failed_at = now
        if now >= started + timeout:
            return "timeout"
        if failed_at is not None and now >= failed_at + FAILURE_GRACE:
            return "after_failure"
        if progress.deadlocked([r for r, c in enumerate(codes) if c is None], now):
            return "deadlock"
        time.sleep(_POLL)


def _ask_stacks(procs: list[subprocess.Popen[bytes]], stopped: dict[int, str], folder: Path) -> None:
    """Have every rank that is still running write its threads' stacks (faulthandler), then return."""
    asked = [r for r in stopped if procs[r].poll() is None]
    for r in asked:
        with contextlib.suppress(ProcessLookupError):
            os.kill(procs[r].pid, STACK_SIGNAL)
    until = time.monotonic() + STACK_WAIT
    while time.monotonic() < until and not all(_read(folder / f"rank{r}.stack").count("File ") for r in asked):
        time.sleep(_POLL)
    time.sleep(0.2)  # the dump of the last threads
