"""ZeRO stage 1 in one class: every rank keeps optimizer state only for its own shard of the parameters.

Used under DDP: DDP's backward has already averaged the gradients, so every rank holds the same full
gradient. Each rank then updates only the parameters it owns (its optimizer state exists only for
them) and sends each updated parameter from its owner to everyone (``dist.broadcast``). Parameters and
gradients stay whole on every rank; only the optimizer state is divided by N.

``state_dict()`` and ``load_state_dict()`` are rank-local: each rank saves and loads the state of its
own shard (save one file per rank, with the same world size and parameter order).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

import torch
import torch.distributed as dist


def assign_to_ranks(sizes: list[int], loads: list[int]) -> list[int]:
    """Greedy by size: the largest tensor first, each to the rank with the least so far (ties: lowest rank).

    ``loads`` (elements already assigned per rank) is updated in place; returns one rank per size, in
    the order given. Every rank computes the same answer from the same sizes: no communication.
    """
    owners = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: -sizes[i]):  # 안정 정렬: 크기가 같으면 앞의 것부터
        rank = loads.index(min(loads))
        owners[i] = rank
        loads[rank] += sizes[i]
    return owners


class ShardedOptimizer(torch.optim.Optimizer):
    """``optimizer_cls(**kwargs)`` over this rank's shard of ``params``; ``step`` then shares every parameter.

    ``param_groups`` lists all groups with all their parameters (what schedulers and ``zero_grad`` see);
    the wrapped optimizer ``local`` holds only this rank's parameters, so ``state`` is only its shard.
    """

    def __init__(self, params: Iterable, optimizer_cls: Callable[..., torch.optim.Optimizer],
                 process_group: dist.ProcessGroup | None = None, **kwargs: Any):
        self.process_group = process_group
        self.rank = dist.get_rank(process_group)
        self.world_size = dist.get_world_size(process_group)
        self.optimizer_cls, self.kwargs = optimizer_cls, kwargs
        self.owner: dict[torch.Tensor, int] = {}  # 파라미터 → 그것을 업데이트하는 랭크(그룹 안의 순번)
        self.loads = [0] * self.world_size  # 랭크마다 맡은 원소 수
        self.local: torch.optim.Optimizer | None = None  # 내 샤드만 가진 진짜 옵티마이저
        self.local_groups: list[dict | None] = []  # param_groups[i]의 내 몫(없으면 None)
        super().__init__(params, defaults=kwargs)  # 그룹마다 add_param_group을 부른다

    def is_mine(self, param: torch.Tensor) -> bool:
        return self.owner[param] == self.rank

    def add_param_group(self, param_group: dict) -> None:
        super().add_param_group(param_group)  # 기본값을 채우고 전체 그룹을 param_groups에 넣는다
        group = self.param_groups[-1]
        new = [p for p in group["params"] if p not in self.owner]
        for p, rank in zip(new, assign_to_ranks([p.numel() for p in new], self.loads)):
            self.owner[p] = rank
        mine = [p for p in group["params"] if self.is_mine(p)]
        local_group = None
        if mine:  # 내 몫이 있는 그룹만 로컬 옵티마이저에 넣는다: 상태는 이 파라미터에만 생긴다
            hyper = {k: v for k, v in group.items() if k != "params"}
            if self.local is None:
                self.local = self.optimizer_cls([{"params": mine, **hyper}], **self.kwargs)
                self.state = self.local.state  # 이 랭크의 상태 = 내 샤드의 상태
            else:
                self.local.add_param_group({"params": mine, **hyper})
            local_group = self.local.param_groups[-1]
        self.local_groups.append(local_group)

    def share_params(self) -> None:
        """Every parameter from its owner to every rank, one ``broadcast`` each, in the same order everywhere."""
        for p, owner in self.owner.items():
            dist.broadcast(p.detach(), group_src=owner, group=self.process_group)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()  # 모든 랭크가 부른다: DDP의 역전파(All-Reduce)가 여기 있을 수 있다
        for group, local in zip(self.param_groups, self.local_groups):
            if local is not None:  # 스케줄러가 바꾼 lr 등을 내 몫의 그룹에 옮긴다
                local.update({k: v for k, v in group.items() if k != "params"})
        if self.local is not None:
            self.local.step()  # 1) 내 샤드만 업데이트한다
        self.share_params()  # 2) 주인이 업데이트한 파라미터를 모두에게 보낸다
        return loss

    def state_dict(self) -> dict:
        """This rank's shard only (rank-local; see the module docstring)."""
        return self.local.state_dict() if self.local is not None else {"state": {}, "param_groups": []}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load what :meth:`state_dict` saved on this same rank."""
        if self.local is not None:
            self.local.load_state_dict(state_dict)
