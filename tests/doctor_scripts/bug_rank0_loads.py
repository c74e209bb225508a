"""Broken: the checkpoint is loaded on rank 0 only, after DDP has wrapped (and broadcast) the model, so the
other ranks keep their fresh weights: the replicas differ from the first step on."""
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
rank = dist.get_rank()
if rank == 0:
    torch.manual_seed(99)
    torch.save(torch.nn.Linear(5, 2).state_dict(), "pretrained.pt")
dist.barrier()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(5, 2))
if rank == 0:
    model.module.load_state_dict(torch.load("pretrained.pt"))  # doctor: replicas_differ
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(24, 5), torch.randint(0, 2, (24,)))
for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
if rank == 0:
    os.remove("pretrained.pt")
dist.destroy_process_group()
