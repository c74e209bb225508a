"""Broken: the data is split with a DistributedSampler but the model is never wrapped in DDP, so each rank
steps with the gradients of its own shard and the replicas drift apart at the first step."""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
data = TensorDataset(torch.randn(32, 3), torch.randn(32, 1))
sampler = DistributedSampler(data)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in DataLoader(data, batch_size=4, sampler=sampler):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()  # doctor: replicas_differ
dist.destroy_process_group()
