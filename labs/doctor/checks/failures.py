"""How the script itself ended, per rank, and what the doctor can say about it: the root exception (a peer's
echo such as "Connection closed by peer" is never the cause when another exists), DDP's own errors translated
into what to change, a CUDA call the CPU cannot stand in for, a crash, or the time limit with each rank's line."""

from __future__ import annotations

import re

from ...errors import exit_cause
from ..findings import Failure, Finding, Site, finding, where
from .collectives import stuck
from .view import Event, View

PEER_FAILURE = re.compile(r"Connection (reset|closed) by peer|Broken pipe|Socket closed|Timed out waiting|"
                          r"Connection refused|failed to recv|Gloo connectFullMesh failed|ProcessGroupGloo.*timed out")
UNUSED = "Expected to have finished reduction in the prior iteration"
READY_TWICE = "Expected to mark a variable ready only once"
NO_GROUP = "Default process group has not been initialized"
CUDA_MISSING = re.compile(r"Torch not compiled with CUDA enabled|Tried to instantiate dummy base class|"
                          r"Cannot access accelerator device|No CUDA GPUs are available|Found no NVIDIA driver|"
                          r"has no attribute '_cuda_|CUDA driver|cudaGetDeviceCount")
_INDICES = re.compile(r"did not receive grad for rank (\d+): ([\d ]+)")


def root_exception(view: View) -> int | None:
    """The rank whose own exception ended the run (lowest rank first), not one that only saw a peer fail."""
    failed = [(r, e) for r in range(view.nproc) if (e := view.exception(r)) is not None]
    own = [r for r, e in failed if not PEER_FAILURE.search(e["message"])]
    return own[0] if own else None


def _site(exc: Event) -> Site | None:
    frames: list[Site] = exc["frames"]
    return frames[-1] if frames else None


def translate(view: View, rank: int) -> list[Finding]:
    """DDP's own errors (and a missing process group) said as what to change."""
    exc = view.exception(rank)
    assert exc is not None
    message: str = exc["message"]
    site = _site(exc)
    first = message.strip().splitlines()[0] if message.strip() else exc["type"]
    if UNUSED in message:
        return [_unused(view, rank, exc, site)]
    if READY_TWICE in message:
        checkpoints = [e for e in view.events(rank, "checkpoint") if e["use_reentrant"]]
        at = checkpoints[0]["site"] if checkpoints else view.ddp_site(rank)
        cause = (f"{where(at)}의 `torch.utils.checkpoint`가 재진입 방식(use_reentrant=True)이라 역전파가 순전파를 다시 돌려 "
                 "같은 파라미터의 훅이 두 번 불립니다." if checkpoints else
                 "한 반복에서 같은 파라미터가 DDP의 리듀서에 두 번 준비되었다고 알렸습니다(같은 층을 두 번 쓰는 순전파, 재진입 "
                 "체크포인트, 한 순전파에 역전파 두 번).")
        measured = f"랭크 {rank}의 역전파({where(site)})에서 DDP 오류: {first[:200]} {cause}"
        fix = ("체크포인트는 `checkpoint(fn, x, use_reentrant=False)`로 하세요. 그래도 남으면(같은 모듈을 두 번 쓰는 모델) "
               "`DDP(model, static_graph=True)`로 그래프가 반복마다 같다고 알리세요.")
        return [finding("ready_twice", "DDP 오류: 파라미터가 한 반복에 두 번 준비됨", [rank], at or site, measured, fix)]
    if NO_GROUP in message:
        measured = f"랭크 {rank}가 {where(site)}에서 프로세스 그룹 없이 분산 기능을 불렀습니다: {first[:200]}"
        fix = ("스크립트 맨 앞(모델·DDP·집합 통신보다 먼저)에서 `dist.init_process_group(backend)`을 부르세요: torchrun이 준 "
               "환경 변수(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)를 읽어 그룹을 만듭니다.")
        return [finding("no_process_group", "프로세스 그룹을 만들지 않았습니다", [rank], site, measured, fix)]
    return []


def _unused(view: View, rank: int, exc: Event, site: Site | None) -> Finding:
    ddp = next((e for e in view.events(rank, "sync") if e["op"] == "DDP"), None)
    names: list[str] = ddp["names"] if ddp else []
    match = _INDICES.search(exc["message"])
    reported = [names[int(i)] if int(i) < len(names) else i for i in match[2].split()] if match else []
    no_grad: list[str] = next((e["no_grad"] for e in view.events(rank, "pre") if e["no_grad"]), [])
    unused = reported or no_grad
    listed = ", ".join(f"`{n}`" for n in unused) if unused else "(이름을 읽지 못함)"
    measured = (f"랭크 {rank}: 역전파에서 그래디언트를 받지 못한 파라미터 {listed}"
                + (f"(첫 스텝 직전에 grad가 None: {', '.join(no_grad)})" if no_grad else "")
                + f". DDP는 그다음 순전파({where(site)})에서 멈췄습니다: \"{UNUSED}…\"")
    fix = ("순전파가 쓰지 않는 층이 있으면 지우거나 `requires_grad_(False)`로 얼리세요. 반복마다 쓰는 층이 정말 바뀐다면 "
           "`DDP(model, find_unused_parameters=True)`(역전파마다 쓰인 파라미터를 찾느라 그래프를 한 번 더 훑습니다).")
    return finding("unused_parameters", "DDP 오류: 역전파에 쓰이지 않은 파라미터", [rank], ddp["site"] if ddp else site,
                   measured, fix, parameters=unused)


def failure(view: View, explained: list[Finding], timed_out_by: str) -> Failure | None:
    """How the script failed, if it did; ``explained_by`` names the finding that accounts for it."""
    root = root_exception(view)
    kinds = [f["kind"] for f in explained]
    if root is not None:
        exc = view.exception(root)
        assert exc is not None
        cuda = bool(CUDA_MISSING.search(exc["message"]))
        by = next((k for k in kinds if k in ("unused_parameters", "ready_twice", "no_process_group")), "")
        return Failure(kind="cuda" if cuda else "exception", rank=root, type=exc["type"], message=exc["message"],
                       site=_site(exc), text=exc["text"], explained_by=by)
    crashed = [r.rank for r in view.rehearsal.ranks
               if r.returncode not in (0, None) and not r.stopped and view.exception(r.rank) is None
               and view.ended(r.rank) is None]
    if crashed:
        run = view.rehearsal.ranks[crashed[0]]
        tail = "\n".join(run.stderr.rstrip().splitlines()[-12:])
        return Failure(kind="crash", rank=run.rank, type="", message=exit_cause(run.returncode), site=None, text=tail,
                       explained_by=timed_out_by)
    exits = [(r, e) for r in range(view.nproc) if (e := view.ended(r)) is not None and e.get("code")]
    if exits:
        rank, end = exits[0]
        return Failure(kind="exception", rank=rank, type="SystemExit", message=f"sys.exit({end['code']})", site=None,
                       text="\n".join(view.rehearsal.ranks[rank].stderr.rstrip().splitlines()[-12:]), explained_by="")
    peers = [r for r in range(view.nproc) if view.exception(r) is not None]
    deadlock = view.rehearsal.deadlock_after
    if view.rehearsal.timed_out or deadlock is not None or peers:
        lines = []
        for r in range(view.nproc):
            at = stuck(view, r)
            if at is not None:
                lines.append(f"랭크 {r}: {where(at[0])} ({'집합 통신에서 기다림' if at[1] else '집합 통신 밖'})")
            elif view.exception(r) is not None:
                exc = view.exception(r)
                assert exc is not None
                lines.append(f"랭크 {r}: {exc['type']}: {exc['message'].splitlines()[0][:160]}")
        message = (f"제한 시간 {view.rehearsal.timeout:g}초 안에 끝나지 않았습니다" if view.rehearsal.timed_out else
                   f"랭크들이 서로 다른 집합 통신에서 기다려 멈췄습니다({deadlock:.1f}초에 doctor가 끝냄)" if deadlock is not None
                   else "다른 랭크가 끊겨 실패했습니다")
        first = next((at[0] for r in range(view.nproc) if (at := stuck(view, r)) is not None), None)
        hung = view.rehearsal.timed_out or deadlock is not None
        return Failure(kind="timeout" if hung else "exception", rank=None, type="",
                       message=message, site=first, text="\n".join(lines), explained_by=timed_out_by)
    return None


def no_training(view: View) -> list[Finding]:
    """A rehearsal with nothing to compare: no optimizer step, or no process group at all."""
    if any(view.steps(r) for r in range(view.nproc)):
        if view.nproc > 1 and not any(e["op"] == "init_process_group" for e in view.events(0, "sync")):
            site = view.events(0, "pre")[0]["site"]
            measured = (f"랭크 {view.nproc}개가 torch.distributed 없이 각자 학습했습니다(init_process_group이 불리지 않음): "
                        "그래디언트가 평균되지 않고, 전역 배치도 랭크 수만큼 커지지 않습니다.")
            fix = ("`dist.init_process_group(backend)`으로 그룹을 만들고, 모델을 `DDP(model)`로 감싸고, DataLoader에 "
                   "`DistributedSampler`를 주세요(14장의 레시피).")
            return [finding("no_process_group", "프로세스 그룹이 없습니다: 랭크들이 따로 학습합니다", list(range(view.nproc)),
                            site, measured, fix)]
        return []
    measured = "어느 랭크에서도 optimizer.step()이 한 번도 불리지 않아, 비교할 학습이 없습니다."
    fix = ("학습이 실제로 도는 인자로 실행하세요: `python -m labs doctor train.py -- --epochs 1`(`--` 뒤는 스크립트의 인자). "
           "학습 루프가 `if __name__ == \"__main__\":` 아래의 함수 호출로 시작하는지도 보세요.")
    return [finding("no_steps", "최적화 스텝이 없습니다: 학습을 하지 않았습니다", list(range(view.nproc)), None, measured, fix)]
