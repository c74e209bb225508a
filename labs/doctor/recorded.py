"""A rehearsal recorded by the book build and replayed by `make test` (:mod:`labs.replay`), like a lab run.

Only when ``LABS_RECORD_DIR``/``LABS_REPLAY_DIR`` are set (the build, the tests): a reader's doctor always runs.
What is recorded is what the ranks left (their events, exit codes, stacks and output), never a verdict: the
checks run anew on it, so a changed check is always tested. The key is the script's folder (the contents of
its ``.py`` files: the script and the modules beside it that it may import), the script as given, its
arguments, N, the time limit, ``--steps``/``--batches`` and the labs' code digest (:func:`labs.replay.load`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any

from .. import replay
from .spawn import RankRun, Rehearsal, rehearse

NAME = "doctor"


def _key(script: str, args: list[str], steps: int | None, batches: int | None) -> dict[str, Any]:
    folder = Path(script).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(folder.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return {"script": script, "folder": digest.hexdigest(), "args": args, "steps": steps, "batches": batches}


def _check(outcome: Any) -> None:
    fields = {f.name for f in dataclasses.fields(RankRun)}
    ok = (isinstance(outcome, dict) and isinstance(outcome.get("ranks"), list) and outcome["ranks"]
          and all(isinstance(r, dict) and set(r) == fields for r in outcome["ranks"])
          and [r["rank"] for r in outcome["ranks"]] == list(range(len(outcome["ranks"]))))
    if not ok:
        raise replay.InvalidRecord("doctor의 랭크 기록이 아님")


def rehearse_recorded(script: str, args: list[str], nproc: int, timeout: float, steps: int | None,
                      batches: int | None, cwd: str) -> Rehearsal:
    """:func:`labs.doctor.spawn.rehearse`, recorded and replayed when the build's variables are set."""
    key = _key(script, args, steps, batches)
    recorded = replay.load(NAME, nproc, "gloo", key, timeout, check=_check)
    if recorded is not None:
        return Rehearsal([RankRun(**r) for r in recorded["ranks"]], recorded["wall_seconds"], timeout,
                         recorded["timed_out"], recorded["deadlock_after"])
    rehearsal = rehearse(script, args, nproc, timeout, steps, batches, cwd)
    replay.save(NAME, nproc, "gloo", key, timeout, dataclasses.asdict(rehearsal))
    return rehearsal
