"""ZeRO stage 1 in one class: every rank keeps optimizer state only for its own shard of the parameters.

Used under DDP: DDP's backward has already averaged the gradients, so every rank holds the same full
gradient. Each rank then updates only the parameters it owns (its optimizer state exists only for
them) and sends each updated parameter from its owner to everyone (``dist.broadcast``). Parameters and
gradients stay whole on every rank; only the optimizer state is divided by N.

Checkpoints: each rank holds only its shard of the state, so ``state_dict()`` refuses (with a Korean
error) until :meth:`ShardedOptimizer.consolidate_state_dict` has gathered every shard on one rank; that
rank's ``state_dict()`` is then the whole state, keyed by the parameter's index in ``param_groups`` as
one process's optimizer keys it, and ``load_state_dict`` takes from it the shard this rank owns, for
any number of ranks. :meth:`ShardedOptimizer.shard_state_dict` is this rank's shard alone, for one file
per rank (resumed with the same ranks and parameters).
"""

from __future__ import annotations

from collections import defaultdict
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
        self.consolidated: dict | None = None  # consolidate_state_dict가 이 랭크에 모은 전체 상태
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
        self.consolidated = None  # 모아 둔 상태는 이제 한 스텝 전의 것이다
        return loss

    # --- 체크포인트 -----------------------------------------------------------------------------------

    def shard_state_dict(self) -> dict:
        """This rank's shard: the state of the parameters it owns, keyed by their index in ``param_groups``."""
        return torch.optim.Optimizer.state_dict(self)  # self.state는 내 샤드의 상태뿐이다

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's shard on rank ``to`` (group rank) as one whole state dict. Every rank calls it."""
        shard = self.shard_state_dict()
        shards = [None] * self.world_size if self.rank == to else None
        dist.gather_object(shard["state"], shards, group=self.process_group, group_dst=to)
        if self.rank == to:  # 파라미터 번호는 모든 랭크에서 같으므로 샤드를 합치면 한 프로세스의 상태와 같은 모양이다
            self.consolidated = {"state": {i: s for part in shards for i, s in part.items()},
                                 "param_groups": shard["param_groups"]}

    def state_dict(self) -> dict:
        """The whole state, on the rank :meth:`consolidate_state_dict` gathered it on (since the last step)."""
        if self.consolidated is None:
            raise RuntimeError(
                f"ShardedOptimizer.state_dict(): 이 랭크(랭크 {self.rank})는 옵티마이저 상태 가운데 자기 샤드만 가지고 있어, 이것을 "
                "저장하면 다른 랭크의 상태를 잃습니다. 저장하기 전에 모든 랭크가 optimizer.consolidate_state_dict(to=0)을 "
                "부르고 랭크 0이 state_dict()를 저장하거나, 랭크마다 shard_state_dict()를 자기 파일에 저장하세요.")
        return self.consolidated

    def load_state_dict(self, state_dict: dict) -> None:
        """Take this rank's shard from a consolidated state dict (any number of ranks) or from this rank's own
        :meth:`shard_state_dict`; refuse a dict that lacks the state of a parameter this rank owns."""
        torch.optim.Optimizer.load_state_dict(self, state_dict)  # 번호 → 파라미터, 하이퍼파라미터도 되돌린다
        loaded = self.state  # 불러온 모든 파라미터의 상태(다른 랭크 몫 포함)
        mine = [p for group in self.param_groups for p in group["params"] if self.is_mine(p)]
        missing = [p for p in mine if p not in loaded]
        if loaded and missing:
            raise RuntimeError(
                f"ShardedOptimizer.load_state_dict(): 불러온 상태에 이 랭크(랭크 {self.rank})가 맡은 파라미터 {len(missing)}개의 "
                "상태가 없습니다. 다른 랭크의 샤드를 불러온 것입니다. consolidate_state_dict(to=0)로 모아 저장한 파일이나, "
                "이 랭크가 저장한 shard_state_dict()를 불러오세요.")
        self.state = defaultdict(dict, {p: loaded[p] for p in mine if p in loaded})  # 다시 내 샤드의 상태만
        if self.local is not None:
            self.local.state = self.state
