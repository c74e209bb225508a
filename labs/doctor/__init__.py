"""``python -m labs doctor SCRIPT [-- ARGS…]``: the reader's own training script rehearsed, unchanged, on N CPU
ranks exactly as ``torchrun --standalone --nproc_per_node=N SCRIPT ARGS`` would start it, and each DDP mistake
reported in Korean at the reader's file and line.

    >>> report = examine("train.py", nproc=2, args=["--epochs", "1"])
    >>> print(report.report()); report.exit_code, [f["kind"] for f in report.findings]

How it sees: every rank runs ``rank/bootstrap.py``, which patches torch's entry points (optimizer step hooks,
DataLoader iteration, torch.distributed calls, DDP's constructor and forward, ``torch.save``/``open``,
GradScaler and clipping, CUDA placements) to write what the script does into a file per rank; the parent
(:mod:`labs.doctor.checks`) compares the ranks' records after they end. The doctor adds no collective to the
reader's process group.
"""

from __future__ import annotations

import os

from .checks import FINDING_KINDS, View, diagnose
from .checks.devices import mappings
from .findings import Failure, Finding, Summary
from .inputs import DoctorInputError, check_inputs
from .rank.record import ReaderFiles
from .recorded import rehearse_recorded
from .report import DoctorReport, RankOutput

DEFAULT_TIMEOUT = 120.0

__all__ = ["DEFAULT_TIMEOUT", "FINDING_KINDS", "DoctorInputError", "DoctorReport", "Failure", "Finding", "Summary",
           "examine"]


def examine(script: str | os.PathLike[str], nproc: int = 2, args: list[str] | tuple[str, ...] = (),
            timeout: float = DEFAULT_TIMEOUT, steps: int | None = None, batches: int | None = None,
            cwd: str | os.PathLike[str] | None = None) -> DoctorReport:
    """Rehearse ``script ARGS`` on ``nproc`` CPU ranks and diagnose it.

    ``steps``: stop every rank after that many optimizer steps; ``batches``: end every DataLoader pass after
    that many batches; ``cwd``: the folder the script runs in (default: the current one; what the script writes
    lands there). Bad input raises :class:`DoctorInputError` (a ``LabConfigError``) before any rank starts.
    In the book build and `make test` the rehearsal is recorded and replayed (:mod:`labs.doctor.recorded`).
    """
    path, argv, steps, batches, folder = check_inputs(script, nproc, args, timeout, steps, batches, cwd)
    shown = os.fspath(script)
    # the script as torchrun would be given it: the path typed, when the ranks run in the same folder
    given = shown if os.path.realpath(folder) == os.path.realpath(os.getcwd()) else os.path.abspath(path)
    rehearsal = rehearse_recorded(given, argv, nproc, float(timeout), steps, batches, folder)
    view = View(rehearsal, ReaderFiles(os.path.abspath(path), folder))
    findings, failure, summary = diagnose(view)
    outputs = [RankOutput(r.rank, r.returncode, r.stopped, r.stdout, r.stderr) for r in rehearsal.ranks]
    return DoctorReport(shown, argv, nproc, findings, failure, summary, mappings(view), rehearsal.wall_seconds, outputs)
