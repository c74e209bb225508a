"""Broken (slow, not wrong): gradient accumulation over 4 micro-steps without no_sync, so DDP all-reduces the
gradients after every micro-step instead of once per optimizer step."""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

ACCUMULATE = 4
dist.init_process_group("gloo")
data = TensorDataset(torch.randn(64, 6), torch.randn(64, 1))
sampler = DistributedSampler(data)
loader = DataLoader(data, batch_size=2, sampler=sampler)
model = DDP(torch.nn.Linear(6, 1))
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for i, (x, y) in enumerate(loader):
        loss = torch.nn.functional.mse_loss(model(x), y) / ACCUMULATE  # doctor: accumulation_sync
        loss.backward()
        if (i + 1) % ACCUMULATE == 0:
            optimizer.step()
            optimizer.zero_grad()
dist.destroy_process_group()
