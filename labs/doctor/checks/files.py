"""Files that more than one rank writes: the real paths of every ``torch.save`` and ``open`` for writing,
compared across ranks."""

from __future__ import annotations

import os

from ..findings import Finding, RankLine, finding, where
from .view import Event, View


def check(view: View) -> list[Finding]:
    writers: dict[str, dict[int, Event]] = {}
    for rank in range(view.nproc):
        for e in view.events(rank, "write"):
            writers.setdefault(e["path"], {}).setdefault(rank, e)
    found = []
    for path, by_rank in writers.items():
        if len(by_rank) < 2:
            continue
        shown = view.reader.display(path) if path.startswith(view.reader.cwd + os.sep) else path
        lines = [RankLine(rank=r, what=f"{e['how']}로 씀", site=e["site"]) for r, e in sorted(by_rank.items())]
        site = lines[0]["site"]
        ranks = sorted(by_rank)
        measured = (f"랭크 {', '.join(map(str, ranks))}이(가) 같은 파일 {shown}에 씁니다("
                    + "; ".join(f"랭크 {line['rank']} {where(line['site'])}" for line in lines) + ").")
        fix = ("한 랭크만 쓰게 하세요: `if rank == 0:` 안에서 저장하고 그 뒤 `dist.barrier()`(다른 랭크가 파일을 읽는다면 다 쓸 "
               "때까지 기다리게). 랭크마다 따로 필요한 파일(로그)이라면 이름에 랭크를 넣으세요(f\"log_rank{rank}.txt\").")
        found.append(finding("same_file", "여러 랭크가 같은 파일에 씁니다", ranks, site, measured, fix, lines, path=shown))
    return found
