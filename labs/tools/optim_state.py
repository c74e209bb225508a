"""The optimizer state a rank holds (chapter 13's labs): the optimizers they train with, the state's
tensors, and one process's reference run on the global batch with its state per parameter."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch

from ..params import Float, Int, Spec, seed
from .models import mse_backward, storage_bytes

OPTIMIZERS: dict[str, tuple[type[Any], dict[str, Any]]] = {  # name -> (torch.optim class, its arguments)
    "sgd": (torch.optim.SGD, {"momentum": 0.9}), "adamw": (torch.optim.AdamW, {"weight_decay": 0.01})}


def state_tensors(state: dict, params=None) -> list[torch.Tensor]:
    """The tensors in an optimizer's ``state`` (of ``params`` only, when given)."""
    keys = state.keys() if params is None else [p for p in params if p in state]
    return [v for k in keys for v in state[k].values() if torch.is_tensor(v)]


def elementwise_state(state: dict, params: Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The optimizer state tensors shaped like their parameter (moments), and the rest (``step`` scalars)."""
    per_element: list[torch.Tensor] = []
    per_tensor: list[torch.Tensor] = []
    for p in params:
        for v in state.get(p, {}).values():
            if torch.is_tensor(v):
                (per_element if v.shape == p.shape else per_tensor).append(v)
    return per_element, per_tensor


def train_single(init: torch.nn.Module, batches: list, opt: str, lr: float) -> tuple[torch.nn.Module, dict]:
    """One process, no DDP, on the global batch of every step; its state per parameter tensor."""
    model = copy.deepcopy(init)
    cls, kwargs = OPTIMIZERS[opt]
    optimizer = cls(model.parameters(), lr=lr, **kwargs)
    for x, y in batches:
        optimizer.zero_grad(set_to_none=True)
        mse_backward(model, x, y)
        optimizer.step()
    by_key: Counter[str] = Counter()
    for s in optimizer.state.values():
        by_key.update({k: storage_bytes([v]) for k, v in s.items() if torch.is_tensor(v)})
    params = list(model.parameters())
    return model, {"state_per_param": [storage_bytes(state_tensors(optimizer.state, [p])) for p in params],
                   "state_by_key": dict(by_key),
                   "elementwise_state": storage_bytes(elementwise_state(optimizer.state, params)[0])}


def training_params(depth: Int, mistake: Spec) -> dict[str, Spec]:
    """The parameters chapter 13's labs share (the MLP's width, the batch, the steps, the learning rate, the
    seed) around the two that differ: how deep the MLP is and which reader's mistake to put in."""
    return {"width": Int(32, min=1, max=512, help="MLP 한 층의 너비"),
            "depth": depth,
            "per_rank_batch": Int(4, min=1, max=1024, help="랭크당 배치 B/N"),
            "steps": Int(3, min=1, max=20, help="학습 스텝 수 S"),
            "lr": Float(0.01, min=0.0, max=0.1, min_open=True, help="학습률 η (SGD 모멘텀 0.9, AdamW)"),
            "mistake": mistake,
            "seed": seed()}
