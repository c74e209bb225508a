"""Chapter 9 lab: grade a from-scratch DDP class on real ranks (``python -m labs grade PATH``).

The grader lives in :mod:`labs.grading`: the parent checks the file from its syntax tree before any
rank starts (:mod:`labs.grading.source`); each rank imports it under guard and runs the probes of its
interface (:mod:`labs.grading.rank`); the verdicts are computed in the parent from the ranks' records
(:mod:`labs.grading.summary`), where every threshold lives. This module is the lab around them.
"""

from __future__ import annotations

from typing import cast

from ..context import Described, RankContext
from ..grading import rank
from ..grading.config import ProbeConfig
from ..grading.source import REFERENCE, validate_params
from ..grading.summary import GradeData, summarize
from ..params import Float, Folder, InputFile, Int, Text, seed
from ..registry import Lab

__all__ = ["LAB"]


class GradeRecord(Described, rank.RankRecord):
    """What each rank of the 'grade' lab returns: its context and what it found (:class:`labs.grading.rank.RankRecord`)."""


def rank_fn(ctx: RankContext, path: str, classes: str, trace_dir: str, bucket_cap_mb: float, steps: int,
            per_rank_batch: int, width: int, depth: int, seed: int) -> GradeRecord:
    config = ProbeConfig(bucket_cap_mb, steps, per_rank_batch, width, depth, seed)
    return cast(GradeRecord, {**ctx.describe(), **rank.run(ctx, path or str(REFERENCE), classes.split(), trace_dir, config)})


LAB = Lab(
    name="grade",
    description="직접 만든 DDP 클래스를 실제 랭크에서 torch DDP·단일 프로세스와 비교해 채점 (python -m labs grade PATH)",
    rank_fn=rank_fn,
    summarize=summarize,
    chapter=9,
    default_nproc=2,
    validate=validate_params,
    params={"path": InputFile("", help="채점할 파이썬 파일 (비우면 참조 구현 labs/ddp/miniddp.py)"),
            "classes": Text("BucketedDDP", allow_empty=False, help="채점할 클래스 이름(여러 개면 공백으로 구분)"),
            "trace_dir": Folder("", help="랭크가 불러오기 단계와 멈춘 곳을 적는 폴더 (labs.grade가 임시 폴더를 준다)"),
            "bucket_cap_mb": Float(0.008, min=0.0, max=1024.0, min_open=True, help="버킷 클래스에 줄 bucket_cap_mb"),
            "steps": Int(3, min=1, max=20, help="비교할 학습 스텝 수 K"),
            "per_rank_batch": Int(4, min=1, max=256, help="랭크당 배치 B/N"),
            "width": Int(32, min=2, max=128,
                         help="채점 모델의 층 너비 (512·배치 256·20스텝이면 AdamW가 합 순서의 반올림 차이를 허용 오차 너머로 키운다)"),
            "depth": Int(6, min=2, max=32, help="채점 모델의 층 수"),
            "seed": seed()},
    record=GradeRecord,
    data=GradeData,
)
