"""The reducer's bucket rule (chapters 7 and 9), in one place.

Gradients are packed into buckets in the order they become ready; a bucket closes as soon as its bytes
reach its cap. torch's DDP gives the first bucket a smaller cap (1 MiB) when ``bucket_cap_mb`` is not set
(``compute_bucket_assignment_by_size`` in reducer.cpp, torch 2.13). Chapter 7 predicts DDP's bucket count
with it, chapter 9's :class:`~labs.ddp.miniddp.BucketedDDP` builds its buckets with it, and the grader
converts ``bucket_cap_mb`` with the same :data:`MIB`.
"""

from __future__ import annotations

from typing import Callable

import torch.distributed as dist
from torch.nn.parallel.distributed import _DEFAULT_BUCKET_CAP_MB

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


def ddp_bucket_caps(bucket_cap_mb: float | None = None) -> tuple[int, int]:
    """(first bucket, other buckets) byte caps torch's DDP gives its reducer for ``bucket_cap_mb``.

    Only when ``bucket_cap_mb`` is left unset (None) does the first bucket get the smaller
    ``dist._DEFAULT_FIRST_BUCKET_BYTES`` (1 MiB); an explicit cap applies to every bucket.
    """
    if bucket_cap_mb is None:
        return dist._DEFAULT_FIRST_BUCKET_BYTES, _DEFAULT_BUCKET_CAP_MB * MIB
    limit = int(bucket_cap_mb * MIB)
    return limit, limit
