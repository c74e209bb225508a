"""A gallery of named ZeRO-1 bugs (chapter 13): each a small override of :class:`labs.ddp.ShardedOptimizer`.

Every class here is a mistake a reader can really make; the first three are also the mistakes chapter 13's
``zero`` lab measures (:mod:`labs.lessons.zero`). ``python -m labs grade labs/ddp/zero_bugs.py
--class NAME`` runs one on real ranks (a ``torch.optim.Optimizer`` is graded as a ZeRO-1 optimizer).
``BUGS`` is the one table of the gallery: each class, the lab's ``mistake=`` value, the grader's checks it
must fail (the first of them in the grader's order being its diagnosis) and what it does wrong.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from labs.ddp.gallery import Bug
from labs.ddp.zero import ShardedOptimizer

__all__ = ["BUGS", "IgnoresLaterGroup", "NoShare", "StepAllParams", "WrongOwner"]


class StepAllParams(ShardedOptimizer):
    """Mistake: every rank steps every parameter, so the optimizer state is not divided at all."""

    def is_mine(self, param: torch.Tensor) -> bool:
        return True


class NoShare(ShardedOptimizer):
    """Mistake: each rank updates its shard and never sends it: the others keep a stale copy."""

    def share_params(self) -> None:
        pass


class WrongOwner(ShardedOptimizer):
    """Mistake: every parameter is broadcast from rank 0, whoever updated it."""

    def share_params(self) -> None:
        for p in self.owner:
            dist.broadcast(p.detach(), group_src=0, group=self.process_group)


class IgnoresLaterGroup(ShardedOptimizer):
    """Builds its shard from the constructor's groups only: a group added later with ``add_param_group``
    shows in ``param_groups`` but is never stepped nor shared."""

    def __init__(self, params, optimizer_cls, **kwargs):
        super().__init__(params, optimizer_cls, **kwargs)
        self.built = True

    def add_param_group(self, param_group: dict) -> None:
        if not getattr(self, "built", False):
            super().add_param_group(param_group)
            return
        torch.optim.Optimizer.add_param_group(self, param_group)
        self.local_groups.append(None)


# 버그마다: zero 실습의 mistake= 값(없으면 None), 채점기에서 실패하는 확인(N=2, 첫 번째가 진단), 무엇을 잘못하는지
BUGS: dict[type[ShardedOptimizer], Bug] = {
    StepAllParams: Bug("step_all_params", ("state_divided",), "모든 랭크가 모든 파라미터를 업데이트한다"),
    NoShare: Bug("no_share", ("step_shares_params", "replicas_identical", "params_updated", "param_groups_honoured",
                              "matches_oracles"), "내 몫을 업데이트하고 보내지 않는다"),
    WrongOwner: Bug("wrong_owner", ("params_updated", "param_groups_honoured", "matches_oracles"),
                    "모든 파라미터를 랭크 0에서 브로드캐스트한다"),
    IgnoresLaterGroup: Bug(None, ("param_groups_honoured",), "add_param_group으로 나중에 더한 그룹을 업데이트하지 않는다"),
}
