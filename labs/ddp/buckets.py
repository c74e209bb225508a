"""The reducer's bucket rule (chapters 7 and 9), in one place.

Gradients are packed into buckets in the order they become ready; a bucket closes as soon as its bytes
reach its cap. torch's DDP gives the first bucket a smaller cap (1 MiB) when ``bucket_cap_mb`` is not set
(``compute_bucket_assignment_by_size`` in reducer.cpp, torch 2.13). Chapter 7 predicts DDP's bucket count
with it, chapter 9's :class:`~labs.ddp.miniddp.BucketedDDP` builds its buckets with it, and the grader
converts ``bucket_cap_mb`` with the same :data:`MIB`.
"""

from __future__ import annotations

from typing import Callable

MIB = 1024 * 1024  # bucket_cap_mb의 단위: MiB


def param_bytes(p) -> int:
    return p.numel() * p.element_size()


def group_by_size(items: list, cap: int, first_cap: int | None = None,
                  nbytes: Callable[[object], int] = param_bytes) -> list[list]:
    """Consecutive ``items`` (parameters, or byte sizes with ``nbytes=int``) in groups of at least ``cap``
    bytes, the last one smaller; the first group closes at ``first_cap`` if given."""
    groups, current, total = [], [], 0
    limit = cap if first_cap is None else first_cap
    for item in items:
        current.append(item)
        total += nbytes(item)
        if total >= limit:
            groups.append(current)
            current, total, limit = [], 0, cap
    return groups + ([current] if current else [])
