"""Collectives that not every rank calls, or calls in another order: each rank's sequence of sync points
(its torch.distributed calls, DDP's constructor and the DDP forwards that start a collective) compared
index by index, with each rank's line there and, for a rank that was stopped, the line it was stuck at."""

from __future__ import annotations

from ..findings import Finding, RankLine, Site, finding, where
from ..stacks import stuck_at
from ..syncs import PYTHON_SYNCS, describe
from ..syncs import key as _key
from .view import Event, View


def sequences(view: View) -> list[list[Event]]:
    return [[e for e in view.events(r, "sync") if e["seq"] >= 0] for r in range(view.nproc)]


def stuck(view: View, rank: int) -> tuple[Site | None, bool] | None:
    """Where a rank the doctor stopped was (its reader line, whether it waited in a collective), else None."""
    run = view.rehearsal.ranks[rank]
    if not run.stopped or not run.stack:
        return None
    start = view.first(rank, "start")
    site, waiting = stuck_at(run.stack, start["thread"] if start else None, view.reader)
    if site is None:  # faulthandler keeps the innermost 100 frames: a deep stack (an import) loses the reader's
        done = {e["seq"] for e in view.events(rank, "synced")}
        open_ = [e for e in sequences(view)[rank] if e["seq"] not in done and e["op"] in PYTHON_SYNCS]
        if open_:
            return open_[-1]["site"], True
    return site, waiting


def _instead(view: View, rank: int) -> tuple[str, Site | None]:
    """What a rank that has no sync point at the mismatch did instead."""
    where_stuck = stuck(view, rank)
    if where_stuck is not None:
        site, waiting = where_stuck
        return ("집합 통신에서 기다리다 멈춤" if waiting else "집합 통신 밖에서 멈춤"), site
    end = view.ended(rank)
    if end is not None:
        return "더 부르지 않고 스크립트를 끝냄", None
    exc = view.exception(rank)
    if exc is not None:
        frames = exc["frames"]
        return f"예외로 끝남({exc['type']})", frames[-1] if frames else None
    return "더 부르지 않고 끝남", None


def first_mismatch(view: View) -> int | None:
    seqs = sequences(view)
    longest = max(len(s) for s in seqs)
    for i in range(longest):
        keys = {_key(s[i]) if i < len(s) else None for s in seqs}
        if len(keys) > 1:
            return i
    return None


def _culprit(seqs: list[list[Event]], i: int) -> int:
    """The rank whose call at ``i`` is the extra one: the others make it one call later (or never)."""
    def key(r: int, j: int) -> tuple[object, ...] | None:
        return _key(seqs[r][j]) if j < len(seqs[r]) else None

    for r in range(len(seqs)):
        others = [o for o in range(len(seqs)) if o != r]
        if key(r, i) is not None and all(key(o, i) == key(r, i + 1) for o in others) \
                and all(key(o, i) != key(r, i) for o in others):
            return r
    present = [r for r in range(len(seqs)) if key(r, i) is not None]
    return present[0] if len(present) < len(seqs) else 0


def check(view: View, root_exception: int | None) -> list[Finding]:
    """``root_exception``: a rank whose own exception (not a peer's echo) ended it: then a shorter sequence
    is that exception's consequence, not a mismatch."""
    if view.nproc < 2:
        return []
    i = first_mismatch(view)
    if i is None:
        return []
    seqs = sequences(view)
    if root_exception is not None and len(seqs[root_exception]) <= i:
        return []
    lines: list[RankLine] = []
    calls = []
    for r, seq in enumerate(seqs):
        where_stuck = stuck(view, r)
        if i < len(seq):
            what = f"{i + 1}번째 집합 통신으로 {describe(seq[i])}"
            calls.append(f"랭크 {r} {describe(seq[i])}")
            if where_stuck is not None and where_stuck[0] == seq[i]["site"]:
                what += ", 여기서 기다리다 멈춤"
            elif where_stuck is not None and where_stuck[0] is not None:
                lines.append(RankLine(rank=r, what=what, site=seq[i]["site"]))
                site, waiting = where_stuck
                what = "doctor가 멈출 때 " + ("집합 통신에서 기다리던 곳" if waiting else "집합 통신 밖에서 멈춘 곳")
                lines.append(RankLine(rank=r, what=what, site=site))
                continue
            lines.append(RankLine(rank=r, what=what, site=seq[i]["site"]))
        else:
            what, site = _instead(view, r)
            calls.append(f"랭크 {r} 없음({what})")
            lines.append(RankLine(rank=r, what=f"{i + 1}번째 집합 통신 없이 {what}", site=site))
    culprit, site = _culprit(seqs, i), None
    for r, seq in enumerate(seqs):  # a rank stuck in its own code, never reaching the collective, is the one to fix
        where_stuck = stuck(view, r)
        if i >= len(seq) and where_stuck is not None and not where_stuck[1] and where_stuck[0] is not None:
            culprit, site = r, where_stuck[0]
            break
    else:
        site = seqs[culprit][i]["site"] if i < len(seqs[culprit]) else None
    timed_out = view.rehearsal.timed_out
    deadlock = view.rehearsal.deadlock_after
    end = (f" 제한 시간 {view.rehearsal.timeout:g}초에 doctor가 멈춘 랭크를 모두 끝냈습니다." if timed_out else
           f" 모든 랭크가 서로 다른 집합 통신에서 기다려, doctor가 {deadlock:.1f}초에 교착으로 보고 끝냈습니다." if deadlock else "")
    measured = f"{i + 1}번째 집합 통신이 랭크마다 다릅니다: {', '.join(calls)}.{end}"
    fix = ("집합 통신(All-Reduce, barrier, broadcast, DDP의 순전파·역전파)은 모든 랭크가 같은 순서로 불러야 합니다. "
           f"{where(site)}의 호출을 `if rank == 0:` 같은 랭크 조건 밖으로 옮기세요: 랭크 0만 할 일(출력, 저장)은 집합 통신의 "
           "결과만 쓰고, 통신은 모든 랭크에서 합니다." if i < len(seqs[culprit]) else
           f"랭크 {culprit}이(가) {where(site)}에서 다른 랭크를 기다리는 동안, 다른 랭크는 집합 통신에서 랭크 {culprit}을(를) "
           "기다립니다. 랭크 사이의 기다림은 파일이나 루프가 아니라 집합 통신(`dist.barrier()`)으로 하고, 모든 랭크가 같은 "
           "순서로 부르게 하세요.")
    return [finding("collective_mismatch", "일부 랭크만 부르는(또는 순서가 다른) 집합 통신", list(range(view.nproc)), site,
                    measured, fix, lines, index=i + 1, culprit=culprit, timed_out=timed_out,
                    deadlock_after=deadlock)]
