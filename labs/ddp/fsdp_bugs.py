"""A gallery of named FSDP bugs (chapter 13): each a small override of :class:`labs.ddp.FullyShardedDP`.

Every class here is a mistake a reader can really make; the first three are also the mistakes chapter 13's
``fsdp`` lab measures (:mod:`labs.lessons.fsdp`). ``python -m labs grade labs/ddp/fsdp_bugs.py
--class NAME`` runs one on real ranks (a module with ``gather_full_params`` is graded as an FSDP).
``BUGS`` maps each name to the checks that must fail, the first of them in the grader's order being its
diagnosis.
"""

from __future__ import annotations

from labs.ddp.fsdp import FullyShardedDP

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


# 버그마다 실패하는 확인(N=2), 첫 번째가 진단: 테스트가 정확히 이 집합을 확인한다
BUGS = {
    "SumNotAverage": ("grads_averaged", "matches_single"),
    "FreeBeforeBackward": ("regathered_for_backward",),
    "GradsInComputeDtype": ("grads_fp32",),
    "NeverReshard": ("gathered_freed",),
}
