"""Run a lab that must hang, raise or crash, and record what happened instead of its rank records.

A bug that never returns records still has an outcome: the launcher ended it at the deadline (``hang``: each
rank's position), a rank raised (``error``: the exception's own message), or a rank process died (``crash``:
its exit code). :func:`observe` turns that into a dict of plain data, with what the ranks wrote to standard
error (C++ libraries such as gloo write there just before they abort the process) and the
``TORCH_DISTRIBUTED_DEBUG`` level. The outcome is recorded and replayed like a lab run (:mod:`labs.replay`,
under ``<lab>-outcome``), so the lab's checks run on it either way: :func:`outcome_results` hands it to the
lab's ``summarize_outcome`` and returns the :class:`~labs.result.LabResult` the engine builds
(:meth:`labs.registry.Lab.finish_outcome`), as :func:`labs.run` does for a run that returns records.

Contract with the lab: it has a ``stderr_dir`` parameter (:class:`labs.params.Folder`), its rank function
calls :func:`stderr_to` with ``stderr_dir/rank<r>.txt`` when the folder is given, and it declares
``summarize_outcome``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import replay
from .context import resolve_backend
from .errors import LabError, LabTimeoutError, RankCrashedError, RankFailedError
from .launch import removed_if_killed, run
from .registry import get_lab
from .result import LabResult

KINDS = ("ok", "hang", "error", "crash")


def stderr_to(path: Path) -> None:
    """Send this process's standard error (file descriptor 2, which C++ writes to as well) to ``path``."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 2)
    os.close(fd)


def exception_message(traceback_text: str) -> str:
    """The exception's own message from a rank's traceback: from the last ``SomeError:`` line to the end."""
    lines = traceback_text.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        head = lines[i].split(":", 1)[0]
        if not lines[i].startswith(" ") and head.endswith(("Error", "Exception")):
            return "\n".join(lines[i:]).split(": ", 1)[1] if ": " in lines[i] else lines[i]
    return lines[-1] if lines else ""


def _rank_stderr(folder: Path) -> str:
    """What the ranks wrote to standard error, warnings left out, rank by rank."""
    lines = []
    for path in sorted(folder.glob("rank*.txt")):
        lines += [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip() and "Warning" not in ln]
    return "\n".join(lines)


def _check_recorded(recorded) -> None:
    """What :func:`observe` records: ``{"outcome": {"kind": ..., "stderr": ...}}`` (replay skips anything else)."""
    outcome = recorded.get("outcome") if isinstance(recorded, dict) else None
    if not (isinstance(outcome, dict) and outcome.get("kind") in KINDS and isinstance(outcome.get("stderr"), str)):
        raise replay.InvalidRecord("실행 결과(종류·표준 오류)가 아님")


def observe(lab: str, nproc: int, params: dict, timeout: float) -> dict:
    """Run ``lab`` on ``nproc`` ranks and say how it ended: ``kind`` (one of :data:`KINDS`) and what goes with it."""
    debug = os.environ.get("TORCH_DISTRIBUTED_DEBUG")
    key = {**params, "debug": debug}
    backend = resolve_backend("auto", nproc)
    recorded = replay.load(f"{lab}-outcome", nproc, backend, key, timeout, check=_check_recorded)
    if recorded is not None:
        return recorded["outcome"]
    started = time.perf_counter()
    outcome: dict[str, Any]
    with tempfile.TemporaryDirectory(prefix=f"ddp-{lab}-stderr-") as stderr_dir, removed_if_killed(stderr_dir):
        try:
            run(lab, nproc=nproc, timeout=timeout, **{**params, "stderr_dir": stderr_dir})
        except LabTimeoutError as err:
            outcome = {"kind": "hang", "message": str(err), "where": dict(err.where)}
        except RankFailedError as err:
            outcome = {"kind": "error", "rank": err.rank, "message": exception_message(err.traceback_text)}
        except RankCrashedError as err:
            outcome = {"kind": "crash", "rank": err.rank, "exitcode": err.exitcode, "message": str(err)}
        else:
            outcome = {"kind": "ok"}
        outcome["elapsed"] = time.perf_counter() - started
        outcome["stderr"] = _rank_stderr(Path(stderr_dir))
    outcome["debug"] = debug
    replay.save(f"{lab}-outcome", nproc, backend, key, timeout, {"outcome": outcome})
    return outcome


_CHILD = ("import json, sys; from labs.outcome import observe\n"
          "if __name__ == '__main__':\n"
          "    print('RESULT ' + json.dumps(observe(*json.loads(sys.argv[1]))))")


def observe_isolated(lab: str, nproc: int, params: dict, timeout: float,
                     debug_levels=("DETAIL",)) -> list[dict]:
    """:func:`observe` in fresh Python processes, one per ``TORCH_DISTRIBUTED_DEBUG`` level, run side by side.

    The variable must be set before the process group exists, and this process's fork server is shared by
    every lab, so it is set only in the child's environment.
    """
    procs = []
    for level in debug_levels:
        env = {k: v for k, v in os.environ.items() if k != "TORCH_DISTRIBUTED_DEBUG"}
        if level is not None:
            env["TORCH_DISTRIBUTED_DEBUG"] = level
        procs.append(subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps([lab, nproc, params, timeout])],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return [_child_outcome(proc, timeout) for proc in procs]


def _child_outcome(proc: subprocess.Popen, timeout: float) -> dict:
    try:
        stdout, stderr = proc.communicate(timeout=timeout + 90)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    line = next((ln for ln in stdout.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        raise LabError(f"따로 띄운 파이썬 프로세스가 결과를 남기지 않았습니다 (종료 코드 {proc.returncode}): "
                       f"{stderr.strip()[-500:]}")
    outcome = json.loads(line[len("RESULT "):])
    outcome["where"] = {int(k): v for k, v in outcome.get("where", {}).items()}  # JSON의 키는 문자열
    return outcome


def outcome_results(lab_name: str, nproc: int, params: dict, timeout: float,
                    debug_levels: tuple[str | None, ...] | None = None) -> list[LabResult]:
    """Run ``lab_name``, which must hang, raise or crash, and return its results: one run here (``debug_levels``
    ``None``), or one fresh Python process per ``TORCH_DISTRIBUTED_DEBUG`` level (:func:`observe_isolated`).
    ``params`` are checked before anything starts; each result's checks are the lab's ``summarize_outcome`` of
    how that run ended, its data what the lab's summary says of it, and its parameters the resolved ones."""
    lab = get_lab(lab_name)
    params = lab.resolve_params(params, nproc)
    backend = resolve_backend("auto", nproc)
    outcomes = ([observe(lab.name, nproc, params, timeout)] if debug_levels is None
                else observe_isolated(lab.name, nproc, params, timeout, debug_levels))
    return [lab.finish_outcome(outcome, nproc, backend, params) for outcome in outcomes]
