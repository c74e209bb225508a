"""A correct DDP script written for GPUs, as a Trainer class: NCCL, LOCAL_RANK, set_device, .cuda(),
device_ids, torch.cuda.amp's GradScaler with unscale_ before clipping, a checkpoint saved on rank 0 and
loaded on every rank with map_location. The doctor runs it on CPU ranks by mapping CUDA to the CPU."""
import os

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(12, 32), nn.GELU(), nn.LayerNorm(32))
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        return self.head(self.body(x))


class Trainer:
    def __init__(self, epochs=2, batch_size=16):
        dist.init_process_group(backend="nccl")
        self.rank = dist.get_rank()
        self.local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(self.local_rank)
        self.device = torch.device("cuda", self.local_rank)
        torch.manual_seed(1234)
        data = TensorDataset(torch.randn(128, 12), torch.randint(0, 4, (128,)))
        self.sampler = DistributedSampler(data)
        self.loader = DataLoader(data, batch_size=batch_size, sampler=self.sampler, pin_memory=True)
        self.model = nn.parallel.DistributedDataParallel(Net().cuda(), device_ids=[self.local_rank])
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.scaler = torch.cuda.amp.GradScaler()
        self.epochs = epochs
        self.path = "trainer_ckpt.pt"

    def train_step(self, x, y):
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = nn.functional.cross_entropy(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return loss.detach()

    def save(self):
        if self.rank == 0:
            torch.save({"model": self.model.module.state_dict(), "optimizer": self.optimizer.state_dict()}, self.path)
        dist.barrier()

    def resume(self):
        state = torch.load(self.path, map_location={"cuda:0": f"cuda:{self.local_rank}"})
        self.model.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    def fit(self):
        for epoch in range(self.epochs):
            self.sampler.set_epoch(epoch)
            for x, y in self.loader:
                self.train_step(x, y)
            self.save()
        self.resume()
        dist.destroy_process_group()


if __name__ == "__main__":
    Trainer().fit()
