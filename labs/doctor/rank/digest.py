"""Bitwise fingerprints: of a tensor (replicas are compared by them), of each sample of a collated batch
(which samples a rank saw, whatever its dataset or sampler) and of a dataset's contents (whether two ranks
index the same dataset)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import torch

_SIZE = 8  # bytes of each digest: 16 hex digits


def _raw(t: torch.Tensor) -> bytes:
    data = t.detach()
    if data.layout != torch.strided:
        data = data.to_dense()
    flat = data.reshape(-1).contiguous().cpu()
    if flat.numel() == 0:
        return b""
    return flat.view(torch.uint8).numpy().tobytes()


def tensor(t: torch.Tensor) -> str:
    """A digest of the tensor's dtype, shape and every byte of its values."""
    h = hashlib.blake2b(digest_size=_SIZE)
    h.update(f"{t.dtype}{tuple(t.shape)}".encode())
    h.update(_raw(t))
    return h.hexdigest()


def leaves(obj: object) -> Iterator[object]:
    """Tensors and plain values of a nested batch (tuples, lists, dicts), in order."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for key in obj:
            yield from leaves(obj[key])
    elif isinstance(obj, (list, tuple)) and obj and all(isinstance(x, (torch.Tensor, list, tuple, dict)) for x in obj):
        for x in obj:
            yield from leaves(x)
    else:
        yield obj


def batch_size(batch: object) -> int | None:
    """The first dimension of the batch's first tensor (None when it has none)."""
    for leaf in leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1:
            return int(leaf.shape[0])
    return None


def samples(batch: object, batched: bool = True) -> list[str]:
    """One digest per sample of a collated batch: the rows of every tensor (and list) whose first dimension
    is the batch size, taken together. An unbatched item (``batch_size=None``) is one sample."""
    if not batched:
        return [whole([batch])]
    size = batch_size(batch)
    if size is None:
        return []
    rows = [hashlib.blake2b(digest_size=_SIZE) for _ in range(size)]
    for leaf in leaves(batch):
        if isinstance(leaf, torch.Tensor) and leaf.dim() >= 1 and leaf.shape[0] == size:
            block = leaf.detach().reshape(size, -1).contiguous().cpu()
            raw = block.view(torch.uint8).numpy() if block.numel() else None
            for i, h in enumerate(rows):
                h.update(raw[i].tobytes() if raw is not None else b"")
        elif isinstance(leaf, (list, tuple)) and len(leaf) == size:
            for h, x in zip(rows, leaf):
                h.update(repr(x).encode())
    return [h.hexdigest() for h in rows]


def whole(objs: list[Any]) -> str:
    """One digest of every tensor and plain value in ``objs`` (a forward's inputs)."""
    h = hashlib.blake2b(digest_size=_SIZE)
    for leaf in leaves(objs):
        if isinstance(leaf, torch.Tensor):
            h.update(tensor(leaf).encode())
        elif isinstance(leaf, (int, float, str, bool, type(None))):
            h.update(repr(leaf).encode())
    return h.hexdigest()


_PLAIN = (int, float, str, bool, bytes, type(None))


def _state(h: Any, value: object, depth: int) -> None:
    if isinstance(value, torch.Tensor):
        h.update(tensor(value).encode())
    elif type(value).__module__ == "numpy" and hasattr(value, "tobytes"):
        h.update(value.tobytes())
    elif isinstance(value, _PLAIN):
        h.update(repr(value).encode())
    elif isinstance(value, (list, tuple)) and depth < 3:
        h.update(f"[{len(value)}".encode())
        for x in value:
            _state(h, x, depth + 1)
    elif isinstance(value, dict) and depth < 3:
        for key in sorted(value, key=repr):
            h.update(repr(key).encode())
            _state(h, value[key], depth + 1)
    elif all(hasattr(value, a) for a in ("__dict__", "__getitem__", "__len__")) and depth < 3:
        h.update(dataset(value).encode())  # a wrapped dataset (Subset.dataset, ConcatDataset.datasets)


def dataset(ds: object) -> str:
    """A digest of a dataset's type, length and plain state (its tensors, arrays, file lists, flags): equal on
    two ranks when they index the same data, different when each rank built its own part."""
    h = hashlib.blake2b(digest_size=_SIZE)
    h.update(f"{type(ds).__module__}.{type(ds).__qualname__}".encode())
    try:
        h.update(str(len(ds)).encode())  # type: ignore[arg-type]
    except TypeError:
        pass
    state = getattr(ds, "__dict__", {})
    for key in sorted(state):
        h.update(key.encode())
        _state(h, state[key], 1)
    return h.hexdigest()
