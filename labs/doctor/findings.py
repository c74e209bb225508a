"""The doctor's verdict, as plain typed records: a finding (a DDP mistake, the reader's line, what was
measured, what to change), the failure of the script itself, and the run's summary."""

from __future__ import annotations

from typing import TypedDict

from .rank.record import Site

__all__ = ["Failure", "Finding", "RankLine", "Site", "Summary", "finding", "where"]


class RankLine(TypedDict):
    """What one rank was doing at the point a finding is about."""

    rank: int
    what: str
    site: Site | None


class Finding(TypedDict):
    kind: str            # stable id (FINDING_KINDS in labs/doctor/checks/__init__.py)
    title: str           # Korean, one line
    ranks: list[int]     # the ranks it concerns
    site: Site | None    # the reader's line to change
    lines: list[RankLine]  # each rank's own line, where ranks differ (collectives, files)
    measured: str        # what the doctor saw (Korean)
    fix: str             # what to change (Korean)
    data: dict[str, object]  # the measured values, for tools and tests


class Failure(TypedDict):
    """How the script itself failed (an exception, a crash, the time limit), whether or not a finding explains it."""

    kind: str            # "exception" | "crash" | "timeout" | "cuda"
    rank: int | None
    type: str
    message: str
    site: Site | None
    text: str            # the traceback (or the stacks, or the last standard error)
    explained_by: str    # the kind of the finding that explains it, "" when none does


class Summary(TypedDict):
    world_size: int
    backend: str | None            # what the process group really used
    steps: int                     # optimizer steps of rank 0 (its first optimizer)
    batch_per_rank: int | None     # b
    accumulation: int | None       # K: forward passes per optimizer step
    global_batch: int | None       # B = b·N·K
    collectives_per_step: dict[str, int] | None  # what the process group ran in one step (profiler)
    profiled_step: int | None      # which step that was
    python_collectives_per_step: float | None    # torch.distributed calls from Python per step (all ranks alike)
    seconds_per_step: float | None  # rank 0's median, the doctor's bookkeeping left out
    ddp: bool                      # whether DistributedDataParallel wrapped a model


def finding(kind: str, title: str, ranks: list[int], site: Site | None, measured: str, fix: str,
            lines: list[RankLine] | None = None, *, data: dict[str, object] | None = None, **values: object) -> Finding:
    """A finding; its measured values are ``data`` and ``values`` together."""
    return Finding(kind=kind, title=title, ranks=ranks, site=site, lines=lines or [], measured=measured, fix=fix,
                   data={**(data or {}), **values})


def where(site: Site | None) -> str:
    """``train.py:42`` (or a phrase when the line is unknown)."""
    return f"{site['file']}:{site['line']}" if site else "(위치 모름)"
