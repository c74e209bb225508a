"""Reference implementations the reader builds in the later chapters (chapter 13: ZeRO stage 1)."""

from .zero import ShardedOptimizer, assign_to_ranks

__all__ = ["ShardedOptimizer", "assign_to_ranks"]
