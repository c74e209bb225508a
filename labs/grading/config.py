"""What both sides of the grader share: the probes' settings and optimizers (the ranks train with them, the
parent's judges name them). Nothing here measures or judges."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

LR = 0.05
# AdamW는 0에 가까운 그래디언트 성분을 eps 정도까지 키운다: 기본 eps=1e-8이면 합하는 순서에 따른 반올림 차이
# (1e-10 수준)가 torch DDP와 단일 프로세스 사이에서도 1e-4까지 커진다. eps를 키워 비교를 잘 조건화한다.
OPTIMIZER_ARGS: dict[str, tuple[type[torch.optim.Optimizer], dict[str, Any]]] = {
    "sgd": (torch.optim.SGD, {"lr": LR, "momentum": 0.9}),
    "adamw": (torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.01, "eps": 1e-5})}
OPTIMIZER_LABELS = {"sgd": "SGD", "adamw": "AdamW"}  # 보고서에 쓰는 이름


@dataclass(frozen=True)
class ProbeConfig:
    """What every probe is run with: the model, the data and the reader's bucket size."""

    bucket_cap_mb: float
    steps: int
    per_rank_batch: int
    width: int
    depth: int
    seed: int
