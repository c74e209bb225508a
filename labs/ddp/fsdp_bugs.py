"""A gallery of named FSDP bugs (chapter 13): each a small override of :class:`labs.ddp.FullyShardedDP`.

Every class here is a mistake a reader can really make; the first three are also the mistakes chapter 13's
``fsdp`` lab measures (:mod:`labs.lessons.fsdp`). ``python -m labs grade labs/ddp/fsdp_bugs.py
--class NAME`` runs one on real ranks (a module with ``gather_full_params`` is graded as an FSDP).
``BUGS`` is the one table of the gallery: each class, the lab's ``mistake=`` value, the grader's checks it
must fail (the first of them in the grader's order being its diagnosis) and what it does wrong.
"""

from __future__ import annotations

from labs.ddp.fsdp import FullyShardedDP
from labs.ddp.gallery import Bug

__all__ = ["BUGS", "FreeBeforeBackward", "GradsInComputeDtype", "NeverReshard", "SumNotAverage"]


class SumNotAverage(FullyShardedDP):
    """Mistake: the reduce-scatter's sum is stored as the gradient (N times the average)."""

    def reduce_scatter(self, weight, grad_full):
        return super().reduce_scatter(weight, grad_full) * self.world_size


class FreeBeforeBackward(FullyShardedDP):
    """Mistake: the gathered weight is freed after forward and never gathered again for backward."""

    def before_backward(self, weight):
        pass


class GradsInComputeDtype(FullyShardedDP):
    """Mistake: the shards (the optimizer's parameters) are kept in the compute dtype, so their grads are too."""

    def shard(self, layer, name):
        weight = super().shard(layer, name)
        if self.compute_dtype is not None:
            weight.shard.data = weight.shard.data.to(self.compute_dtype)
        return weight


class NeverReshard(FullyShardedDP):
    """Never gives the gathered weights back: every layer's full weight stays in memory, as under DDP."""

    def free(self, weight) -> None:
        pass


# 버그마다: fsdp 실습의 mistake= 값(없으면 None), 채점기에서 실패하는 확인(N=2, 첫 번째가 진단), 무엇을 잘못하는지
BUGS: dict[type[FullyShardedDP], Bug] = {
    SumNotAverage: Bug("sum_not_average", ("grads_averaged", "matches_single"), "Reduce-Scatter의 합을 N으로 나누지 않는다"),
    FreeBeforeBackward: Bug("free_before_backward", ("regathered_for_backward",),
                            "순전파 뒤 버린 가중치를 역전파 전에 다시 모으지 않는다"),
    GradsInComputeDtype: Bug("grads_in_compute_dtype", ("grads_fp32",), "샤드를 bfloat16으로 둔다(그래디언트도 bfloat16)"),
    NeverReshard: Bug(None, ("gathered_freed",), "모은 가중치를 버리지 않는다(DDP처럼 전체 가중치가 남는다)"),
}
