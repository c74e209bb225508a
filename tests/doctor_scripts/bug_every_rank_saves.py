"""Broken: a Trainer whose checkpoint is saved by every rank to the same file (no rank-0 guard)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Trainer:
    def __init__(self, out_dir="."):
        dist.init_process_group("gloo")
        self.model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        data = TensorDataset(torch.randn(40, 4), torch.randn(40, 1))
        self.sampler = DistributedSampler(data)
        self.loader = DataLoader(data, batch_size=5, sampler=self.sampler)
        self.path = os.path.join(out_dir, "checkpoint.pt")

    def epoch(self, n):
        self.sampler.set_epoch(n)
        for x, y in self.loader:
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()

    def checkpoint(self, n):
        torch.save({"epoch": n, "model": self.model.module.state_dict()}, self.path)  # doctor: same_file

    def run(self, epochs=2):
        for n in range(epochs):
            self.epoch(n)
            self.checkpoint(n)
        dist.destroy_process_group()


if __name__ == "__main__":
    Trainer().run()
