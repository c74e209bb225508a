"""Chapter 6: the same training in one process, one step per global batch the N ranks' loaders would form."""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from labs.ddp.train_script import TrainConfig, count_correct, make_loader, make_model, sgd, train_one_epoch
from labs.tools.models import flat_parameters


def global_batches(train_set: TensorDataset, cfg: TrainConfig, world_size: int, epoch: int, shards: list):
    """Every step's global batch: the N ranks' mini-batches side by side, built by the ranks' own loaders.

    Appends each rank's sample order for this epoch to ``shards`` (to check it against the ranks' records).
    """
    loaders = []
    for rank in range(world_size):
        sampler, loader = make_loader(train_set, cfg, world_size, rank)
        sampler.set_epoch(epoch)
        shards.append(list(sampler))
        loaders.append(loader)
    for parts in zip(*loaders):
        yield torch.cat([x for x, _ in parts]), torch.cat([y for _, y in parts])


def train_reference(cfg: TrainConfig, world_size: int, train_set: TensorDataset, test_set: TensorDataset,
                    device: torch.device) -> dict:
    """The same training in ONE process, without DDP: one step per global batch of N·(B/N) samples."""
    model = make_model(cfg, device)  # 같은 시드: DDP가 브로드캐스트한 랭크 0의 초기값과 같다
    optimizer = sgd(model, cfg)
    x_test, y_test = (t.to(device) for t in test_set.tensors)
    history, orders = [], []
    for epoch in range(cfg.epochs):
        shards: list[list[int]] = []
        loss_sum, count = train_one_epoch(model, global_batches(train_set, cfg, world_size, epoch, shards),
                                          optimizer, device)
        history.append({"epoch": epoch + 1, "loss": loss_sum.item() / count,
                        "correct": count_correct(model, x_test, y_test), "total": len(y_test)})
        orders.append(shards)
    return {"history": history, "params": flat_parameters(model).tolist(), "orders": orders}

