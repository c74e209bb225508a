"""Chapter 14: the DDP script as the lines it changes in the single-device one, cut into numbered changes.

The diff is computed from the two files every time (nothing is copied): the changed lines only, without the module
docstrings. Each numbered change starts at the line of the DDP file that holds its entry of :data:`STARTS` (or at the
start of the run of changed lines holding it) and runs to the next one; the page explains each in one sentence. A
removed line is shown just above the added line most like it, so a line and its DDP version stand together.
"""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass

from IPython.display import HTML, Markdown

from .. import commands
from ..doctor import DoctorReport
from ..doctor.findings import where
from ..recipe import SOURCE, DoctorCase, Report, parse_log
from . import html_table

# Where each numbered change begins in recipe/train_ddp.py, in file order.
STARTS = (
    "from contextlib import nullcontext",      # 가져오기
    "def evaluate(",                           # 모든 랭크가 나눠서 평가
    'if "LOCAL_RANK" not in os.environ',       # torchrun의 환경 변수, set_device, 프로세스 그룹
    "if args.batch % (world * K)",             # B = b·N·K
    "model = DDP(",                            # 복제
    "sampler = DistributedSampler(",           # 데이터 나누기
    "sampler.set_epoch(epoch)",                # 에폭마다 섞기
    "with model.no_sync()",                    # 누적: 마지막 마이크로 배치만 All-Reduce
    "totals = torch.stack(",                   # 전역 평균 손실과 평가
    "if rank == 0:",                           # 랭크 0의 로그와 저장, barrier
    "dist.destroy_process_group()",            # 끝내기
)
_SIMILAR = 0.5  # a removed line stands above the added line of its run at least this similar (difflib ratio)


@dataclass(frozen=True)
class Change:
    number: int                      # 1-based, as the page numbers the changes
    lines: tuple[tuple[str, str], ...]  # ("-" or "+", the line) in the order shown
    first: int                       # the DDP file's line number of the change's first added line

    def markdown(self) -> Markdown:
        """The change as a fenced ``diff`` block (for ``{glue:md}``), less the indentation all its lines share."""
        indent = min(len(text) - len(text.lstrip(" ")) for _, text in self.lines if text.strip())
        body = "\n".join(f"{sign} {text[indent:]}" for sign, text in self.lines)
        return Markdown(f"```diff\n{body}\n```")


def _code_start(text: str) -> int:
    """The index of the first line after the module docstring."""
    tree = ast.parse(text)
    first = tree.body[0]
    docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)
    return (first.end_lineno or 0) if docstring else 0


def _runs(old: list[str], new: list[str], old_at: int, new_at: int) -> list[list[tuple[str, str, int]]]:
    """The runs of changed lines, each as (sign, line, the DDP line number it stands at), removed lines paired."""
    runs = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        added = [("+", new[j], new_at + j + 1) for j in range(j1, j2)]
        # 지운 줄마다 가장 닮은 추가 줄 바로 위에 (닮은 줄이 없으면 묶음 맨 위에), 지운 줄끼리의 순서는 그대로
        targets, floor = [], 0
        for i in range(i1, i2):
            ratios = [difflib.SequenceMatcher(None, old[i].strip(), text.strip()).ratio() for _, text, _ in added]
            best = max(range(len(ratios)), key=ratios.__getitem__) if ratios else 0
            floor = max(floor, best if ratios and ratios[best] >= _SIMILAR else 0)
            targets.append(floor)
        shown = []
        for j, line in enumerate(added or [None]):
            at = line[2] if line else new_at + j1 + 1
            shown += [("-", old[i], at) for i, target in zip(range(i1, i2), targets) if target == j]
            if line:
                shown.append(line)
        runs.append(shown)
    return runs


def changes(single: str | None = None, ddp: str | None = None) -> list[Change]:
    """The numbered changes from ``single`` to ``ddp`` (the texts of the two files; default: the repository's)."""
    single = (SOURCE / commands.RECIPE_SINGLE).read_text(encoding="utf-8") if single is None else single
    ddp = (SOURCE / commands.RECIPE_DDP).read_text(encoding="utf-8") if ddp is None else ddp
    old_at, new_at = _code_start(single), _code_start(ddp)
    old, new = single.splitlines()[old_at:], ddp.splitlines()[new_at:]
    runs = _runs(old, new, old_at, new_at)
    starts: list[int] = []
    for anchor in STARTS:
        found = [(r, number) for r, run in enumerate(runs) for sign, text, number in run
                 if sign == "+" and anchor in text]
        if len(found) != 1:
            raise ValueError(f"STARTS: {anchor!r} is on {len(found)} added lines of {commands.RECIPE_DDP}")
        index, number = found[0]
        run_start = min(n for sign, _, n in runs[index] if sign == "+")
        # 앞의 변경과 같은 줄 묶음에 있지 않으면 그 묶음의 첫 줄부터
        starts.append(run_start if not starts or starts[-1] < run_start else number)
    lines: list[list[tuple[str, str]]] = [[] for _ in STARTS]
    firsts = [0] * len(STARTS)
    for run in runs:
        for sign, text, number in run:
            owner = max((k for k, start in enumerate(starts) if start <= number), default=None)
            if owner is None:
                raise ValueError(f"line {number} of {commands.RECIPE_DDP} changes before {STARTS[0]!r}")
            lines[owner].append((sign, text))
            if sign == "+" and not firsts[owner]:
                firsts[owner] = number
    return [Change(k + 1, tuple(shown), firsts[k]) for k, shown in enumerate(lines)]


def log_table(report: Report) -> HTML:
    """Rank 0's epoch lines of the DDP run next to the single-device run's."""
    single, ddp = parse_log(report["single"]["log"]), parse_log(report["ddp"][""]["log"])
    rows = [[e, f"{loss:.4f}", f"{correct}/{total}", f"{d_loss:.4f}", f"{d_correct}/{d_total}"]
            for (e, loss, correct, total), (_, d_loss, d_correct, d_total) in zip(single, ddp)]
    n = report["nproc"]
    return html_table(["에폭", "한 장치: 손실", "한 장치: 테스트 정확도", f"DDP 랭크 {n}개: 손실", f"DDP 랭크 {n}개: 테스트 정확도"],
                      rows, "두 스크립트가 에폭마다 찍은 줄 (DDP는 랭크 0이 찍은 전역 평균 손실과 모든 랭크가 나눠 센 정확도)")


def doctor_table(runs: list[tuple[DoctorCase, DoctorReport]]) -> HTML:
    """What the doctor found in each script: the finding's kind at the reader's line, the exit code, the seconds."""
    rows = [[case.name.removesuffix(".py") or "레시피 그대로", case.mistake or "없음",
             ", ".join(f"{f['kind']} ({where(f['site'])})" for f in report.findings) or "없음",
             report.exit_code, f"{report.wall_seconds:.1f}"] for case, report in runs]
    return html_table(["스크립트", "틀린 곳", "의사가 찾은 것 (파일:줄)", "종료 코드", "걸린 시간(초)"], rows,
                      f"python -m labs doctor를 랭크 {runs[0][1].nproc}개에서 돌린 결과 (CPU, gloo)")
