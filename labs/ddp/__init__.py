"""Reference implementations the reader builds in the later chapters (chapter 13: ZeRO stage 1 and a small FSDP)."""

from .fsdp import FullyShardedDP
from .zero import ShardedOptimizer, assign_to_ranks

__all__ = ["FullyShardedDP", "ShardedOptimizer", "assign_to_ranks"]
