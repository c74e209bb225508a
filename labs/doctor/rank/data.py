"""Which samples each rank's DataLoaders yield, pass by pass (an "epoch" is one ``iter(loader)``).

For every batch the rank records a digest of each sample's contents (it works for any dataset, sampler,
worker count or hand-made shard) and, for map-style datasets, the sample indices the sampler chose,
followed through ``Subset`` to the indices of the underlying dataset. The loader's sampler (its type,
``shuffle``, ``seed``, ``num_replicas``, ``rank``) and the ``DistributedSampler``'s epoch at each pass are
recorded too. ``--batches K`` ends every pass after K batches (the loop then moves to its next epoch).
"""

from __future__ import annotations

import collections
import functools
import operator
from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, Subset
from torch.utils.data import dataloader as dl

from . import digest
from .record import Recorder


def _base(dataset: object) -> tuple[object, Callable[[int], int]]:
    """The dataset under a chain of ``Subset``s and the map from an index to its index there."""
    chain: list[Subset[Any]] = []
    while isinstance(dataset, Subset):
        chain.append(dataset)
        dataset = dataset.dataset

    def to_base(index: int) -> int:
        for subset in chain:
            index = int(subset.indices[index])
        return index

    return dataset, to_base


def _sampler(loader: DataLoader[Any]) -> object:
    inner = getattr(loader.batch_sampler, "sampler", None)
    return inner if isinstance(inner, DistributedSampler) else loader.sampler


def _describe_sampler(sampler: object) -> dict[str, object]:
    info: dict[str, object] = {"type": type(sampler).__name__}
    if isinstance(sampler, DistributedSampler):
        info.update(shuffle=sampler.shuffle, seed=sampler.seed, num_replicas=sampler.num_replicas,
                    rank=sampler.rank, drop_last=sampler.drop_last)
    return info


class Data:
    def __init__(self, rec: Recorder, batches: int | None) -> None:
        self.rec = rec
        self.batches = batches
        self._loaders = 0

    def install(self) -> None:
        self._patch_loader()
        self._patch_iterator()

    def _patch_loader(self) -> None:
        init = DataLoader.__init__
        data = self

        @functools.wraps(init)
        def __init__(self: DataLoader[Any], *args: Any, **kwargs: Any) -> None:
            init(self, *args, **kwargs)
            if not data.rec.busy:
                data._created(self)

        original_iter = DataLoader.__iter__

        @functools.wraps(original_iter)
        def __iter__(self: DataLoader[Any]) -> Any:
            it = original_iter(self)
            if hasattr(self, "_doctor_id") and not data.rec.busy:
                data._pass(self, it)
            return it

        DataLoader.__init__ = __init__  # type: ignore[method-assign]
        DataLoader.__iter__ = __iter__  # type: ignore[method-assign]

    def _created(self, loader: DataLoader[Any]) -> None:
        site = self.rec.reader.site()
        with self.rec.bookkeeping():
            ident = self._loaders
            self._loaders += 1
            object.__setattr__(loader, "_doctor_id", ident)
            object.__setattr__(loader, "_doctor_passes", 0)
            iterable = isinstance(loader.dataset, IterableDataset)
            base, to_base = _base(loader.dataset)
            object.__setattr__(loader, "_doctor_to_base", None if iterable else to_base)
            try:
                length: int | None = len(loader.dataset)  # type: ignore[arg-type]
            except TypeError:
                length = None
            self.rec.emit("loader", loader=ident, site=site, batch_size=loader.batch_size,
                          sampler=_describe_sampler(_sampler(loader)), iterable=iterable, length=length,
                          dataset=None if iterable else digest.dataset(base), workers=loader.num_workers)

    def _pass(self, loader: DataLoader[Any], it: Any) -> None:
        site = self.rec.reader.site()
        number = loader._doctor_passes  # type: ignore[attr-defined]
        object.__setattr__(loader, "_doctor_passes", number + 1)
        sampler = _sampler(loader)
        it._doctor_pass = (loader._doctor_id, number, loader._doctor_to_base,  # type: ignore[attr-defined]
                           loader.batch_size is not None or loader.batch_sampler is not None)
        it._doctor_count = 0
        self.rec.emit("pass", loader=loader._doctor_id, n=number, site=site,  # type: ignore[attr-defined]
                      epoch=sampler.epoch if isinstance(sampler, DistributedSampler) else None, step=self.rec.steps)

    def _patch_iterator(self) -> None:
        base = dl._BaseDataLoaderIter
        original_next, original_index, original_reset = base.__next__, base._next_index, base._reset
        data = self

        def _next_index(self: Any) -> Any:
            index = original_index(self)
            queue = self.__dict__.setdefault("_doctor_indices", collections.deque())
            queue.append(index)
            return index

        def _reset(self: Any, *args: Any, **kwargs: Any) -> None:
            self.__dict__.setdefault("_doctor_indices", collections.deque()).clear()
            original_reset(self, *args, **kwargs)

        def __next__(self: Any) -> Any:
            info = self.__dict__.get("_doctor_pass")
            if info is None or data.rec.busy:
                return original_next(self)
            if data.batches is not None and self._doctor_count >= data.batches:
                raise StopIteration
            batch = original_next(self)
            queue = self.__dict__.get("_doctor_indices")
            index = queue.popleft() if queue else None
            data._batch(info, self._doctor_count, batch, index)
            self._doctor_count += 1
            return batch

        base._next_index = _next_index  # type: ignore[method-assign]
        base._reset = _reset  # type: ignore[method-assign]
        base.__next__ = __next__  # type: ignore[method-assign]

    def _batch(self, info: tuple[int, int, Callable[[int], int] | None, bool], i: int, batch: object,
               index: Any) -> None:
        loader, number, to_base, batched = info
        with self.rec.bookkeeping():
            ids: list[int] | None = None
            if to_base is not None and index is not None:
                chosen = index if isinstance(index, (list, tuple)) else [index]
                try:
                    ids = [to_base(operator.index(x)) for x in chosen]
                except (TypeError, ValueError, IndexError):  # not integer indices (a custom sampler)
                    ids = None
            hashes = digest.samples(batch, batched)
            size = digest.batch_size(batch) if batched else 1
            self.rec.emit("batch", loader=loader, n=number, i=i, ids=ids, samples=hashes, b=size, step=self.rec.steps)
