"""Two ranks on one GPU: the CUDA device index each placement of a GPU script asked for (mapped to the CPU
here), compared across the ranks of this one node; and the list of what was mapped."""

from __future__ import annotations

from ..findings import Finding, RankLine, finding, where
from .view import Event, View


def check(view: View) -> list[Finding]:
    users: dict[int, dict[int, Event]] = {}
    for rank in range(view.nproc):
        for e in view.events(rank, "cuda"):
            users.setdefault(e["index"], {}).setdefault(rank, e)
    for index, by_rank in sorted(users.items()):
        if len(by_rank) < 2:
            continue
        lines = [RankLine(rank=r, what=f"cuda:{index}에 올림", site=e["site"]) for r, e in sorted(by_rank.items())]
        site = lines[-1]["site"]
        measured = (f"랭크 {', '.join(str(r) for r in sorted(by_rank))}이(가) 모두 cuda:{index}을(를) 씁니다("
                    + "; ".join(f"랭크 {line['rank']} {where(line['site'])}" for line in lines) + "). GPU에서는 한 GPU에 "
                    "랭크가 몰리고, NCCL은 `Duplicate GPU detected : rank 1 and rank 0 both on CUDA device`로 거절합니다"
                    "(NCCL의 보고, 이 기계에서는 재지 않음).")
        fix = ("랭크마다 자기 GPU를 쓰세요: 맨 앞에서 `local_rank = int(os.environ[\"LOCAL_RANK\"])`, "
               "`torch.cuda.set_device(local_rank)`, `device = torch.device(\"cuda\", local_rank)`로 정하고 "
               "`.to(device)`로 옮기세요(`.cuda()`와 \"cuda\"는 현재 장치, 기본 0번을 뜻합니다).")
        return [finding("shared_gpu", "여러 랭크가 같은 GPU를 씁니다(LOCAL_RANK 장치 없음)", sorted(by_rank), site, measured,
                        fix, lines, index=index)]
    return []


def mappings(view: View) -> list[dict[str, object]]:
    """What the doctor changed to run a GPU script here, once per line (rank 0's)."""
    return [{"what": e["what"], "before": e["before"], "after": e["after"], "site": e["site"]}
            for e in view.events(0, "map")]
