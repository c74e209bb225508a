"""The doctor's checks, run in the parent on what every rank recorded. Each compares the ranks' own
measurements with each other (fingerprints, sample sets, call sequences, paths) or with the state torch
itself keeps (the GradScaler's stage, DDP's sync flag); none runs anything in the reader's process group."""

from __future__ import annotations

from ..findings import Failure, Finding, Summary
from . import accumulation, amp, collectives, data, devices, failures, files, replicas
from .summary import summarize
from .view import View

# Every finding the doctor can report, in the order the report lists them.
FINDING_KINDS = ("no_steps", "no_process_group", "collective_mismatch", "unused_parameters", "ready_twice",
                 "shared_gpu", "unsynced_step", "replicas_differ", "data_overlap", "same_order", "same_batch",
                 "same_file", "clip_scaled", "accumulation_sync")


def diagnose(view: View) -> tuple[list[Finding], Failure | None, Summary]:
    root = failures.root_exception(view)
    found: list[Finding] = []
    if root is not None:
        found += failures.translate(view, root)
    found += collectives.check(view, root)
    found += devices.check(view)
    found += replicas.check(view)
    found += data.check(view)
    found += files.check(view)
    found += amp.check(view)
    found += accumulation.check(view)
    if root is None and not found:
        found += failures.no_training(view)
    elif root is None:
        found += [f for f in failures.no_training(view) if f["kind"] == "no_process_group"]
    found = _fold(found)
    mismatch = "collective_mismatch" if any(f["kind"] == "collective_mismatch" for f in found) else ""
    failed = failures.failure(view, found, mismatch)
    found.sort(key=lambda f: FINDING_KINDS.index(f["kind"]))
    return found, failed, summarize(view)


def _fold(found: list[Finding]) -> list[Finding]:
    """A consequence is said inside its cause: DDP's reducer never reduces a bucket with an unused parameter,
    so the replicas drift at the first step; that drift belongs to the unused-parameter finding."""
    unused = next((f for f in found if f["kind"] == "unused_parameters"), None)
    drift = next((f for f in found if f["kind"] == "replicas_differ" and f["data"].get("cause") == "gradients"), None)
    if unused is None or drift is None:
        return found
    unused["measured"] += (f" 그 결과 스텝 {drift['data']['step']}의 그래디언트가 평균되지 않아 복제본도 달라졌습니다"
                           f"(`{drift['data']['parameter']}`).")
    return [f for f in found if f is not drift]


__all__ = ["FINDING_KINDS", "View", "diagnose"]
