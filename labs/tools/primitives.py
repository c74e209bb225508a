"""Small helpers every lab shares: device ids for DDP, device sync for timing, differences, optimizers.

One copy of each, so a lesson shows only what it teaches.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import torch

OPTIMIZERS = ("sgd", "adam", "adamw")
# 파라미터 비교의 허용 오차: torch.testing.assert_close의 float32 기본값이자 PyTorch DDP 테스트(assertEqual)가 쓰는 값
# |w − w_기준| ≤ ATOL + RTOL·|w_기준|
RTOL, ATOL = 1.3e-6, 1e-5


def device_ids(device: torch.device) -> list[int] | None:
    """``device_ids`` for ``DistributedDataParallel``: this rank's GPU with CUDA, ``None`` on the CPU."""
    return [device.index] if device.type == "cuda" else None


def sync(device: torch.device) -> None:
    """Wait until every kernel queued on ``device`` has finished (a no-op on the CPU): timing needs it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _flat64(values) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().reshape(-1).to("cpu", torch.float64)
    values = list(values)
    if values and isinstance(values[0], torch.Tensor):
        return torch.cat([_flat64(v) for v in values]) if values else torch.zeros(0, dtype=torch.float64)
    return torch.tensor(values, dtype=torch.float64).reshape(-1)


def max_abs_diff(a: torch.Tensor | Sequence, b: torch.Tensor | Sequence) -> float:
    """Largest |a − b| over all elements, in float64; ``a`` and ``b`` are tensors, lists of tensors
    or lists of numbers of the same total size. Raises ``ValueError`` on a size mismatch or empty input
    (a comparison of nothing must never pass)."""
    x, y = _flat64(a), _flat64(b)
    if x.shape != y.shape or x.numel() == 0:
        raise ValueError(f"max_abs_diff: sizes differ or are empty ({x.numel()} vs {y.numel()})")
    return float((x - y).abs().max())


def make_optimizer(name: str, params: Iterable[torch.nn.Parameter], lr: float,
                   momentum: float = 0.9, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    """The course's optimizers by name: ``sgd`` (with momentum), ``adam``, ``adamw``."""
    if name == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, weight_decay=weight_decay)
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay or 0.01)
    raise ValueError(f"unknown optimizer {name!r}; use one of {OPTIMIZERS}")
